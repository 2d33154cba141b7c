"""Random small programs compiled with C++ and with Triton (its interpreter) against eager.

Each example is a seed that :func:`.programs.make_program` turns into a program (see
:mod:`.programs` for the ops, dtypes, shapes and layouts and how results are compared).
CI runs :data:`CI_EXAMPLES` new random seeds per backend (about 40 s each on 2 cores; the
seeds differ between runs, hypothesis' database replays a failing one first). A failure
prints the program's source and the command that replays it and names the first wrong
stage with the shrunk graph (``python -m integration_tests.fuzz.programs --seed N``).
A longer local run: ``TORCHSTRATA_PROGRAM_FUZZ_EXAMPLES=500 pytest integration_tests/fuzz``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from .programs import check_program

#: Seeds per backend in CI (each compiles one program: ~2 s with C++ on 2 busy cores).
CI_EXAMPLES = 15
_EXAMPLES = int(os.environ.get("TORCHSTRATA_PROGRAM_FUZZ_EXAMPLES", CI_EXAMPLES))

FUZZ_SETTINGS = settings(
    max_examples=_EXAMPLES,
    deadline=None,
    # the seed is the whole example: nothing to shrink (the minifier shrinks the graph)
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.triton)])
@FUZZ_SETTINGS
@given(seed=st.integers(min_value=0, max_value=2**31 - 1))
def test_random_programs_match_eager(tmp_path_factory, codegen, seed):
    check_program_with_seed(seed, codegen, str(tmp_path_factory.getbasetemp() / "kernels"))


def check_program_with_seed(seed: int, codegen: str, cache_dir: str) -> None:
    """The program of ``seed`` compiled with ``codegen`` against eager."""
    from .programs import make_program

    check_program(make_program(seed), codegen, cache_dir)
