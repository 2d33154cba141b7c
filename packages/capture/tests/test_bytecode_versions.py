"""Every instruction of the test corpus has a handler, under CPython 3.11, 3.12 and 3.13.

The corpus is the functions in this test directory; each interpreter compiles the
sources itself (torch is not needed for that), so 3.12's and 3.13's instruction sets are
checked even where torch for them is not installed.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchstrata.capture import RUNNABLE_OPCODES, SUPPORTED_OPCODES

_LIST_OPCODES = r"""
import dis, inspect, json, sys

def walk(code):
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            yield from walk(const)

names = set()
for path in sys.argv[1:]:
    module = compile(open(path).read(), path, "exec")
    for code in walk(module):
        if not code.co_flags & inspect.CO_OPTIMIZED:  # module and class bodies
            continue
        bytecode = dis.Bytecode(code)
        # Exception handlers sit after the normal path; capture never raises into them.
        handlers = [entry.target for entry in bytecode.exception_entries]
        end = min(handlers, default=float("inf"))
        names.update(inst.opname for inst in bytecode if inst.offset < end)
print(json.dumps(sorted(names)))
"""

_HERE = Path(__file__).parent
_CORPUS = sorted(str(path) for path in [*_HERE.glob("test_*.py"), *_HERE.glob("corpus/*.py")])


#: Only generator bodies use these; those never run for real (they are not captured at
#: the top level, and inlined ones run to completion at capture time).
_GENERATOR_ONLY = {"RETURN_GENERATOR", "YIELD_VALUE", "SEND", "END_SEND", "CLEANUP_THROW"}


def _python(version: str) -> str | None:
    """A CPython ``version`` interpreter (pyenv's or on PATH), or None."""
    pattern = os.path.expanduser(f"~/.pyenv/versions/{version}*/bin/python")
    for candidate in [*sorted(glob.glob(pattern)), shutil.which(f"python{version}")]:
        if (
            candidate
            and subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0
        ):
            return candidate
    return None


def _opcodes(python: str) -> set[str]:
    output = subprocess.run(
        [python, "-c", _LIST_OPCODES, *_CORPUS], check=True, capture_output=True, text=True
    ).stdout
    return set(json.loads(output))


def test_running_interpreter_instruction_set_is_covered():
    assert _opcodes(sys.executable) - SUPPORTED_OPCODES == set()


def test_every_instruction_can_also_run_for_real():
    """After a graph break the rest of a function may run instruction by instruction."""
    handlers = {"PUSH_EXC_INFO", "POP_EXCEPT", "CHECK_EXC_MATCH", "RERAISE", "WITH_EXCEPT_START"}
    needed = (_opcodes(sys.executable) | handlers) - _GENERATOR_ONLY
    assert needed - RUNNABLE_OPCODES == set()


def test_python_312_instruction_set_is_covered():
    python = _python("3.12")
    if python is None:
        pytest.skip("no CPython 3.12 interpreter found")
    names = _opcodes(python)
    assert {"RETURN_CONST", "LOAD_FAST_AND_CLEAR", "END_FOR"} & names  # really 3.12 bytecode
    assert names - SUPPORTED_OPCODES == set()
    assert names - _GENERATOR_ONLY - RUNNABLE_OPCODES == set()


def test_python_313_instruction_set_is_covered():
    python = _python("3.13")
    if python is None:
        pytest.skip("no CPython 3.13 interpreter found")
    names = _opcodes(python)
    assert {"LOAD_FAST_LOAD_FAST", "CALL_KW", "TO_BOOL"} <= names  # really 3.13 bytecode
    assert names - SUPPORTED_OPCODES == set()
    assert names - _GENERATOR_ONLY - RUNNABLE_OPCODES == set()
