"""Attribute reads (``LOAD_ATTR``/``LOAD_METHOD``/``LOAD_SUPER_ATTR``) on symbolic values.

Tensor metadata (``.shape``, ``.dtype``, ``.ndim``...) specialises to constants; tensor
methods stay symbolic until called. Attributes of ``nn.Module`` and other objects are
read for real and guarded by their source: parameters and buffers become graph inputs,
plain values constants.
"""

from __future__ import annotations

import builtins
import inspect
import types
from typing import Any

import torch

from torchstrata.capture.counters import CounterVar, specialise
from torchstrata.capture.instances import InstanceVar, instance_attribute
from torchstrata.capture.modes import grad_enabled
from torchstrata.capture.operators import fold
from torchstrata.capture.side_effects import DeletedVar
from torchstrata.capture.tracer import Tracer, Unsupported
from torchstrata.capture.user_objects import UserObjectVar, object_attribute
from torchstrata.capture.variables import (
    BoundMethodVar,
    ConstVar,
    DictVar,
    IteratorVar,
    MethodVar,
    ObjectVar,
    SequenceVar,
    SuperVar,
    TensorMethodVar,
    TensorVar,
    Var,
    describe,
)
from torchstrata.core import GuardKind, torch_op

#: Methods of tuple, list and dict variables that capture understands.
SEQUENCE_METHODS = frozenset(
    {"index", "count", "append", "extend", "pop", "insert", "copy", "reverse", "clear", "sort"}
)
#: Methods only a deque variable has.
DEQUE_METHODS = frozenset({"appendleft", "popleft", "extendleft", "rotate"})
#: Methods of a named tuple variable (``_replace``, ``_asdict``).
NAMEDTUPLE_METHODS = frozenset({"_replace", "_asdict"})
DICT_METHODS = frozenset(
    {
        "items",
        "keys",
        "values",
        "get",
        "copy",
        "update",
        "pop",
        "setdefault",
        "clear",
        "popitem",
        "move_to_end",
    }
)
_SET_MUTATORS = frozenset(
    {"add", "update", "discard", "remove", "pop", "clear", "difference_update",
     "intersection_update", "symmetric_difference_update"}
)  # fmt: skip
_DATA_ATTRIBUTES = frozenset({"data", "grad", "_base", "grad_fn", "storage"})


class AttributeMissing(Unsupported):
    """The object has no such attribute (``getattr`` with a default may recover)."""

    python_exception = AttributeError


def get_attribute(tracer: Tracer, var: Var, name: str) -> Var:
    """``var.name``."""
    if isinstance(var, TensorVar):
        return _tensor_attribute(tracer, var, name)
    if isinstance(var, SequenceVar):
        if var.field_names and name in var.field_names:
            return var.items[var.field_names.index(name)]
        if var.tuple_type is not None and name in NAMEDTUPLE_METHODS:
            return MethodVar(var, name)
        if var.tuple_type is not None and name == "_fields":
            return ConstVar(var.field_names)
        if name in SEQUENCE_METHODS or (var.is_deque and name in DEQUE_METHODS):
            return MethodVar(var, name)
    if isinstance(var, DictVar) and name in DICT_METHODS:
        return MethodVar(var, name)
    if isinstance(var, IteratorVar) and name == "__next__":  # ``it.__next__()`` is next(it)
        return BoundMethodVar(ObjectVar(builtins.next), var)
    if isinstance(var, SuperVar):
        return _super_attribute(tracer, var, name)
    if isinstance(var, InstanceVar):
        return instance_attribute(var, name)
    if isinstance(var, UserObjectVar):
        return object_attribute(tracer, var, name)
    if isinstance(var, ConstVar):
        if isinstance(var.value, set) and name in _SET_MUTATORS and var.source is not None:
            tracer.side_effects.mutate_container(var)  # a set argument: replayed
        if not hasattr(var.value, name):
            raise AttributeMissing(f"{describe(var)} has no attribute {name!r}")
        result = fold(getattr, var.value, name)
        if isinstance(result, ConstVar) and callable(result.value):
            return ObjectVar(result.value)
        return result
    if isinstance(var, ObjectVar):
        return _object_attribute(tracer, var, name)
    raise Unsupported(f"attribute {name!r} of {describe(var)} is not supported")


