"""FrameBinder.args_source: guard sources rewritten to read a positional call's arguments."""

from __future__ import annotations

import pytest
import torch

from torchstrata.runtime.frames import FrameBinder


class _Module(torch.nn.Module):
    def forward(self, x, y):
        return x + y


def _plain(x, y):
    return x * y


SOURCES = [
    "L['x']",
    "L['y'].weight['0'][3]",
    "L['self']._modules['0']._parameters['weight']",
    "L['z']._modules",
    "L.x",
    "L[0]",
    "L",
    "G['torch'].nn",
    "A[0]",
    "_self.training",
    "len(L['self']._modules['0'].normalized_shape)",
    "L['x'].__dict__['a'] or L['y'].__dict__['b'] or None",
]


@pytest.mark.parametrize("fn", [_plain, _Module().forward], ids=["function", "method"])
@pytest.mark.parametrize("source", SOURCES)
def test_read_chains_rewrite_as_the_parse_does(fn, source: str) -> None:
    """A plain read chain is rewritten without ast; in parentheses the same source
    takes the ast path: the two agree (None where ``L`` cannot be read from the call)."""
    binder = FrameBinder(fn)
    assert binder.args_source(source) == binder.args_source(f"({source})")


def test_reads_of_the_arguments_and_self() -> None:
    module = FrameBinder(_Module().forward)
    assert module.args_source("L['y'].shape") == "A[1].shape"
    assert module.args_source("L['self']._modules") == "_self._modules"
    assert module.args_source("L['other']") is None
    assert FrameBinder(_plain).args_source("L['x']") == "A[0]"
