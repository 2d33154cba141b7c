"""The golden corpus (``golden/``): every stored kernel source is what the compiler
generates now. On a deliberate change, regenerate with
``python packages/inductor/tests/golden_kernels.py --update`` and review the diff."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _sibling_module(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


golden = _sibling_module("golden_kernels")


def test_the_corpus_is_large_enough():
    assert len(golden.cases()) >= 30


@pytest.mark.parametrize("backend_name", sorted(golden.SUFFIXES))
@pytest.mark.parametrize("name", golden.cases())
def test_generated_source_matches_the_golden_file(name, backend_name):
    difference = golden.diff(name, backend_name)
    assert not difference, (
        f"the {backend_name} kernels generated for golden/{name}.prims changed; if that is "
        "intended, run `python packages/inductor/tests/golden_kernels.py --update` and "
        f"review the diff:\n{difference}"
    )


def test_the_cpp_preludes_match_their_golden_file():
    difference = golden.prelude_diff()
    assert not difference, (
        "the C++ preludes changed; if that is intended, run "
        "`python packages/inductor/tests/golden_kernels.py --update` and review the diff:\n"
        f"{difference}"
    )


def test_a_cpp_golden_names_its_preludes_instead_of_holding_them():
    source = golden.PRELUDE + golden.HALF_PRELUDE + 'extern "C" void kernel0() {}\n'
    stripped = golden.without_preludes(source)
    assert (
        stripped
        == '// prelude + fp16 conversions: golden/prelude.cpp\nextern "C" void kernel0() {}\n'
    )
    with pytest.raises(ValueError, match="does not start with the prelude"):
        golden.without_preludes('extern "C" void kernel0() {}\n')