def _tensor_attribute(tracer: Tracer, var: TensorVar, name: str) -> Var:
    if name in var.python_attributes:
        return var.python_attributes[name]
    meta = var.meta
    simple: dict[str, Any] = {
        "shape": torch.Size(meta.shape),
        "dtype": meta.dtype,
        "device": meta.device,
        "ndim": meta.ndim,
        "requires_grad": meta.requires_grad,
        "is_cuda": meta.device.type == "cuda",
        "is_cpu": meta.device.type == "cpu",
        "layout": torch.strided,
        "is_sparse": False,
        "is_quantized": False,
        "is_meta": meta.device.type == "meta",
        "is_nested": False,
        "is_mkldnn": False,
        "is_sparse_csr": False,
        "is_mps": meta.device.type == "mps",
        "itemsize": meta.dtype.itemsize,
        "nbytes": meta.nbytes,
    }
    if name in simple:
        return ConstVar(simple[name])
    if name == "T":
        dims = ConstVar(tuple(reversed(range(meta.ndim))))
        return tracer.call_op(_method_ref("permute"), (var, dims), {})
    if name == "mT":
        return tracer.call_op(_method_ref("transpose"), (var, ConstVar(-2), ConstVar(-1)), {})
    if name in ("real", "imag"):  # views of a complex tensor's parts, as torch.real/imag
        op = torch_op(getattr(torch, name))
        assert op is not None, name
        return tracer.call_op(op, (var,), {})
    if name == "data" and var.source is not None and not grad_enabled(tracer):
        # ``param.data`` under no_grad (a merge, an initialiser, an optimizer step): the
        # parameter's storage without autograd, as ``detach()`` gives it; in-place
        # writes through it reach the parameter. (Outside no_grad a tensor saved for
        # backward could be changed behind autograd's back: that stays a graph break.)
        detached = tracer.call_op(_method_ref("detach"), (var,), {})
        assert isinstance(detached, TensorVar)
        tracer.data_views[id(var)] = (var, detached)
        return detached
    if name in _DATA_ATTRIBUTES:
        raise Unsupported(f"Tensor.{name} is not supported")
    static = inspect.getattr_static(torch.Tensor, name, None)
    if static is not None and callable(static):
        return TensorMethodVar(var, name)
    if static is None:  # getattr(x, name, default) and hasattr(x, name) recover
        raise AttributeMissing(f"a tensor has no attribute {name!r}")
    raise Unsupported(f"Tensor.{name} is not supported")


def _method_ref(name: str) -> Any:
    op = torch_op(getattr(torch.Tensor, name))
    assert op is not None, name
    return op


def _super_of_object(cls: type, self_var: UserObjectVar, name: str) -> Var:
    """``super(cls, self_var).name`` for an object made in the trace: the first class
    after ``cls`` in its class's MRO that defines ``name``, bound to the object (a C
    method of ``object`` or ``dict`` too: the call handles those)."""
    mro = self_var.cls.__mro__
    for klass in mro[mro.index(cls) + 1 :]:
        if name in klass.__dict__:
            found = klass.__dict__[name]
            if isinstance(found, staticmethod):
                return ObjectVar(found.__func__)
            if isinstance(found, classmethod):
                return BoundMethodVar(ObjectVar(found.__func__), ObjectVar(self_var.cls))
            if isinstance(found, types.FunctionType) or callable(found):
                return BoundMethodVar(ObjectVar(found), self_var)
            raise Unsupported(f"super().{name} of {self_var.cls.__name__} is not supported")
    raise AttributeMissing(f"super() has no attribute {name!r}")


def _bound(tracer: Tracer, owner: Var, value: Any, name: str | None = None) -> Var | None:
    """A :class:`BoundMethodVar` for a Python method read from ``owner`` (else None).

    Given the attribute ``name`` and an owner with a source, the method's function is
    guarded by identity (``S.name.__func__``): the class's method replaced, or shadowed
    by an instance attribute, fails the guard; and the defaults the call binds are
    guarded through that source."""
    if not inspect.ismethod(value) or not isinstance(value.__func__, types.FunctionType):
        return None
    owner_value = owner.value if isinstance(owner, ObjectVar) else None
    self_var = owner if value.__self__ is owner_value else tracer.wrap(value.__self__, None)
    if name is not None and owner.source:
        return BoundMethodVar(
            tracer.wrap(value.__func__, f"{owner.source}.{name}.__func__"), self_var
        )
    return BoundMethodVar(ObjectVar(value.__func__), self_var)


