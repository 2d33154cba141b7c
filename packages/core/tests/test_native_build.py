"""Small CPython extensions built once, kept in the artifact store, imported from it by
later loads; failed builds recorded (decision 0510)."""

from __future__ import annotations

import logging
import shutil

import pytest

from torchstrata.core import native_build
from torchstrata.core.artifacts import CacheSettings
from torchstrata.core.native_build import Extension, NativeBuildError, extension_key

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject* answer(PyObject*, PyObject*) { return PyLong_FromLong(ANSWER); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, nullptr}, {nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "torchstrata_test_answer", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_torchstrata_test_answer(void) { return PyModule_Create(&module); }
"""
#: No torch library: the test compiles in a fraction of a second.
ANSWER = Extension("torchstrata_test_answer", SOURCE, "1", (), ("ANSWER=42",))


@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")), reason="no C++ compiler")
def test_an_extension_is_built_once_then_read_from_the_store(monkeypatch, tmp_path):
    settings = CacheSettings.resolve(str(tmp_path))
    assert native_build.load_extension(ANSWER, settings).answer() == 42

    def fail(extension, command, paths):
        raise AssertionError("built again")

    monkeypatch.setattr(native_build, "compile_extension", fail)
    assert native_build.load_extension(ANSWER, settings).answer() == 42
    assert list((tmp_path / "v1" / "native").rglob("*.so"))


def test_a_failed_build_is_recorded_and_not_tried_again(monkeypatch, tmp_path):
    builds = []

    def fail(extension, command, paths):
        builds.append(extension.name)
        raise NativeBuildError("compiling failed: no Python.h")

    monkeypatch.setattr(native_build, "compile_extension", fail)
    settings = CacheSettings.resolve(str(tmp_path))
    with pytest.raises(NativeBuildError, match=r"no Python\.h"):
        native_build.load_extension(ANSWER, settings)
    with pytest.raises(NativeBuildError, match=r"an earlier build failed.*no Python\.h"):
        native_build.load_extension(ANSWER, settings)
    assert builds == [ANSWER.name]


def test_no_compiler_is_a_build_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", "no-such-compiler-torchstrata")
    with pytest.raises(NativeBuildError, match="no-such-compiler"):
        native_build.load_extension(ANSWER, CacheSettings.resolve(str(tmp_path)))


def test_the_key_covers_source_libraries_macros_and_compiler():
    command, version = ("g++",), "g++ 12"
    key = extension_key(ANSWER, command, version)
    others = [
        Extension(ANSWER.name, ANSWER.source + " ", "1", (), ANSWER.defines),
        Extension(ANSWER.name, ANSWER.source, "2", (), ANSWER.defines),
        Extension(ANSWER.name, ANSWER.source, "1", ("c10",), ANSWER.defines),
        Extension(ANSWER.name, ANSWER.source, "1", (), ("ANSWER=41",)),
    ]
    assert len({key, *(extension_key(other, command, version) for other in others)}) == 5
    assert extension_key(ANSWER, ("clang++",), version) != key
    assert extension_key(ANSWER, command, "g++ 13") != key


def test_once_per_process_keeps_the_value_or_the_reason(caplog):
    calls = []

    def make():
        calls.append(1)
        return object()

    once = native_build.OncePerProcess(logging.getLogger("torchstrata.test"), "helper off")
    value = once.get(make)
    assert value is not None and once.get(make) is value and len(calls) == 1
    assert once.reason is None

    def fail():
        calls.append(1)
        raise NativeBuildError("no compiler")

    failing = once.fresh()
    with caplog.at_level(logging.INFO, logger="torchstrata.test"):
        assert failing.get(fail) is None
        assert failing.get(fail) is None  # not tried again
    assert len(calls) == 2 and failing.reason == "no compiler"
    assert [r.getMessage() for r in caplog.records] == ["helper off: no compiler"]
