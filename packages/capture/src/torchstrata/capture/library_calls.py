"""Library helpers model code calls, evaluated at capture time: ``functools.reduce`` and
``lru_cache`` functions, ``itertools``, ``operator.methodcaller``, the reflected Tensor
dunders called directly (``torch.Tensor.__radd__(x, 1)``) and ``has_torch_function*``.

Each takes ``call(fn, args)``, the capture-time call, so user functions they apply are
inlined like any other call; iterables are consumed with :func:`.iteration.iterate`
(they are known in full at capture time).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from torchstrata.capture.attributes import get_attribute
from torchstrata.capture.iteration import iterate
from torchstrata.capture.operators import apply_operator, truth
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.variables import (
    ConstVar,
    IteratorVar,
    NotConstant,
    SequenceVar,
    TensorVar,
    Var,
    python_value,
)
from torchstrata.core import torch_op

Call = Callable[[Var, list[Var]], Var]

#: ``has_torch_function``, ``_unary``, ``_variadic``: False for the plain tensors (and
#: parameters, whose ``__torch_function__`` is disabled) that capture traces.
HAS_TORCH_FUNCTION = frozenset(
    getattr(torch.overrides, name)
    for name in ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")
)

#: Tensor dunders by name: the operator and whether its operands are swapped.
_DUNDERS: dict[str, tuple[Callable[..., Any], bool]] = {}
for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
              "xor", "lshift", "rshift"):  # fmt: skip
    _fn = getattr(operator, _name if _name not in ("and", "or") else f"{_name}_")
    _DUNDERS[f"__{_name}__"] = (_fn, False)
    _DUNDERS[f"__r{_name}__"] = (_fn, True)
_DUNDERS["__rdiv__"] = (operator.truediv, True)
_DUNDERS["__div__"] = (operator.truediv, False)


def call_library(
    tracer: Tracer, call: Call, fn: Any, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var | None:
    """The result of ``fn(*args, **kwargs)`` when ``fn`` is one of this module's, else None."""
    try:
        hash(fn)
    except TypeError:
        return None
    if fn in HAS_TORCH_FUNCTION:
        return ConstVar(False)
    dunder = _tensor_dunder(fn)
    if dunder is not None and len(args) == 2 and not kwargs:
        op, swapped = dunder
        left, right = (args[1], args[0]) if swapped else (args[0], args[1])
        return apply_operator(tracer, op, left, right)
    if fn is functools.reduce and not kwargs and len(args) in (2, 3):
        return _reduce(tracer, call, args)
    if isinstance(fn, operator.methodcaller) and len(args) == 1:
        return _methodcaller(tracer, call, fn, args[0])
    if fn is torch._C._nn.pad_sequence:
        return _pad_sequence(tracer, args, kwargs)
    handler = _ITERTOOLS.get(fn)
    if handler is not None:
        try:
            return handler(tracer, call, args, kwargs)
        except NotConstant:
            raise Unsupported(f"itertools.{fn.__name__} with non-constant arguments") from None
    return None


