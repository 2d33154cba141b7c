"""The ``torchstrata_capture`` hook is found through the entry point and captures."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torchstrata.core import CaptureResult, CompileOptions, create_plugin_manager


def test_hook_is_registered_and_captures():
    manager = create_plugin_manager()
    fn = lambda x, b: torch.softmax(F.gelu(x + b), -1)  # noqa: E731
    result = manager.hook.torchstrata_capture(
        fn=fn,
        args=(torch.randn(4, 8), torch.randn(8)),
        kwargs={},
        options=CompileOptions(),
        compile_segment=None,
    )
    assert isinstance(result, CaptureResult)
    assert [op.name for op in result.graphs[0].ops()] == [
        "operator.add", "torch.nn.functional.gelu", "torch.softmax",
    ]  # fmt: skip