def _object_attribute(tracer: Tracer, var: ObjectVar, name: str) -> Var:
    obj = var.value
    stored = tracer.side_effects.load_attribute(obj, name)
    if isinstance(stored, DeletedVar):
        if inspect.getattr_static(type(obj), name, _MISSING) is not _MISSING:
            raise Unsupported(f"reading {name!r} of the class after deleting it on the object")
        raise AttributeMissing(f"{describe(var)} has no attribute {name!r} (deleted)")
    if isinstance(stored, CounterVar):  # read after the increment: by value from now on
        return specialise(tracer, stored)
    if stored is not None:  # assigned earlier in this trace
        return stored
    member = _member_in_trace(tracer, obj, name)
    if member is not None:
        if var.source:  # (as below: a value in the instance dict would shadow it)
            tracer.guard(GuardKind.ABSENT_KEY, f"{var.source}.__dict__", name)
        return member
    try:
        value = getattr(obj, name)
    except AttributeError:
        raise AttributeMissing(f"{describe(var)} has no attribute {name!r}") from None
    except Exception as error:  # noqa: BLE001 - a property raised: let eager raise it
        raise Unsupported(
            f"reading {name!r} of {describe(var)} raised {type(error).__name__}"
        ) from None
    bound = _bound(tracer, var, value, name)
    if bound is not None:
        return bound
    source = f"{var.source}.{name}" if var.source else None
    members = _member_dict(obj, name)
    if var.source and members is not None:
        source = f"{var.source}.{members}[{name!r}]"
        # a value later put in the instance dict under the same name (object.__setattr__)
        # would shadow the member: its absence is guarded
        tracer.guard(GuardKind.ABSENT_KEY, f"{var.source}.__dict__", name)
    # Library modules (torch, torch.nn.functional, math) are trusted not to change.
    return tracer.wrap(value, source, guard=not isinstance(obj, types.ModuleType))


def _member_in_trace(tracer: Tracer, obj: Any, name: str) -> Var | None:
    """``obj.name`` for an ``nn.Module`` whose member dict (``_buffers``, ...) this trace
    already read and may have changed in place (``register_buffer`` replacing a buffer
    writes ``self._buffers[name]``): the trace's item, not the stale real one."""
    if not isinstance(obj, torch.nn.Module):
        return None
    if type(obj).__getattr__ is not torch.nn.Module.__getattr__ or name in vars(obj):
        return None
    if inspect.getattr_static(type(obj), name, _MISSING) is not _MISSING:
        return None
    for members in ("_parameters", "_buffers", "_modules"):
        known = tracer.known_mutable(vars(obj).get(members))
        if isinstance(known, DictVar) and name in known.items:
            return known.items[name]
    return None


def _member_dict(obj: Any, name: str) -> str | None:
    """The dict of ``obj`` (``"_parameters"``, ``"_buffers"`` or ``"_modules"``) that
    ``obj.name`` is read from, when ``nn.Module.__getattr__`` finds it there; else None.

    Such a member's source is its entry in that dict (``_parameters['weight']``), as
    Dynamo's guards read it: evaluated on every call by the guards, it costs a dict lookup
    where ``.weight`` costs a failed attribute lookup and a Python ``__getattr__`` call
    (1.5 us against 0.1 on the CI machine; a Llama decode step reads 100+ parameters).
    Only when the lookup would reach that ``__getattr__``: the type keeps ``nn.Module``'s
    lookup and has no class attribute of that name, and the instance dict holds none.
    ``nn.Module``'s ``__setattr__`` keeps a name in at most one of its dicts and out of the
    instance dict, so a member replaced later is read from the same dict; one deleted or
    turned into a plain attribute fails the guard (a recompile), never a silent stale
    read. Only a value written into the instance dict itself (``object.__setattr__``)
    would shadow the member; the caller guards against that.
    """
    cls = type(obj)
    if not isinstance(obj, torch.nn.Module) or cls.__getattr__ is not torch.nn.Module.__getattr__:
        return None
    if cls.__getattribute__ is not object.__getattribute__ or name in vars(obj):
        return None
    if inspect.getattr_static(cls, name, _MISSING) is not _MISSING:
        return None
    for members in ("_parameters", "_buffers", "_modules"):
        if name in vars(obj).get(members, ()):
            return members
    return None


_MISSING = object()


def _super_attribute(tracer: Tracer, var: SuperVar, name: str) -> Var:
    if isinstance(var.self_var, UserObjectVar):  # an object made in the trace: by the MRO
        return _super_of_object(var.cls, var.self_var, name)
    assert isinstance(var.self_var, ObjectVar)
    try:
        value = getattr(super(var.cls, var.self_var.value), name)
    except AttributeError:
        raise AttributeMissing(f"super() has no attribute {name!r}") from None
    bound = _bound(tracer, var.self_var, value)
    if bound is not None:
        return bound
    return tracer.wrap(value, None, guard=False)
