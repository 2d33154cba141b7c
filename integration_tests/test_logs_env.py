"""``TORCHSTRATA_LOGS`` set in the environment of a fresh process, real stages."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import torch
    import torchstrata.runtime as rt
    from torchstrata.capture import graph_break

    def with_break(x):
        y = torch.relu(x) + 1
        graph_break()
        return y * 2

    compiled = rt.compile(with_break, codegen="cpp")
    compiled(torch.randn(4, 8))
    compiled(torch.randn(5, 8))
    """
)


def _run(*argv: str, logs: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCHSTRATA_LOGS": logs}
    env.pop("TORCHSTRATA_DEBUG_DIR", None)
    return subprocess.run(
        [sys.executable, *argv], env=env, capture_output=True, text=True, timeout=300
    )


def test_logs_from_the_environment(tmp_path):
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    result = _run(str(script), logs="graph_breaks,recompiles,guards,output_code")
    assert result.returncode == 0, result.stderr
    err = result.stderr
    # the break with its reason, file:line and the source line itself
    assert f"[graph_breaks] graph break in with_break at {script}:8:" in err
    assert "    graph_break()" in err
    assert "[guards]" in err and "L['x']: Tensor, shape == (4, 8)" in err
    assert "[recompiles] recompiling with_break" in err and "tensor_match on L['x']" in err
    assert "[output_code] kernel" in err and 'extern "C"' in err
    assert "[graphs]" not in err and "[passes]" not in err  # only what was asked for
