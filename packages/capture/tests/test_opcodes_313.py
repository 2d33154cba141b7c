"""The handlers of the instructions CPython 3.13 added, symbolic and run for real.

They are driven directly here (with instructions built by hand), so they are tested
under every interpreter; under 3.13 the last test also captures a function that
compiles to them (``nox -s tests-py313`` runs the whole capture suite there).
"""

from __future__ import annotations

import dis
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from torchstrata.capture.concrete_313 import PY313_STEPS
from torchstrata.capture.concrete_flow import FLOW_STEPS
from torchstrata.capture.concrete_state import State
from torchstrata.capture.frame import Frame
from torchstrata.capture.opcodes_313 import PY313_HANDLERS
from torchstrata.capture.opcodes_data import DATA_HANDLERS
from torchstrata.capture.opcodes_flow import FLOW_HANDLERS
from torchstrata.capture.rebuild import NULL_VALUE
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import (
    NULL,
    CellVar,
    ConstVar,
    DictVar,
    FunctionVar,
    ObjectVar,
    SequenceVar,
    python_value,
)


def _scaled(a, *, scale=1):
    return a * scale


def _outer():
    k = 5

    def inner():
        return k

    return inner


def _inst(opname: str, arg: int | None = None, argval: object = None) -> SimpleNamespace:
    return SimpleNamespace(opname=opname, arg=arg, argval=argval, argrepr="")


def _frame(code: types.CodeType = _scaled.__code__, **locals_: object) -> Frame:
    bound = {name: ConstVar(value) for name, value in locals_.items()}
    return Frame(Tracer(globals()), code, globals(), None, bound, ())


def _values(frame: Frame) -> list[object]:
    return [python_value(var) for var in frame.stack]


def test_fused_local_loads_and_stores():
    frame = _frame(a=1, b=2)
    PY313_HANDLERS["LOAD_FAST_LOAD_FAST"](frame, _inst("LOAD_FAST_LOAD_FAST", 1, ("a", "b")))
    assert _values(frame) == [1, 2]
    # the first name takes the top of the stack: x = 2, y = 1
    PY313_HANDLERS["STORE_FAST_STORE_FAST"](frame, _inst("STORE_FAST_STORE_FAST", 1, ("x", "y")))
    assert (python_value(frame.locals["x"]), python_value(frame.locals["y"])) == (2, 1)
    frame.push(ConstVar(7))
    PY313_HANDLERS["STORE_FAST_LOAD_FAST"](frame, _inst("STORE_FAST_LOAD_FAST", 1, ("z", "x")))
    assert python_value(frame.locals["z"]) == 7 and _values(frame) == [2]
    with pytest.raises(Unsupported, match="'missing' referenced before assignment"):
        PY313_HANDLERS["LOAD_FAST_LOAD_FAST"](
            frame, _inst("LOAD_FAST_LOAD_FAST", 1, ("a", "missing"))
        )


def test_store_of_null_clears_the_name():
    frame = _frame(v=3)
    frame.stack.extend([NULL, ConstVar(1)])
    PY313_HANDLERS["STORE_FAST_STORE_FAST"](frame, _inst("STORE_FAST_STORE_FAST", 1, ("w", "v")))
    assert "v" not in frame.locals and python_value(frame.locals["w"]) == 1


def test_call_kw_and_null_above_the_callable():
    frame = _frame()
    frame.stack.extend([ObjectVar(_scaled), NULL, ConstVar(3), ConstVar(4), ConstVar(("scale",))])
    PY313_HANDLERS["CALL_KW"](frame, _inst("CALL_KW", 2))
    assert _values(frame) == [12] and frame.kw_names == ()
    frame.stack[:] = [ObjectVar(_scaled), NULL, ConstVar(5)]  # 3.13's CALL layout
    FLOW_HANDLERS["CALL"](frame, _inst("CALL", 1))
    assert _values(frame) == [5]
    frame.stack[:] = [ObjectVar(_scaled), NULL, ConstVar((6,))]  # and CALL_FUNCTION_EX's
    FLOW_HANDLERS["CALL_FUNCTION_EX"](frame, _inst("CALL_FUNCTION_EX", 0))
    assert _values(frame) == [6]


def test_to_bool():
    frame = _frame()
    for value, expected in (([], False), ("a", True), (0.0, False), (None, False)):
        frame.push(ConstVar(value))
        PY313_HANDLERS["TO_BOOL"](frame, _inst("TO_BOOL"))
        assert frame.pop().value is expected  # type: ignore[attr-defined]
    frame.push(frame.tracer.wrap(torch.ones(2), "L['x']"))
    with pytest.raises(Unsupported, match="tensor value"):
        PY313_HANDLERS["TO_BOOL"](frame, _inst("TO_BOOL"))


