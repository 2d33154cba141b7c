"""Calls: torch ops become graph nodes, Python functions and module forwards are inlined.

``call_function`` is the one place that decides what a call means at capture time.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import dataclasses
import functools
import inspect
import operator
import types
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs
import torch

from torchstrata.capture.attributes import get_attribute
from torchstrata.capture.backward_hooks import BackwardHookSite, has_backward_hooks
from torchstrata.capture.binding import bind_arguments
from torchstrata.capture.breakpoints import GRAPH_BREAK_REASON, graph_break
from torchstrata.capture.checkpoints import call_checkpoint, is_checkpoint
from torchstrata.capture.container_methods import call_container_method
from torchstrata.capture.contexts import CONTEXT_MANAGERS, exit_context, make_context
from torchstrata.capture.exceptions import TracedRaise, make_exception
from torchstrata.capture.generator_contexts import (
    GeneratorExitVar,
    exit_generator_context,
    make_generator_context,
)
from torchstrata.capture.grad_hooks import register_tensor_hook
from torchstrata.capture.higher_order import call_higher_order
from torchstrata.capture.indexing import subscript
from torchstrata.capture.instances import make_instance
from torchstrata.capture.iteration import iterate
from torchstrata.capture.library_calls import call_library
from torchstrata.capture.mapping_objects import call_dict_method
from torchstrata.capture.modes import grad_enabled
from torchstrata.capture.module_calls import check_module_call, guard_module_call
from torchstrata.capture.module_hooks import call_with_hooks, has_forward_hooks
from torchstrata.capture.module_members import MEMBER_METHODS, call_member_method
from torchstrata.capture.operators import apply_operator, fold
from torchstrata.capture.printing import record_print
from torchstrata.capture.python_builtins import FrameState, call_builtin
from torchstrata.capture.tracer import CONSTANT_TYPES, Tracer, Unsupported
from torchstrata.capture.user_objects import UserObjectVar, build_class, construct, is_user_class
from torchstrata.capture.variables import (
    BoundMethodVar,
    Cell,
    ConstVar,
    ContextExitVar,
    FunctionVar,
    IteratorVar,
    MethodVar,
    NotConstant,
    ObjectVar,
    PartialVar,
    SequenceVar,
    TensorMethodVar,
    TensorVar,
    Var,
    describe,
    python_value,
)
from torchstrata.core import GuardKind, OpKind, OpRef, torch_op

#: Tensor methods that read tensor data into Python: the result would depend on values.
DATA_DEPENDENT_METHODS = frozenset(
    {"item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "data_ptr"}
)

#: Tensor methods that only read metadata: evaluated now on a meta tensor.
METADATA_METHODS = frozenset(
    {"size", "dim", "ndimension", "numel", "nelement", "stride", "element_size",
     "is_contiguous", "is_floating_point", "is_complex", "is_signed", "storage_offset",
     "get_device", "__len__"}
)  # fmt: skip

#: Global state that code may branch on: read at capture time and guarded by value.
GLOBAL_STATE_QUERIES = {
    torch.is_grad_enabled: "is_grad_enabled",
    torch.is_autocast_enabled: "is_autocast_enabled",
    torch.is_inference_mode_enabled: "is_inference_mode_enabled",
    torch.get_default_dtype: "get_default_dtype",
    torch.are_deterministic_algorithms_enabled: "are_deterministic_algorithms_enabled",
    # modules test it to skip fast paths while a dispatch mode traces (MultiheadAttention)
    torch._C._len_torch_dispatch_stack: "_C._len_torch_dispatch_stack",
}

_ASYNC_FLAGS = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


class CallingFrame(FrameState, Protocol):
    """A frame that can inline a function call into a nested frame."""

    def inline(
        self,
        code: types.CodeType,
        globals_: dict[str, Any],
        globals_source: str | None,
        bound: dict[str, Var],
        closure: Sequence[Cell],
    ) -> Var:
        """Interpret ``code`` with these arguments and return its result."""
        ...


def call_function(
    frame: CallingFrame, fn: Var, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    """``fn(*args, **kwargs)`` at capture time."""
    if isinstance(fn, ConstVar) and callable(fn.value):
        fn = ObjectVar(fn.value)
    if isinstance(fn, TensorMethodVar):
        return call_tensor_method(frame, fn.tensor, fn.name, args, kwargs)
    if isinstance(fn, MethodVar):
        return call_container_method(frame.tracer, fn, args, kwargs)
    if isinstance(fn, BoundMethodVar):
        return call_function(frame, fn.function, [fn.self_var, *args], kwargs)
    if isinstance(fn, FunctionVar):
        return _inline(
            frame,
            fn.code,
            fn.globals,
            fn.globals_source,
            args,
            kwargs,
            fn.defaults,
            fn.kwdefaults,
            fn.closure,
        )
    if isinstance(fn, ObjectVar):
        return _call_object(frame, fn, args, kwargs)
    if isinstance(fn, PartialVar):
        return call_function(frame, fn.function, [*fn.args, *args], {**fn.kwargs, **kwargs})
    if isinstance(fn, ContextExitVar):
        return exit_context(frame.tracer, fn)
    if isinstance(fn, GeneratorExitVar):
        return exit_generator_context(fn, args)
    if isinstance(fn, UserObjectVar):  # an object of a user class with __call__
        return call_function(frame, get_attribute(frame.tracer, fn, "__call__"), args, kwargs)
    raise Unsupported(f"calling {describe(fn)} is not supported")


def _call_object(
    frame: CallingFrame, fn: ObjectVar, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    value = fn.value
    tracer = frame.tracer
    if isinstance(value, torch.nn.Module):
        check_module_call(value)
        if getattr(value.forward, "__func__", None) is not type(value).forward:
            raise Unsupported(f"{type(value).__name__}.forward is replaced on the instance")
        function = guard_module_call(tracer, value, fn.source)
        backward = BackwardHookSite(tracer, value, fn.source) if has_backward_hooks(value) else None
        if backward is not None or has_forward_hooks(value):
            return call_with_hooks(
                tracer,
                lambda f, a, k: call_function(frame, f, a, k),
                fn,
                BoundMethodVar(function, fn),
                args,
                kwargs,
                backward,
            )
        return call_function(frame, BoundMethodVar(function, fn), args, kwargs)
    if _hashable(value) and value in CONTEXT_MANAGERS:
        return make_context(value, args, kwargs)
    if value is functools.partial and args:
        return PartialVar(args[0], list(args[1:]), dict(kwargs))
    if isinstance(value, functools.partial):
        source = fn.source
        function = tracer.wrap(value.func, f"{source}.func" if source else None)
        bound = [
            tracer.wrap(item, f"{source}.args[{index}]" if source else None)
            for index, item in enumerate(value.args)
        ]
        keywords = {
            key: tracer.wrap(item, f"{source}.keywords[{key!r}]" if source else None)
            for key, item in value.keywords.items()
        }
        return call_function(frame, function, [*bound, *args], {**keywords, **kwargs})
    if isinstance(value, type) and issubclass(value, BaseException) and not kwargs:
        return make_exception(value, args)
    if value is contextlib._GeneratorContextManager:
        return make_generator_context(args, kwargs)
    if value is builtins.__build_class__:
        return build_class(frame, args, kwargs)
    if value is graph_break:
        raise Unsupported(GRAPH_BREAK_REASON)
    if value is builtins.print:
        return record_print(tracer, args, kwargs)
    by_mapping = call_dict_method(frame, value, args, kwargs)  # dict.__setitem__(obj, ...)
    if by_mapping is not None:
        return by_mapping
    if value is object.__setattr__ and len(args) == 3 and isinstance(args[0], UserObjectVar):
        args[0].attributes[python_value(args[1])] = args[2]  # a frozen dataclass's __init__
        return ConstVar(None)
    if isinstance(value, type) and (dataclasses.is_dataclass(value) or attrs.has(value)):
        return _construct_config(frame, value, args, kwargs)
    if value in (dataclasses.asdict, dataclasses.astuple, dataclasses.replace) and _fresh_config(
        args
    ):
        return _fold_config_helper(tracer, value, args, kwargs)
    if _stateless_torch_module(value):
        return _construct_stateless_module(value, args, kwargs)
    if is_checkpoint(value):
        return call_checkpoint(tracer, lambda f, a, k: call_function(frame, f, a, k), args, kwargs)
    library = call_library(tracer, lambda f, a: call_function(frame, f, a, {}), value, args, kwargs)
    if library is not None:
        return library
    if hasattr(value, "cache_info") and isinstance(
        getattr(value, "__wrapped__", None), types.FunctionType
    ):  # functools.lru_cache/cache: the cached function is inlined (it must be pure)
        wrapped = f"{fn.source}.__wrapped__" if fn.source else None
        return call_function(frame, tracer.wrap(value.__wrapped__, wrapped), args, kwargs)
    if _hashable(value) and value in GLOBAL_STATE_QUERIES and torch_op(value) is None:
        return _global_state(frame, value, args, kwargs)  # torch._C's, not a torch op
    op = torch_op(value) if not isinstance(value, types.FunctionType) or _is_torch(value) else None
    if op is not None:
        return _call_torch(frame, op, value, args, kwargs)
    if _hashable(value) and value in MEMBER_METHODS:
        members = call_member_method(tracer, value, args, kwargs)
        if members is not None:
            return members
    if isinstance(value, types.FunctionType):
        return _inline_real_function(frame, value, fn.source, args, kwargs)
    if isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
        self_source = f"{fn.source}.__self__" if fn.source else None
        self_var = tracer.wrap(value.__self__, self_source, guard=False)
        return call_function(frame, ObjectVar(value.__func__), [self_var, *args], kwargs)
    result = call_higher_order(
        tracer, lambda f, a: call_function(frame, f, a, {}), value, args, kwargs
    )
    if result is not None:
        return result
    result = call_builtin(frame, value, args, kwargs)
    if result is not None:
        return result
    owner = getattr(value, "__self__", None)
    if isinstance(value, types.BuiltinMethodType) and isinstance(
        owner, (*CONSTANT_TYPES, set, frozenset, tuple, collections.Counter)
    ):  # (a Counter in a ConstVar was made in the trace, from constants)
        try:  # an iterator argument (", ".join(generator)) is consumed first
            values = [
                python_value(
                    SequenceVar(iterate(tracer, arg)) if isinstance(arg, IteratorVar) else arg
                )
                for arg in args
            ]
            keywords = {key: python_value(item) for key, item in kwargs.items()}
        except NotConstant:
            raise Unsupported(f"{value.__qualname__}() on non-constants is not supported") from None
        return fold(functools.partial(value, **keywords), *values)
    if is_user_class(value):
        return construct(frame, value, args, kwargs)
    call = inspect.getattr_static(type(value), "__call__", None)
    if isinstance(call, types.FunctionType) and not isinstance(value, type):
        # an object with a Python __call__: inlined with the object as self
        source = f"{fn.source}.__call__.__func__" if fn.source else None
        return call_function(frame, BoundMethodVar(tracer.wrap(call, source), fn), args, kwargs)
    if isinstance(call, types.BuiltinFunctionType) and not isinstance(value, type):
        return call_function(frame, ObjectVar(call), args, kwargs)  # no bytecode, not bound
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or repr(value)
    raise Unsupported(f"call to {name} ({type(value).__name__}) is not supported")


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _construct_config(
    frame: CallingFrame, cls: type, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    """A dataclass or attrs instance built from constants, for real, at capture time
    (their generated ``__init__`` only stores fields); each call gets its own copy."""
    try:
        values = [python_value(arg) for arg in args]
        keywords = {key: python_value(item) for key, item in kwargs.items()}
    except NotConstant:
        if is_user_class(cls):  # tensor fields: a symbolic object
            return construct(frame, cls, args, kwargs)
        if dataclasses.is_dataclass(cls):  # fields hold traced values: recorded as such
            return make_instance(cls, args, kwargs)
        raise Unsupported(
            f"{cls.__name__}(...) with non-constant fields is not supported"
        ) from None
    try:
        instance = cls(*values, **keywords)
    except Exception as error:  # noqa: BLE001 - the user's exception: raised in the trace
        # built from constants, the config raises the same error on every call: raised
        # in the trace, a ``try``/``except`` of the traced code handles it as eager does
        # (uncaught, it leaves the function: a graph break where eager raises it)
        raise TracedRaise(ObjectVar(error)) from None
    return ObjectVar(instance, fresh=True)


def _fresh_config(args: Sequence[Var]) -> bool:
    """A dataclass instance this trace built from constants (see :func:`_construct_config`)."""
    return (
        bool(args)
        and isinstance(args[0], ObjectVar)
        and args[0].fresh
        and dataclasses.is_dataclass(args[0].value)
    )


def _plain_constant(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return all(_plain_constant(item) for item in value)
    if isinstance(value, dict):
        return all(_plain_constant(k) and _plain_constant(v) for k, v in value.items())
    return isinstance(value, CONSTANT_TYPES)


def _fold_config_helper(
    tracer: Tracer, fn: Any, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    """``dataclasses.asdict``/``astuple``/``replace`` of such a config, evaluated now: its
    fields are constants (a field holding anything else is not folded)."""
    config = args[0]
    assert isinstance(config, ObjectVar)
    fields = [getattr(config.value, field.name) for field in dataclasses.fields(config.value)]
    if not _plain_constant(fields) or len(args) != 1:
        raise Unsupported(f"dataclasses.{fn.__name__} of a config with non-constant fields")
    try:
        keywords = {key: python_value(item) for key, item in kwargs.items()}
    except NotConstant:
        raise Unsupported(f"dataclasses.{fn.__name__} with non-constant fields") from None
    try:
        result = fn(config.value, **keywords)
    except Exception as error:  # noqa: BLE001 - raised in the trace, as eager raises it
        raise TracedRaise(ObjectVar(error)) from None
    if fn is dataclasses.replace:
        return ObjectVar(result, fresh=True)
    return tracer.wrap(result, None, guard=False)


def _stateless_torch_module(value: Any) -> bool:
    """A loss or activation class of ``torch.nn`` (``nn.CrossEntropyLoss``, ``nn.GELU``),
    which task heads build in their forward: ``loss_fct = CrossEntropyLoss()``."""
    return (
        isinstance(value, type)
        and issubclass(value, torch.nn.Module)
        and value.__module__ in ("torch.nn.modules.loss", "torch.nn.modules.activation")
    )


def _construct_stateless_module(cls: type, args: Sequence[Var], kwargs: Mapping[str, Var]) -> Var:
    """Such a module built from constants, for real, at capture time: one holding no
    parameters and no tensors (a loss without class weights); each call gets its own."""
    try:
        values = [python_value(arg) for arg in args]
        keywords = {key: python_value(item) for key, item in kwargs.items()}
    except NotConstant:
        raise Unsupported(f"{cls.__name__}(...) with tensor arguments is not supported") from None
    try:
        instance = cls(*values, **keywords)
    except Exception as error:  # noqa: BLE001 - the user's exception: let eager raise it
        raise Unsupported(f"{cls.__name__}(...) raised {type(error).__name__}: {error}") from None
    if any(True for _ in instance.parameters()) or any(
        buffer is not None for buffer in instance._buffers.values()
    ):
        raise Unsupported(f"{cls.__name__}(...) holding tensors is not supported")
    return ObjectVar(instance, fresh=True)


def _is_torch(fn: types.FunctionType) -> bool:
    """Public Python functions of torch (``F.softmax``) are recorded as ops, not inlined;
    private helpers (``F._none_or_dtype``) are inlined like user code."""
    return (fn.__module__ or "").startswith("torch.") and not fn.__name__.startswith("_")


def _call_torch(
    frame: CallingFrame, op: OpRef, value: Any, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    tracer = frame.tracer
    if value is operator.getitem and len(args) == 2 and not kwargs:
        return subscript(tracer, args[0], args[1])
    if op.name.startswith("operator."):
        if kwargs:
            raise Unsupported(f"{op.name} with keyword arguments is not supported")
        return apply_operator(tracer, value, *args)
    if op.name.startswith("torch.Tensor.") and args and isinstance(args[0], TensorVar):
        return call_tensor_method(
            frame, args[0], op.name.removeprefix("torch.Tensor."), args[1:], kwargs
        )
    has_tensor = any(isinstance(arg, TensorVar) for arg in (*args, *kwargs.values()))
    if op.name.startswith("math."):
        if has_tensor:
            raise Unsupported(f"{op.name} on a tensor makes the result depend on tensor values")
        try:
            return fold(value, *[python_value(arg) for arg in args])
        except NotConstant:
            raise Unsupported(f"{op.name} on non-constants is not supported") from None
    if value in GLOBAL_STATE_QUERIES:
        return _global_state(frame, value, args, kwargs)
    if op.name == "torch.is_tensor" and len(args) == 1:
        return ConstVar(isinstance(args[0], TensorVar))
    short = op.name.rsplit(".", 1)[-1]
    if (
        short in METADATA_METHODS | {"is_floating_point", "is_complex", "numel"}
        and args
        and isinstance(args[0], TensorVar)
    ):
        return call_tensor_method(frame, args[0], short, args[1:], kwargs)
    return tracer.call_op(op, tuple(args), dict(kwargs))


def _global_state(
    frame: CallingFrame, fn: Any, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    """Read global torch state now and guard on it (``torch.is_grad_enabled()``); inside
    a traced ``with torch.no_grad()`` grad mode is the region's."""
    if fn is torch.is_grad_enabled and any(kind == "grad" for kind, _ in frame.tracer.modes):
        return ConstVar(grad_enabled(frame.tracer))
    try:
        values = [python_value(arg) for arg in args]
        keywords = {key: python_value(item) for key, item in kwargs.items()}
    except NotConstant:
        raise Unsupported(f"{fn.__name__}() with non-constant arguments is not supported") from None
    call = ", ".join([*map(repr, values), *(f"{k}={v!r}" for k, v in keywords.items())])
    source = f"torch.{GLOBAL_STATE_QUERIES[fn]}({call})"  # ``torch``: a name of guard functions
    result = fn(*values, **keywords)
    frame.tracer.guard(GuardKind.CONSTANT_MATCH, source, result, "global torch state")
    return ConstVar(result)


