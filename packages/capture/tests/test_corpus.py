"""Every program of ``tests/corpus`` against eager: fresh inputs, a second call with new
values, and a call with changed shapes; printed text and mutated arguments included."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import sys
import warnings
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch

CORPUS = Path(__file__).parent / "corpus"


def _load(path: Path) -> Any:
    if str(CORPUS) not in sys.path:  # the modules import their registration, _registry
        sys.path.insert(0, str(CORPUS))
    name = f"torchstrata_capture_corpus_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


PROGRAMS = [
    pytest.param(fn, make, expect, id=f"{path.stem}.{name}")
    for path in sorted(CORPUS.glob("[!_]*.py"))
    for name, fn, make, expect in _load(path).PROGRAMS
]


def _compare(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, equal_nan=True)
        assert actual.requires_grad == expected.requires_grad
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _compare(a, e)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            _compare(actual[key], expected[key])
    elif isinstance(expected, torch.nn.Module):
        _compare(dict(vars(actual)), dict(vars(expected)))
    elif type(expected).__module__ == "builtins" or isinstance(expected, torch.Size):
        assert actual == expected or (actual != actual and expected != expected)


def _run(fn: Any, args: tuple[Any, ...]) -> tuple[Any, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(*args)
    return result, out.getvalue()


def _check_calls(name: str, fn: Any, runner: Any, make: Any) -> None:
    for call, size in enumerate((4, 4, 6)):
        torch.manual_seed(zlib.crc32(name.encode()) + call)
        args = make(size)
        eager_args = copy.deepcopy(args)
        expected, expected_text = _run(fn, eager_args)
        actual, actual_text = _run(runner, args)
        _compare(actual, expected)
        _compare(list(args), list(eager_args))
        assert actual_text == expected_text


@pytest.mark.parametrize(("fn", "make", "expect"), PROGRAMS)
def test_corpus_program(fn, make, expect, capture_only, corpus_results, request):
    name = request.node.callspec.id
    runner = capture_only(fn)
    _check_calls(name, fn, runner, make)
    clean = not runner.breaks
    corpus_results[name] = list(runner.breaks)
    if expect == "clean":
        assert clean, runner.breaks
    elif expect == "break":
        assert not clean, "expected a graph break"


@pytest.mark.parametrize(("fn", "make", "expect"), PROGRAMS)
def test_corpus_program_through_runtime(fn, make, expect, request):
    """The same checks through ``torchstrata.runtime.compile(codegen="eager")``, when the
    runtime is installed (the isolated capture session has only capture and core)."""
    runtime = pytest.importorskip("torchstrata.runtime")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _check_calls(request.node.callspec.id, fn, runtime.compile(fn, codegen="eager"), make)
