"""Python operators (``+``, ``@``, ``<``, unary ``-``, truth tests) on symbolic values.

On constants they are evaluated now; when a tensor takes part they become graph nodes
calling the ``operator`` function (``operator.add``), which is what torch-level graphs
record for Python operators.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from torchstrata.capture.symbolic_values import fold_arguments, symbolic_counterpart
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.user_objects import UserObjectVar
from torchstrata.capture.variables import (
    ConstVar,
    DictVar,
    NotConstant,
    ObjectVar,
    SequenceVar,
    TensorVar,
    Var,
    describe,
    python_value,
)
from torchstrata.core import OpKind, OpRef

#: ``BINARY_OP`` symbols (dis ``argrepr``) and ``COMPARE_OP`` symbols to operator functions.
BINARY_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul,
    "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift,
    ">>": operator.rshift,
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow,
    "@=": operator.imatmul, "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor,
    "<<=": operator.ilshift, ">>=": operator.irshift,
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne,
}  # fmt: skip

UNARY_OPERATORS: dict[str, Callable[[Any], Any]] = {
    "UNARY_NEGATIVE": operator.neg,
    "UNARY_POSITIVE": operator.pos,
    "UNARY_INVERT": operator.invert,
    "INTRINSIC_UNARY_POSITIVE": operator.pos,
}


def operator_ref(fn: Callable[..., Any]) -> OpRef:
    """The torch-level op of an ``operator`` function: ``operator.add``."""
    return OpRef(OpKind.TORCH, f"operator.{fn.__name__}")


def fold(fn: Callable[..., Any], *values: Any) -> Var:
    """Evaluate ``fn`` on real constants now; a Python exception becomes a graph break."""
    fn = symbolic_counterpart(fn, values)  # ``math.sqrt`` of a size: ``torch.sym_sqrt``
    values = fold_arguments(fn, values)  # symbolic sizes: specialised unless safe
    try:
        result = fn(*values)
    except Exception as error:  # noqa: BLE001 - the user's exception: let eager raise it
        name = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", fn)
        raise Unsupported(f"{name} raised {type(error).__name__}: {error}") from None
    return ConstVar(result) if not isinstance(result, tuple | list) else _sequence(result)


def _sequence(values: tuple[Any, ...] | list[Any]) -> Var:
    return SequenceVar([ConstVar(v) for v in values], is_list=isinstance(values, list))


def apply_operator(tracer: Tracer, fn: Callable[..., Any], *operands: Var) -> Var:
    """``fn(*operands)`` for an ``operator`` function: folded, or recorded as a node."""
    if any(isinstance(var, TensorVar) for var in operands):
        return tracer.call_op(operator_ref(fn), operands, {})
    if fn in (operator.add, operator.iadd) and any(isinstance(v, SequenceVar) for v in operands):
        # a constant tuple or list beside one holding variables: ``() + (hidden,)``
        operands = tuple(
            _sequence(v.value) if isinstance(v, ConstVar) and type(v.value) in (tuple, list) else v
            for v in operands
        )
    if fn in (operator.add, operator.iadd) and all(isinstance(v, SequenceVar) for v in operands):
        left, right = operands
        assert isinstance(left, SequenceVar) and isinstance(right, SequenceVar)
        if left.is_list != right.is_list and not (fn is operator.iadd and left.is_list):
            raise Unsupported(f"operator.{fn.__name__} of a list and a tuple raises TypeError")
        if fn is operator.iadd and left.is_list:
            if left.source is not None:
                raise Unsupported("mutating an argument with += is not supported")
            left.items.extend(right.items)
            return left
        return SequenceVar([*left.items, *right.items], is_list=left.is_list)
    if fn in (operator.mul, operator.imul) and isinstance(operands[0], SequenceVar):
        count = python_value(operands[1])
        sequence = operands[0]
        assert isinstance(sequence, SequenceVar)
        return SequenceVar(sequence.items * count, is_list=sequence.is_list)
    try:
        values = [python_value(var) for var in operands]
    except NotConstant:
        kinds = ", ".join(describe(var) for var in operands)
        raise Unsupported(f"operator.{fn.__name__} on {kinds} is not supported") from None
    return fold(fn, *values)


def truth(var: Var, what: str = "branching") -> bool:
    """``bool(var)`` at capture time; a tensor's truth depends on its data (graph break)."""
    if isinstance(var, TensorVar):
        raise Unsupported(
            f"data-dependent control flow: {what} on a tensor value (Tensor.__bool__) "
            "makes the result depend on tensor values"
        )
    if isinstance(var, SequenceVar):
        return bool(var.items)
    try:
        return bool(python_value(var))
    except NotConstant:
        raise Unsupported(f"truth value of {describe(var)} is not supported") from None


def identical(left: Var, right: Var) -> bool:
    """``left is right`` at capture time."""
    if left is right:
        return True
    if isinstance(left, TensorVar) and isinstance(right, TensorVar):
        return left.node is right.node
    # each of these variables is one object (see Tracer.wrap), never a constant like None
    made = (TensorVar, SequenceVar, DictVar, UserObjectVar)
    if isinstance(left, made) or isinstance(right, made):
        return False
    if isinstance(left, ConstVar | ObjectVar) and isinstance(right, ConstVar | ObjectVar):
        return left.value is right.value
    raise Unsupported(f"'is' between {describe(left)} and {describe(right)} is not supported")


def contains(container: Var, item: Var) -> bool:
    """``item in container`` for containers of constants."""
    if isinstance(container, UserObjectVar) and container.mapping is not None:
        if "__contains__" in vars(container.cls):
            raise Unsupported(f"'in' on {container.cls.__name__}, which defines __contains__")
        container = container.mapping
    if isinstance(container, DictVar):
        try:
            return python_value(item) in container.items
        except NotConstant:
            raise Unsupported(f"'in' with {describe(item)} as the key is not supported") from None
    if isinstance(container, SequenceVar) and any(
        isinstance(candidate, TensorVar) for candidate in container.items
    ):
        raise Unsupported("'in' on a sequence holding tensors is not supported")
    try:
        return python_value(item) in python_value(container)
    except NotConstant:
        raise Unsupported(f"'in' on {describe(container)} is not supported") from None