def call_tensor_method(
    frame: FrameState, tensor: TensorVar, name: str, args: Sequence[Var], kwargs: Mapping[str, Var]
) -> Var:
    """``tensor.name(*args, **kwargs)``."""
    if name in DATA_DEPENDENT_METHODS:
        raise Unsupported(f"Tensor.{name}() makes the result depend on tensor values")
    if name == "register_hook":
        return register_tensor_hook(frame.tracer, tensor, args, kwargs)
    if name in METADATA_METHODS:
        try:
            values = [python_value(arg) for arg in args]
            keywords = {key: python_value(item) for key, item in kwargs.items()}
        except NotConstant:
            raise Unsupported(
                f"Tensor.{name}() with non-constant arguments is not supported"
            ) from None
        if name == "get_device":
            device = tensor.meta.device
            return ConstVar(device.index if device.type == "cuda" else -1)
        meta_tensor = tensor.meta.to_meta_tensor()
        return fold(functools.partial(getattr(meta_tensor, name), **keywords), *values)
    if not callable(getattr(torch.Tensor, name, None)):
        raise Unsupported(f"Tensor.{name}() is not supported")
    op = OpRef(OpKind.TORCH, f"torch.Tensor.{name}")
    return frame.tracer.call_op(op, (tensor, *args), dict(kwargs))