def test_make_function_then_set_its_attributes():
    frame = _frame(_outer.__code__)
    inner_code = next(c for c in _outer.__code__.co_consts if isinstance(c, types.CodeType))
    DATA_HANDLERS["MAKE_CELL"](frame, _inst("MAKE_CELL", 0, "k"))
    frame.push(ConstVar(inner_code))
    FLOW_HANDLERS["MAKE_FUNCTION"](frame, _inst("MAKE_FUNCTION"))  # 3.13: no flags
    for flag, value in (
        (0x08, None),  # the closure: a tuple of cells, pushed below
        (0x02, DictVar({"scale": ConstVar(2)})),
        (0x01, ConstVar((1, 2))),
    ):
        function = frame.pop()
        if value is None:
            DATA_HANDLERS["LOAD_FAST"](frame, _inst("LOAD_FAST", 0, "k"))  # 3.13's LOAD_CLOSURE
            cell = frame.pop()
            assert isinstance(cell, CellVar)
            frame.push(SequenceVar([cell]))
        else:
            frame.push(value)
        frame.push(function)
        PY313_HANDLERS["SET_FUNCTION_ATTRIBUTE"](frame, _inst("SET_FUNCTION_ATTRIBUTE", flag))
    made = frame.pop()
    assert isinstance(made, FunctionVar)
    assert [python_value(v) for v in made.defaults] == [1, 2]
    assert python_value(made.kwdefaults["scale"]) == 2
    assert made.closure == (frame.cells["k"],)


def test_string_conversion_and_formatting():
    frame = _frame()
    frame.push(ConstVar("a"))
    PY313_HANDLERS["CONVERT_VALUE"](frame, _inst("CONVERT_VALUE", 2))  # !r
    frame.push(ConstVar(3.14159))
    frame.push(ConstVar(".2f"))
    PY313_HANDLERS["FORMAT_WITH_SPEC"](frame, _inst("FORMAT_WITH_SPEC"))
    frame.push(ConstVar(7))
    PY313_HANDLERS["FORMAT_SIMPLE"](frame, _inst("FORMAT_SIMPLE"))
    assert _values(frame) == ["'a'", "3.14", "7"]
    frame.push(frame.tracer.wrap(torch.ones(2), "L['x']"))
    with pytest.raises(Unsupported, match="formatting a tensor"):
        PY313_HANDLERS["FORMAT_SIMPLE"](frame, _inst("FORMAT_SIMPLE"))


def test_run_for_real():
    state = State(index=0, locals={"a": 1, "b": 2}, stack=[], cells={})
    PY313_STEPS["LOAD_FAST_LOAD_FAST"](state, _inst("LOAD_FAST_LOAD_FAST", 1, ("a", "b")), {})
    PY313_STEPS["STORE_FAST_STORE_FAST"](state, _inst("STORE_FAST_STORE_FAST", 1, ("x", "y")), {})
    assert (state.locals["x"], state.locals["y"]) == (2, 1)
    state.stack.extend([_scaled, NULL_VALUE, 3, 4, ("scale",)])
    PY313_STEPS["CALL_KW"](state, _inst("CALL_KW", 2), {})
    PY313_STEPS["TO_BOOL"](state, _inst("TO_BOOL"), {})
    state.stack.extend(["b", 2.5, ">5"])
    PY313_STEPS["FORMAT_WITH_SPEC"](state, _inst("FORMAT_WITH_SPEC"), {})
    state.stack.extend([_scaled, NULL_VALUE, (9,)])
    FLOW_STEPS["CALL_FUNCTION_EX"](state, _inst("CALL_FUNCTION_EX", 0), {})
    assert state.stack == [True, "b", "  2.5", 9]
    # a closure made as 3.13 makes it: MAKE_FUNCTION without flags, then its cells
    inner_code = next(c for c in _outer.__code__.co_consts if isinstance(c, types.CodeType))
    cell = types.CellType(11)
    state.stack[:] = [(cell,), inner_code]
    FLOW_STEPS["MAKE_FUNCTION"](state, _inst("MAKE_FUNCTION"), globals())
    PY313_STEPS["SET_FUNCTION_ATTRIBUTE"](state, _inst("SET_FUNCTION_ATTRIBUTE", 8), {})
    assert state.stack.pop()() == 11


def _uses_313_forms(x, y, scale):
    a, b = x, y  # LOAD_FAST_LOAD_FAST, STORE_FAST_STORE_FAST
    k = 2

    def shift(t, by=1):  # MAKE_FUNCTION + SET_FUNCTION_ATTRIBUTE, LOAD_FAST of a cell
        return t + by * k

    out = [shift(v, by=scale) for v in (a, b)]  # CALL_KW, STORE_FAST_LOAD_FAST
    if out and not None:  # TO_BOOL
        label = f"{len(out)!r}:{scale:.1f}"  # CONVERT_VALUE, FORMAT_WITH_SPEC, FORMAT_SIMPLE
    return out[0] * out[1], label


def test_function_using_313_forms_is_one_graph(captured, against_eager):
    names = {inst.opname for inst in dis.get_instructions(_uses_313_forms)}
    if sys.version_info >= (3, 13):
        assert {"LOAD_FAST_LOAD_FAST", "CALL_KW", "TO_BOOL", "FORMAT_WITH_SPEC"} <= names
    args = (torch.randn(3), torch.randn(3), 0.5)
    result, _ = captured(_uses_313_forms, *args)
    against_eager(result, _uses_313_forms, torch.randn(3), torch.randn(3), 0.5)