def _pad_sequence(tracer: Tracer, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    """``torch._C._nn.pad_sequence`` (what ``nn.utils.rnn.pad_sequence`` calls), a C
    binding capture cannot record: each sequence padded to the longest with ``F.pad``,
    then stacked, as the kernel does (the lengths are the tensors' static shapes)."""
    names = ("sequences", "batch_first", "padding_value", "padding_side")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    sequences = bound.get("sequences")
    if not isinstance(sequences, SequenceVar) or not sequences.items:
        raise Unsupported("pad_sequence of something other than a list of tensors")
    items = [item for item in sequences.items if isinstance(item, TensorVar)]
    if len(items) != len(sequences.items) or any(item.meta.ndim == 0 for item in items):
        raise Unsupported("pad_sequence of something other than a list of tensors")
    try:
        batch_first = bool(python_value(bound.get("batch_first", ConstVar(False))))
        value = python_value(bound.get("padding_value", ConstVar(0.0)))
        side = python_value(bound.get("padding_side", ConstVar("right")))
    except NotConstant:
        raise Unsupported("pad_sequence with non-constant options") from None
    longest = max(item.meta.shape[0] for item in items)
    pad_op = torch_op(F.pad)
    stack_op = torch_op(torch.stack)
    assert pad_op is not None and stack_op is not None
    padded = []
    for item in items:
        extra = longest - item.meta.shape[0]
        first = (0, extra) if side == "right" else (extra, 0)
        spec = (0, 0) * (item.meta.ndim - 1) + first
        padded.append(tracer.call_op(pad_op, (item, ConstVar(spec)), {"value": ConstVar(value)}))
    return tracer.call_op(
        stack_op, (SequenceVar(padded, is_list=True),), {"dim": ConstVar(0 if batch_first else 1)}
    )


def _tensor_dunder(fn: Any) -> tuple[Callable[..., Any], bool] | None:
    owner = getattr(fn, "__objclass__", None)
    if owner not in (torch.Tensor, torch._C.TensorBase):
        qualname = getattr(fn, "__qualname__", "")
        if not (
            qualname.startswith("Tensor.") and getattr(fn, "__module__", "") == "torch._tensor"
        ):
            return None
    return _DUNDERS.get(getattr(fn, "__name__", ""))


def _methodcaller(tracer: Tracer, call: Call, fn: operator.methodcaller, target: Var) -> Var:
    reduced: tuple[Any, tuple[Any, ...]] = fn.__reduce__()  # type: ignore[assignment]
    if isinstance(reduced[0], functools.partial):  # keywords: partial(methodcaller, name, **kw)
        raise Unsupported("operator.methodcaller with keyword arguments is not supported")
    name, *bound = reduced[1]
    method = get_attribute(tracer, target, name)
    return call(method, [tracer.wrap(item, None, guard=False) for item in bound])


def _reduce(tracer: Tracer, call: Call, args: Sequence[Var]) -> Var:
    items = iterate(tracer, args[1])
    if len(args) == 3:
        total = args[2]
    elif items:
        total, items = items[0], items[1:]
    else:
        raise Unsupported("reduce() of an empty iterable with no initial value")
    for item in items:
        total = call(args[0], [total, item])
    return total


Handler = Callable[[Tracer, Call, Sequence[Var], Mapping[str, Var]], Var]


def _chain(tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    return IteratorVar([item for arg in args for item in iterate(tracer, arg)])


def _from_iterable(
    tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    (outer,) = args
    return IteratorVar(
        [item for inner in iterate(tracer, outer) for item in iterate(tracer, inner)]
    )


def _product(tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    repeat = python_value(kwargs["repeat"]) if "repeat" in kwargs else 1
    pools = [iterate(tracer, arg) for arg in args] * repeat
    return IteratorVar([SequenceVar(list(row)) for row in itertools.product(*pools)])


def _islice(tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    items = iterate(tracer, args[0])
    bounds = [python_value(arg) for arg in args[1:]]
    return IteratorVar(list(itertools.islice(items, *bounds)))


def _accumulate(tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    items = iterate(tracer, args[0])
    func = args[1] if len(args) > 1 else kwargs.get("func")
    initial = kwargs.get("initial")
    if initial is not None and not (isinstance(initial, ConstVar) and initial.value is None):
        items = [initial, *items]
    out: list[Var] = []
    for item in items:
        if not out:
            out.append(item)
        elif func is None or (isinstance(func, ConstVar) and func.value is None):
            out.append(apply_operator(tracer, operator.add, out[-1], item))
        else:
            out.append(call(func, [out[-1], item]))
    return IteratorVar(out)


def _pairwise(tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    items = iterate(tracer, args[0])
    return IteratorVar([SequenceVar([a, b]) for a, b in itertools.pairwise(items)])


def _starmap(tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    return IteratorVar([call(args[0], iterate(tracer, row)) for row in iterate(tracer, args[1])])


def _repeat(tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    times = args[1] if len(args) > 1 else kwargs.get("times")
    if times is None:
        raise Unsupported("itertools.repeat() without a count never ends")
    return IteratorVar([args[0]] * int(python_value(times)))


def _zip_longest(tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    fill = kwargs.get("fillvalue", ConstVar(None))
    columns = [iterate(tracer, arg) for arg in args]
    rows = itertools.zip_longest(*columns, fillvalue=fill)
    return IteratorVar([SequenceVar(list(row)) for row in rows])


def _combinatoric(kind: Callable[..., Any]) -> Handler:
    def handler(tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
        items = iterate(tracer, args[0])
        extra = [python_value(arg) for arg in args[1:]]
        extra += [python_value(value) for value in kwargs.values()]
        return IteratorVar([SequenceVar(list(row)) for row in kind(items, *extra)])

    return handler


def _compress(tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    data, selectors = iterate(tracer, args[0]), iterate(tracer, args[1])
    return IteratorVar([d for d, s in zip(data, selectors) if truth(s, "compress")])


def _while(keep: bool) -> Handler:
    def handler(tracer: Tracer, call: Call, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
        items = iterate(tracer, args[1])
        for index, item in enumerate(items):
            if truth(call(args[0], [item]), "takewhile") != keep:
                return IteratorVar(items[:index] if keep else items[index:])
        return IteratorVar(items if keep else [])

    return handler


_ITERTOOLS: dict[Any, Handler] = {
    itertools.chain: _chain,
    itertools.chain.from_iterable: _from_iterable,
    itertools.product: _product,
    itertools.islice: _islice,
    itertools.accumulate: _accumulate,
    itertools.pairwise: _pairwise,
    itertools.starmap: _starmap,
    itertools.repeat: _repeat,
    itertools.zip_longest: _zip_longest,
    itertools.combinations: _combinatoric(itertools.combinations),
    itertools.combinations_with_replacement: _combinatoric(itertools.combinations_with_replacement),
    itertools.permutations: _combinatoric(itertools.permutations),
    itertools.compress: _compress,
    itertools.takewhile: _while(True),
    itertools.dropwhile: _while(False),
}
