"""A symbolic lowering's Triton kernel tunes once per power-of-two bucket of its rows
(``codegen/triton/sized_launch.py``): sizes of one bucket share its choice, a size of
another bucket tunes again, under a choice-cache key of its own."""

from __future__ import annotations

import re

import attrs

from torchstrata.inductor.codegen.triton.sized_launch import SizedKernel
from torchstrata.inductor.codegen.triton.tuning import Config, rows_bucket


@attrs.frozen
class _Cache:
    """A choice cache whose key is a function of the rows' bucket (as ``tuning_key``)."""

    key: str

    def at_rows(self, rows: int) -> _Cache:
        return _Cache(f"{rows_bucket(rows):032x}")


class _Tuned:
    """What ``SizedKernel`` uses of a ``TunedKernel``: rows and sizes as expressions, a
    choice cache, a first call that 'tunes' (picks XBLOCK from the rows) and ``bind``."""

    def __init__(self) -> None:
        self.rows = "s0 * 4"
        self.sizes = {"rnumel": "s1"}
        self.choice_cache = _Cache("0123456789abcdef0123456789abcdef")
        self.chosen: Config | None = None
        self.pending = None
        self.tunings: list[tuple[int, str]] = []
        self.launches: list[tuple[int, int]] = []
        self.run = self._first_call

    def _first_call(self, *tensors: object) -> None:
        self.tunings.append((self.rows, self.choice_cache.key))
        self.chosen = Config(min(self.rows, 64), 128, 4, True)
        self.run = self.bind(self.chosen)
        self.run(*tensors)

    def bind(self, config: Config):
        def launch(*tensors: object) -> None:
            self.launches.append((self.rows, config.xblock))

        return launch


def test_each_bucket_of_rows_tunes_once():
    tuned = _Tuned()
    kernel = SizedKernel(tuned, ("s0", "s1"))
    for s0 in (3, 4, 5, 9, 12, 16, 3):  # rows 12, 16 | 20 | 36, 48, 64 (buckets 16, 32, 64)
        kernel.run("buf", s0, 128)
    tunings = tuned.tunings  # shallow copies per size share the stub's lists
    assert [rows for rows, _ in tunings] == [12, 20, 36]  # the first size of each bucket
    keys = {key for _, key in tunings}
    assert len(keys) == 3  # a cache key per bucket, hex digits as the artifact store takes
    assert all(re.fullmatch(r"[0-9a-f]{16,128}", key) for key in keys), keys
    assert sorted(kernel.chosen) == [16, 32, 64]
    assert kernel.chosen[16].xblock == 12 and kernel.chosen[64].xblock == 36
    # a later size of a bucket launches its bucket's choice, with its own rows
    launched = tuned.launches
    assert (16, 12) in launched and (64, 36) in launched and (48, 36) in launched