def _inline_real_function(
    frame: CallingFrame,
    fn: types.FunctionType,
    source: str | None,
    args: Sequence[Var],
    kwargs: Mapping[str, Var],
) -> Var:
    tracer = frame.tracer
    if source is not None:  # ``fn.__code__`` can be reassigned while ``fn`` stays the same
        tracer.guard_code(fn, source)
    # The defaults this call binds are guarded: ``fn.__defaults__`` can be rewritten.
    positional = fn.__code__.co_varnames[: fn.__code__.co_argcount]
    first_default = len(positional) - len(fn.__defaults__ or ())
    defaults = tuple(
        tracer.wrap(
            value,
            f"{source}.__defaults__[{index}]" if source else None,
            guard=_binds_default(first_default + index, positional, args, kwargs),
        )
        for index, value in enumerate(fn.__defaults__ or ())
    )
    kwdefaults = {
        key: tracer.wrap(
            value, f"{source}.__kwdefaults__[{key!r}]" if source else None, guard=key not in kwargs
        )
        for key, value in (fn.__kwdefaults__ or {}).items()
    }
    closure = tuple(
        _inlined_cell(
            tracer,
            cell,
            fn.__code__.co_freevars[index],
            f"{source}.__closure__[{index}]" if source else None,
        )
        for index, cell in enumerate(fn.__closure__ or ())
    )
    globals_source = "G" if fn.__globals__ is tracer.globals else None
    return _inline(
        frame,
        fn.__code__,
        fn.__globals__,
        globals_source,
        args,
        kwargs,
        defaults,
        kwdefaults,
        closure,
    )


