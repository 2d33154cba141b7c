"""Log artifacts of a compile, the debug directory, explain()'s guard values and timings
(over the fake stages of ``conftest.py``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchstrata.runtime as rt
from torchstrata.core import interpret, parse


def demo_fn(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.gelu(x + b), -1)


def scaled(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x * scale


@pytest.fixture(autouse=True)
def _quiet_again():
    yield
    rt.set_logs()


@pytest.fixture
def with_pass(make_stages, make_pass_plugin):
    plugin, _ = make_pass_plugin("post_aot")
    return make_stages(extra=(("counting-pass", plugin),))


def test_artifacts_of_one_compile(with_pass, capsys):
    rt.set_logs("graphs,guards,output_code,passes,recompiles,perf_hints")
    compiled = with_pass.compile(demo_fn)
    x, b = torch.randn(4, 8), torch.randn(8)
    torch.testing.assert_close(compiled(x, b), demo_fn(x, b))
    err = capsys.readouterr().err
    assert "[graphs] capture-graph0 torch graph of demo_fn" in err and "graph torch {" in err
    assert "[graphs] autograd-forward aten graph" in err and "aten.gelu.default" in err
    assert "[guards] 2 guard(s) of demo_fn" in err
    assert "L['x']: Tensor, shape == (4, 8), stride == (8, 1)" in err
    assert "[passes] counting (post_aot):" in err
    assert "[output_code] kernel kernel_0 [cpp]" in err and "// fake kernel" in err
    compiled(torch.randn(5, 8), b)
    err = capsys.readouterr().err
    assert (
        "[recompiles] recompiling demo_fn" in err and "guard failed: tensor_match on L['x']" in err
    )


def test_perf_hint_for_ops_left_to_aten(stages, capsys):
    rt.set_logs("perf_hints")
    compiled = stages.compile(lambda a, w: a @ w)
    compiled(torch.randn(3, 4), torch.randn(4, 5))
    assert "op(s) run through ATen, not in generated kernels: aten.mm.default" in (
        capsys.readouterr().err
    )


def test_nothing_is_printed_by_default(with_pass, capsys):
    compiled = with_pass.compile(demo_fn)
    compiled(torch.randn(4, 8), torch.randn(8))
    compiled(torch.randn(5, 8), torch.randn(8))
    assert capsys.readouterr().err == ""


def test_debug_directory_holds_graphs_kernels_guards_and_timings(with_pass, tmp_path):
    compiled = with_pass.compile(demo_fn, options={"debug_dir": str(tmp_path)})
    x, b = torch.randn(4, 8), torch.randn(8)
    compiled(x, b)
    (root,) = tmp_path.iterdir()
    names = sorted(path.name for path in root.iterdir())
    assert names == [
        "000-capture-graph0.txt",
        "001-autograd-forward.txt",
        "002-post_aot-counting.txt",
        "003-decomp.txt",
        "guards.txt",
        "kernels",
        "timings.txt",
    ]
    # Every graph reads back and computes what the function does.
    for name in names[:4]:
        graph = parse((root / name).read_text())
        torch.testing.assert_close(interpret(graph, x, b)[0], demo_fn(x, b))
    assert "L['b']: Tensor, shape == (8,)" in (root / "guards.txt").read_text()
    assert "fake kernel" in (root / "kernels" / "kernel_0.cpp").read_text()
    timings = (root / "timings.txt").read_text()
    for stage in ("capture", "autograd", "decomp", "codegen"):
        assert f"stage {stage}: " in timings
    assert "pass counting (post_aot): " in timings


def test_debug_directory_from_the_logs_settings(stages, tmp_path):
    rt.set_logs(debug_dir=tmp_path / "dumps")
    stages.compile(demo_fn)(torch.randn(4, 8), torch.randn(8))
    (root,) = (tmp_path / "dumps").iterdir()
    assert (root / "000-capture-graph0.txt").exists()


def test_explain_shows_guard_values_and_timings(with_pass):
    report = rt.explain(with_pass.compile(scaled), torch.randn(64, 128), 0.1)
    assert [stage for stage, _ in report.stage_seconds] == [
        "capture",
        "autograd",
        "decomp",
        "codegen",
    ]
    assert all(seconds >= 0 for _, seconds in report.stage_seconds)
    (record,) = report.pass_records
    assert (record.name, record.stage) == ("counting", "post_aot")
    assert record.nodes_before == record.nodes_after == len(report.aten_graphs[0].nodes)
    text = str(report)
    assert "L['x']: Tensor, shape == (64, 128), stride == (128, 1)" in text
    assert "L['scale'] == 0.1" in text
    assert "compile time per stage:" in text and "counting (post_aot): " in text


def test_cache_artifact_tells_misses(stages, capsys):
    rt.set_logs("cache")
    compiled = stages.compile(demo_fn)
    compiled(torch.randn(4, 8), torch.randn(8))
    compiled(torch.randn(4, 8), torch.randn(8))  # a hit: nothing logged on the fast path
    err = capsys.readouterr().err
    assert err.count("no cached entry") == 1 and "no cached entry of 0 holds" in err
    assert "[cache] demo_fn" in err and "1 kernel(s)" in err


def test_a_long_compile_shows_progress_when_asked(stages, monkeypatch, capsys):
    from torchstrata.core import progress_report as core_progress
    from torchstrata.runtime import compile_trace

    monkeypatch.setattr(compile_trace, "PROGRESS_DELAY", 0.0)  # every compile is "long"
    monkeypatch.setattr(core_progress, "_installed", lambda module: False)  # plain lines
    monkeypatch.setattr(core_progress, "PLAIN_INTERVAL", 0.0)
    compiled = stages.compile(demo_fn)
    compiled(torch.randn(4, 8), torch.randn(8))
    assert capsys.readouterr().err == ""  # stderr is not a terminal: off
    rt.set_logs(progress=True)
    compiled(torch.randn(5, 8), torch.randn(8))
    err = capsys.readouterr().err
    for stage in ("capture", "autograd", "decomp", "codegen"):
        assert "torchstrata: compiling demo_fn (" in err and f": {stage} (" in err
    assert "done in" in err


def test_a_debug_dir_that_cannot_be_made_is_named(stages, tmp_path):
    taken = tmp_path / "a-file"
    taken.write_text("")
    compiled = stages.compile(demo_fn, options={"debug_dir": str(taken)})
    with pytest.raises(ValueError, match=r"debug_dir=.*a-file.*cannot make"):
        compiled(torch.randn(4, 8), torch.randn(8))
