"""A third-party inductor backend, installed for real, is selected by name.

``examples/strata_numpy_backend`` is pip-installed into a temporary directory and used
from a fresh interpreter with that directory on PYTHONPATH: its entry point registers
the ``numpy`` backend through the inductor's ``torchstrata_inductor_backends`` hook, and
``codegen="numpy"`` compiles with it. Results are compared with eager PyTorch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BACKEND_SOURCE = ROOT / "examples" / "strata_numpy_backend"

#: Run once by :func:`script_run` for both tests (one torch import instead of two): first
#: an unknown ``codegen`` name through the plugin manager (its error printed on one line,
#: ``unknown-backend`` and the JSON string of its type and message), then each case compiled with the numpy backend against eager.
SCRIPT = textwrap.dedent(
    """
    import json
    import warnings

    import torch
    import torch.nn.functional as F

    import torchstrata.runtime as rt
    from torchstrata.core import CompileOptions, GraphBuilder, GraphContract, Level, TensorMeta
    from torchstrata.core import create_plugin_manager, prim

    warnings.simplefilter("error")  # a fallback to eager would be a failure here

    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4,), torch.float32))
    graph = b.build([b.call(prim("exp"), x)])
    manager = create_plugin_manager()
    try:
        manager.hook.torchstrata_codegen(
            graph=graph,
            device=torch.device("cpu"),
            options=CompileOptions(codegen="fortran"),
            contract=GraphContract(),
        )
    except Exception as error:
        print("unknown-backend", json.dumps(f"{type(error).__name__} {error}"))

    torch.manual_seed(0)
    cases = {
        "softmax_gelu": (
            lambda x, b: torch.softmax(F.gelu(x + b), -1), (torch.randn(8, 32), torch.randn(32))
        ),
        "layer_norm": (
            lambda x, w, b: F.layer_norm(x, (32,), w, b),
            (torch.randn(8, 32), torch.randn(32), torch.randn(32)),
        ),
        "cross_entropy": (
            lambda x, t: F.cross_entropy(x, t), (torch.randn(8, 16), torch.randint(0, 16, (8,)))
        ),
        "permute_add": (
            lambda x, y: x.permute(1, 0, 2) + y, (torch.randn(4, 8, 16), torch.randn(8, 4, 16))
        ),
        "matmul_epilogue": (
            lambda x, w, b: torch.relu(x @ w + b),
            (torch.randn(8, 16), torch.randn(16, 32), torch.randn(32)),
        ),
        "integer_max": (lambda a: (a * 3 + 1).amax(-1), (torch.randint(-5, 5, (4, 8)),)),
    }
    for name, (fn, args) in cases.items():
        compiled = rt.compile(fn, codegen="numpy")
        torch.testing.assert_close(compiled(*args), fn(*args))
        report = rt.explain(compiled, *args)
        backends = {kernel.backend for kernel in report.kernels}
        assert backends == {"numpy"}, (name, backends)
        print(name, len(report.kernels), ",".join(report.eager_ops))
    """
)


@pytest.fixture(scope="module")
def backend_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example backend installed (without dependencies) into a fresh directory."""
    target = tmp_path_factory.mktemp("numpy_backend")
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target"]
    command.append(str(target))
    if importlib.util.find_spec("hatchling") is not None:
        command.append("--no-build-isolation")  # works offline when hatchling is at hand
    result = subprocess.run(
        [*command, str(BACKEND_SOURCE)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"pip install failed:\n{result.stdout}\n{result.stderr}"
    return target


@pytest.fixture(scope="module")
def script_run(backend_path: Path) -> subprocess.CompletedProcess[str]:
    """:data:`SCRIPT`'s run in a fresh interpreter with the backend on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(backend_path), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )


def test_the_numpy_backend_is_selected_by_name_and_matches_eager(script_run) -> None:
    result = script_run
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    lines.pop("unknown-backend", None)
    assert set(lines) == {
        "softmax_gelu",
        "layer_norm",
        "cross_entropy",
        "permute_add",
        "matmul_epilogue",
        "integer_max",
    }
    kernels, eager_ops = lines["matmul_epilogue"].split(" ")[0], lines["matmul_epilogue"]
    assert int(kernels) >= 1 and "aten.mm.default" in eager_ops  # the epilogue is a kernel


def test_an_unknown_backend_name_lists_the_registered_ones(script_run) -> None:
    result = script_run
    prefix = "unknown-backend "
    found = [line[len(prefix) :] for line in result.stdout.splitlines() if line.startswith(prefix)]
    assert found, (result.stdout, result.stderr)
    error = json.loads(found[0])
    assert error.startswith("CodegenError codegen='fortran'"), error
    assert "registered: cpp, eager, numpy, triton" in error
