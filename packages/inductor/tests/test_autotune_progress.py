"""Autotuning shows its progress on stderr (GPU-only code, driven here with a fake kernel
and a fake timer on the CPU)."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import set_logs

triton_tuning = pytest.importorskip("torchstrata.inductor.codegen.triton.tuning")


class FakeJit:
    """A jit function's stand-in: ``fn[grid](*args, **constants)`` records the call."""

    __name__ = "triton_fused_add"

    def __init__(self) -> None:
        self.launched: list[dict] = []

    def __getitem__(self, grid):
        def launch(*args, **constants):
            self.launched.append(constants)

        return launch


@pytest.fixture(autouse=True)
def _quiet_again():
    yield
    set_logs()


def test_autotuning_reports_each_config_and_picks_the_fastest(monkeypatch, capsys):
    from torchstrata.core import progress_report

    configs = [triton_tuning.Config(1, rblock, 4, True) for rblock in (256, 512, 1024)]
    times = {256: 3.0, 512: 1.0, 1024: 2.0}
    jit = FakeJit()
    kernel = triton_tuning.TunedKernel({configs[0].variant: jit}, configs, 8, None, False)

    def fake_bench(fn, **kwargs):
        fn()
        return times[jit.launched[-1]["RBLOCK"]]

    monkeypatch.setattr(triton_tuning, "do_bench", fake_bench)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(progress_report, "_installed", lambda module: False)  # plain lines
    monkeypatch.setattr(progress_report, "PLAIN_INTERVAL", 0.0)
    set_logs(progress=True)
    best = kernel._benchmark((torch.zeros(8),))
    assert best == configs[1]
    err = capsys.readouterr().err
    assert "torchstrata: autotuning triton_fused_add [1/3]: Config(xblock=1, rblock=256" in err
    assert "[3/3]: Config(xblock=1, rblock=1024" in err
    assert "autotuning triton_fused_add: done in" in err
