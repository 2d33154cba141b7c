"""``TRITON_INTERPRET`` is set only while an interpreted kernel is decorated or launched."""

from __future__ import annotations

import os

import pytest
import torch

from torchstrata.core import CompileOptions, interpret
from torchstrata.inductor import compile_graph

triton = pytest.importorskip("triton")


@pytest.mark.parametrize("before", [None, "0"])
def test_running_triton_on_the_cpu_leaves_the_variable_as_it_was(
    ind, monkeypatch, tmp_path, before
):
    """Left set, it made every kernel decorated later in the process an interpreted one:
    the runtime's GPU gradient scaling (wrong gradients), the user's own kernels and
    torch.compile's."""
    if before is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", before)
    graph = ind.layer_norm_rows(5, 300)
    options = CompileOptions(codegen="triton", cache_dir=str(tmp_path))
    compiled = compile_graph(graph, "cpu", options)
    for _ in range(2):  # the first call picks the configuration and launches, then launches
        x = torch.randn(5, 300)
        for got, want in zip(compiled(x), interpret(graph, x)):
            torch.testing.assert_close(got, want)
        assert os.environ.get("TRITON_INTERPRET") == before

    @triton.jit
    def later(x):
        pass

    assert isinstance(later, triton.runtime.JITFunction)  # compiled, not interpreted


def test_gpu_code_is_refused_by_name_when_triton_was_imported_interpreted(monkeypatch):
    """With ``TRITON_INTERPRET=1`` set when Triton was imported, a GPU compile failed on
    "Unsupported function referenced: InterpretedFunction"; now the error says why."""
    import subprocess
    import sys

    from torchstrata.inductor import compile as compile_module
    from torchstrata.inductor.codegen.triton import env as triton_env

    code = "from torchstrata.inductor.codegen.triton.env import library_compiled as c; print(c())"
    for value, want in (("1", "False"), ("0", "True")):
        env = {**os.environ, "TRITON_INTERPRET": value}
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert run.stdout.strip() == want, run.stderr
    monkeypatch.setattr(triton_env, "library_compiled", lambda: False)
    with pytest.raises(compile_module.CodegenError, match="TRITON_INTERPRET=1"):
        compile_module.choose_backend("cuda", CompileOptions(codegen="triton"))
    compile_module.choose_backend("cpu", CompileOptions(codegen="triton"))  # the interpreter