def _binds_default(
    position: int, positional: Sequence[str], args: Sequence[Var], kwargs: Mapping[str, Var]
) -> bool:
    """Whether a call with ``args`` and ``kwargs`` leaves the positional parameter at
    ``position`` to its default."""
    return position >= len(args) and positional[position] not in kwargs


def _inlined_cell(tracer: Tracer, cell: types.CellType, variable: str, source: str | None) -> Cell:
    """A cell of an inlined function (of its free ``variable``): guarded through the
    function's source, or by a name of its own that the guards hold when the function
    has none (:mod:`.closures`)."""
    try:
        contents = cell.cell_contents
    except ValueError:  # not bound yet
        return Cell(origin=lambda namespace: cell)
    guard_source = f"{source}.cell_contents" if source else tracer.cell_source(cell, variable)
    return Cell(pending=(contents, guard_source, True), origin=lambda namespace: cell)


def _inline(
    frame: CallingFrame,
    code: types.CodeType,
    globals_: dict[str, Any],
    globals_source: str | None,
    args: Sequence[Var],
    kwargs: Mapping[str, Var],
    defaults: Sequence[Var],
    kwdefaults: Mapping[str, Var],
    closure: Sequence[Cell],
) -> Var:
    if code.co_flags & _ASYNC_FLAGS:
        raise Unsupported(f"calling coroutine function {code.co_name} is not supported")
    bound = bind_arguments(code, args, kwargs, defaults, kwdefaults)
    return frame.inline(code, globals_, globals_source, bound, closure)
