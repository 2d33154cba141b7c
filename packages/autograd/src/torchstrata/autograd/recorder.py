"""``AtenRecorder``: a dispatch mode that records ATen calls into a functional ATen graph.

It sits above a :class:`~torch._subclasses.fake_tensor.FakeTensorMode` (or runs on
``meta`` tensors): each ATen call is forwarded to the fake mode or the meta kernel
(which computes the output metadata) and appended to a
:class:`~torchstrata.core.GraphBuilder` at :attr:`~torchstrata.core.Level.ATEN`.
Tensors map to nodes by identity; everything else is kept as a constant.

Functionalization: every tensor belongs to a *base* (the tensor that owns its storage:
a graph input or a fresh op result); a view also records the chain of view calls that
made it from its base (:class:`~torchstrata.autograd.views.ViewStep`). An in-place call
is recorded as its functional form; the new value is scattered back into the base,
whose version goes up. A tensor read after its base's version changed is regenerated
by replaying its view chain on the base's new value. :meth:`AtenRecorder.mutated_inputs`
then gives the final value of every graph input that was written.

Constants: a tensor that ``torch.tensor([...])`` makes inside the graph reaches the
recorder as ``aten.lift_fresh`` on a real tensor. A 0-dim one becomes an
``aten.scalar_tensor`` node; a larger one a graph input of its own, a *lifted constant*
(:attr:`AtenRecorder.constants` holds its real tensor, for the caller to pass on every
call). A lifted constant is a base like a fresh op result, not like a graph input: a
write to it is functionalized and never written back, so every call starts from the
original values, and :meth:`AtenRecorder.output_node` returns a copy of an output that
still shares its memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_leaves

from torchstrata.autograd.call_results import (
    call_arguments,
    direct_result,
    fake_on_cpu,
    holds_tensor,
    result_meta,
)
from torchstrata.autograd.cpu_layouts import cpu_layout
from torchstrata.autograd.devices import cpu_result
from torchstrata.autograd.functional import (
    HIDDEN_WRITERS,
    bind_arguments,
    functional_form,
    hidden_writes,
    view_counterpart,
    written_arguments,
)
from torchstrata.autograd.kernel_checks import check_like_eager_kernels
from torchstrata.autograd.views import Value, ViewStep
from torchstrata.core import (
    SYMBOLIC_TYPES,
    GraphBuilder,
    Level,
    Node,
    TensorMeta,
    aten,
    aten_from_overload,
    size_or_int,
)

_CONSTANT_TYPES = (
    int,
    float,
    complex,
    bool,
    str,
    type(None),
    torch.dtype,
    torch.device,
    torch.memory_format,
    torch.layout,
)

#: View ops whose result an ``as_strided`` of its input cannot rebuild (``input_alias``):
#: ``as_strided`` itself (an absolute offset), and those that set a lazy conjugate or
#: negative bit.
_UNALIASABLE_VIEWS = frozenset({"as_strided", "_conj", "_neg_view"})
#: Ops that turn a constant tensor into a traced one; the constant's node stands for both.
_LIFT_OPS = frozenset({"aten::lift_fresh", "aten::lift_fresh_copy"})
#: Ops whose results' layouts depend on whether cuDNN runs them: the trace disables cuDNN
#: (for batch norm's sake), but a channels-last convolution on the GPU runs in cuDNN and
#: returns channels-last, where the native kernel returns row-major. Traced with cuDNN
#: (when it is on), their metadata says what the run will return.
_CUDNN_OPS = frozenset({"aten::convolution", "aten::convolution_backward"})


class AotTraceError(RuntimeError):
    """Tracing a torch-level graph to ATen failed; the message names the node or op."""


class _Base:
    """The owner of one storage: its current functional value and a write counter."""

    __slots__ = ("input_index", "tensor", "value", "version")

    def __init__(self, tensor: torch.Tensor, node: Node, input_index: int | None) -> None:
        self.tensor = tensor
        self.value = Value(tensor, node)
        self.version = 0
        self.input_index = input_index


class _Entry:
    """What the recorder knows about one live tensor."""

    __slots__ = ("base", "chain", "node", "tensor", "version")

    def __init__(
        self, tensor: torch.Tensor, node: Node, base: _Base, chain: tuple[ViewStep, ...]
    ) -> None:
        self.tensor = tensor  # kept alive so that its id() is not reused
        self.node = node
        self.base = base
        self.chain = chain
        self.version = base.version


class AtenRecorder(TorchDispatchMode):
    """Records ATen overload calls on tracked (fake) tensors into ``self.builder``.

    :param meta_stands_for: the device that plain ``meta`` tensors stand for (only
        ``cpu``), or None: results then get that device's output dtypes where its
        kernels differ from the meta kernels (see
        :func:`~torchstrata.autograd.devices.cpu_result`).
    """

    def __init__(
        self, meta_stands_for: torch.device | None = None, *, cudnn_layouts: bool = False
    ) -> None:
        super().__init__()
        if meta_stands_for is not None and meta_stands_for.type != "cpu":
            raise ValueError(f"meta tensors can stand for the cpu only, not {meta_stands_for}")
        self._meta_stands_for = meta_stands_for
        self._cudnn_layouts = cudnn_layouts
        self.builder = GraphBuilder(Level.ATEN)
        self._entries: dict[int, _Entry] = {}
        self._inputs: list[_Base] = []
        self._constant_bases: dict[int, _Base] = {}  # id(base) -> base
        #: ``(input node, real tensor)`` of every lifted constant, in the order made.
        self.constants: list[tuple[Node, torch.Tensor]] = []

    # ------------------------------------------------------------ tensors <-> nodes

    def add_input(self, name: str, tensor: torch.Tensor) -> Node:
        """Make ``tensor`` (a fake tensor) a graph input called ``name``."""
        node = self.builder.input(name, TensorMeta.from_tensor(tensor))
        base = _Base(tensor, node, len(self._inputs))
        self._inputs.append(base)
        self._entries[id(tensor)] = _Entry(tensor, node, base, ())
        return node

    def node_of(self, tensor: torch.Tensor) -> Node:
        """The node computing ``tensor``'s current value; constants become nodes too.

        A tensor whose base was written since its node was recorded is regenerated from
        the base's new value (this may record view nodes).
        """
        entry = self._entries.get(id(tensor))
        if entry is None:
            return self._constant_tensor(tensor)
        base = entry.base
        if entry.version != base.version:
            value = base.value
            for step in entry.chain:
                value = step.replay(self.emit, value)
            entry.node, entry.version = value.node, base.version
        return entry.node

    def output_node(self, tensor: torch.Tensor) -> Node:
        """The node of ``tensor`` returned as a graph output: :meth:`node_of`, or a clone
        of it when ``tensor`` still shares memory with a lifted constant (the constant
        itself, or a view of it never written), so that no call returns the constant's
        storage."""
        node = self.node_of(tensor)
        entry = self._entries[id(tensor)]
        if id(entry.base) in self._constant_bases and not entry.base.version:
            node = self.emit(torch.ops.aten.clone.default, Value(tensor, node)).node
        return node

    def input_alias(self, tensor: torch.Tensor) -> int | None:
        """The index of the graph input whose storage ``tensor`` shares, if any.

        None too for a view made through ``as_strided``: its offset is absolute, not
        relative to the input's (see ``AotResult.output_aliases``), so the caller returns
        the computed value (the same elements, not a view) rather than a wrong view. And
        for a view that sets a lazy conjugate or negative bit (``z.conj()``,
        ``z.conj().imag``), which the caller's ``as_strided`` of the input would drop.
        """
        entry = self._entries.get(id(tensor))
        if entry is None or any(step.name in _UNALIASABLE_VIEWS for step in entry.chain):
            return None
        return entry.base.input_index

    def intermediate_owner(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """The tensor that owns ``tensor``'s storage when that is a result made inside
        the graph (``tensor`` itself for the owner); None for inputs and their views, and
        for tensors the recorder does not know."""
        entry = self._entries.get(id(tensor))
        if entry is None or entry.base.input_index is not None:
            return None
        return entry.base.tensor

    def mutated_inputs(self) -> list[tuple[int, Node]]:
        """``(input index, node of its final value)`` for every graph input written so far."""
        return [(base.input_index, base.value.node) for base in self._inputs if base.version]  # type: ignore[misc]

    def _fresh(self, tensor: torch.Tensor, node: Node) -> None:
        self._entries[id(tensor)] = _Entry(tensor, node, _Base(tensor, node, None), ())

    def _constant_tensor(self, tensor: torch.Tensor) -> Node:
        """A 0-dim real tensor made outside the trace, embedded as ``aten.scalar_tensor``.

        :raises NotImplementedError: for a fake or meta tensor the recorder does not know
            (made under another mode), or a real one with elements that was not lifted
            inside the graph (see :meth:`_lift`).
        """
        traced = isinstance(tensor, torch._subclasses.fake_tensor.FakeTensor) or tensor.is_meta
        if traced:
            raise NotImplementedError(
                f"tensor {tuple(tensor.shape)} {tensor.dtype} on {tensor.device} is a fake "
                "or meta tensor that the traced graph did not produce (made under another "
                "mode or by another trace); it cannot be recorded"
            )
        if tensor.dim() != 0:
            raise NotImplementedError(
                f"tensor {tuple(tensor.shape)} {tensor.dtype} was not produced inside the "
                "traced graph; only 0-dim tensors and constants made inside it "
                "(torch.tensor([...])) can be embedded"
            )
        with _disable_current_modes():
            value = tensor.item()
        node = self.builder.call(
            aten("scalar_tensor.default"),
            value,
            dtype=tensor.dtype,
            device=tensor.device,
            meta=TensorMeta((), tensor.dtype, tensor.device),
            name="constant",
        )
        self._fresh(tensor, node)
        return node

    def _lift(
        self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """``lift_fresh(real)`` (``torch.tensor([...])``): a constant made in the graph.

        A real tensor with elements becomes a lifted constant (module docstring), traced
        as a fake tensor (under a fake mode) or a meta one (in a meta trace: a real CPU
        tensor would not mix with the meta tensors); anything else keeps the node of
        its argument (a 0-dim constant's ``scalar_tensor``).
        """
        source = args[0]
        real = not (
            id(source) in self._entries
            or isinstance(source, torch._subclasses.fake_tensor.FakeTensor)
            or source.is_meta
        )
        if not real or source.dim() == 0:
            result = func(*args, **kwargs)
            self.node_of(source)
            entry = self._entries[id(source)]
            self._entries[id(result)] = _Entry(result, entry.node, entry.base, entry.chain)
            return result
        with _disable_current_modes():
            # ``lift_fresh``'s argument is fresh (made for this call); the copy variant's
            # may be the caller's tensor.
            value = source if func.name() == "aten::lift_fresh" else source.clone()
        if self._meta_stands_for is not None:
            result = torch.empty_strided(
                source.shape, source.stride(), dtype=source.dtype, device="meta"
            )
        else:
            result = func(*args, **kwargs)
        node = self.builder.input("constant", TensorMeta.from_tensor(result))
        base = _Base(result, node, None)
        self._constant_bases[id(base)] = base
        self._entries[id(result)] = _Entry(result, node, base, ())
        self.constants.append((node, value))
        return result

    def _name_unknown_tensors(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """After a call failed: raise the :class:`NotImplementedError` of
        :meth:`_constant_tensor` for an argument the recorder cannot record (a tensor the
        trace did not make), which is the likely cause and clearer than the op's error."""
        for value in tree_leaves((args, kwargs)):
            if isinstance(value, torch.Tensor) and id(value) not in self._entries:
                self._constant_tensor(value)

    def _to_argument(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self.node_of(value)
        if isinstance(value, list):
            return [self._to_argument(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self._to_argument(item) for item in value)
        if isinstance(value, dict):
            return {key: self._to_argument(item) for key, item in value.items()}
        if isinstance(value, _CONSTANT_TYPES):
            return value
        if isinstance(value, SYMBOLIC_TYPES):  # a size of a symbolic trace (decision 0220)
            return size_or_int(value) if isinstance(value, torch.SymInt) else value
        raise NotImplementedError(f"cannot record an argument of type {type(value).__name__}")

    # ----------------------------------------------------------------- recording

    def emit(
        self, func: torch._ops.OpOverload, *args: Any, index: int | None = None, **kwargs: Any
    ) -> Value:
        """Run ``func`` on the fake tensors of the :class:`Value` arguments and record it.

        The call runs first, so a failing call records nothing. ``index`` picks one
        tensor of a tuple result (through a ``builtin.getitem`` node).
        """
        fake_args = [arg.fake if isinstance(arg, Value) else arg for arg in args]
        node_args = [arg.node if isinstance(arg, Value) else arg for arg in args]
        with torch.no_grad():
            result = func(*fake_args, **kwargs)
        node = self.builder.call(
            aten_from_overload(func), *node_args, meta=result_meta(result), **kwargs
        )
        if index is None:
            return Value(result, node)
        return Value(result[index], self.builder.getitem(node, index))

    def _record(
        self,
        func: torch._ops.OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        result: Any,
    ) -> Node:
        """Append the call that produced ``result`` (already run) and bind its tensors."""
        op = aten_from_overload(func)
        if not op.name.startswith("aten."):
            raise NotImplementedError(f"{func.name()} is not an ATen op; it cannot be recorded")
        node = self.builder.call(
            op, *self._to_argument(args), meta=result_meta(result), **self._to_argument(kwargs)
        )
        if isinstance(result, torch.Tensor):
            self._bind_result(func, args, kwargs, result, node, None)
            return node
        for index, item in enumerate(result):
            if isinstance(item, torch.Tensor):
                item_node = self.builder.getitem(node, index)
                self._bind_result(func, args, kwargs, item, item_node, index)
        return node

    def _bind_result(
        self,
        func: torch._ops.OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        tensor: torch.Tensor,
        node: Node,
        index: int | None,
    ) -> None:
        if any(tensor is arg for arg in args):
            return  # the op handed an argument back: it keeps its entry
        storage = StorageWeakRef(tensor.untyped_storage())
        for position, arg in enumerate(args):
            if not isinstance(arg, torch.Tensor) or id(arg) not in self._entries:
                continue
            if StorageWeakRef(arg.untyped_storage()) != storage:
                continue
            if position != 0:
                raise NotImplementedError(f"{func.name()} returns a view of argument {position}")
            parent = self._entries[id(arg)]
            step = ViewStep(func, tuple(args), dict(kwargs), index)
            entry = _Entry(tensor, node, parent.base, (*parent.chain, step))
            self._entries[id(tensor)] = entry
            return
        self._fresh(tensor, node)

    # -------------------------------------------------------------------- dispatch

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func._overloadpacket._qualified_op_name in _LIFT_OPS:
            return self._lift(func, args, kwargs)
        check_like_eager_kernels(func, args, kwargs, device=self._trace_device(args, kwargs))
        if torch.Tag.inplace_view in func.tags:
            return self._record_view_in_place(func, args, kwargs)
        written = written_arguments(func)
        if written or func.name() in HIDDEN_WRITERS:
            bound = bind_arguments(func, args, kwargs)
            written = written or hidden_writes(func, bound)
            if any(bound[name] is not None for name in written):
                return self._record_mutation(func, args, kwargs, written)
        result = direct_result(func, args, kwargs)
        if result is None:
            try:
                if self._cudnn_layouts and func._overloadpacket._qualified_op_name in _CUDNN_OPS:
                    with torch.backends.cudnn.flags(enabled=True):
                        result = func(*args, **kwargs)
                else:
                    result = func(*args, **kwargs)
            except Exception:
                self._name_unknown_tensors(args, kwargs)
                raise
        if self._meta_stands_for is not None:
            result = cpu_result(func, args, result)
        result = self._cpu_layout(func, args, kwargs, result)
        if not holds_tensor(result):
            return result  # sizes, devices...: static facts of the trace, not graph values
        self._record(func, args, kwargs, result)
        return result

    def _trace_device(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> torch.device:
        """The device this call computes on: its first tensor's, or for a factory call
        without tensors its ``device`` (the CPU if none). ``meta`` where the trace runs
        on meta tensors that stand for no device, the CPU where they stand for it."""
        device = kwargs.get("device")
        for value in (*args, *kwargs.values()):
            if isinstance(value, list | tuple) and value:
                value = value[0]  # cat's, stack's... tensors
            if isinstance(value, torch.Tensor):
                device = value.device
                break
        found = torch.device("cpu") if device is None else torch.device(device)
        if found.type == "meta" and self._meta_stands_for is not None:
            return self._meta_stands_for
        return found

    def _cpu_layout(
        self,
        func: torch._ops.OpOverload,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        result: Any,
    ) -> Any:
        """``result`` in the CPU kernel's layout where a CPU graph's meta kernel gives
        another (:func:`~torchstrata.autograd.cpu_layouts.cpu_layout`)."""
        on_meta = self._meta_stands_for is not None
        if not on_meta and not fake_on_cpu(result):
            return result
        return cpu_layout(func, args, dict(kwargs), result, on_meta=on_meta)

    def _record_mutation(
        self,
        func: torch._ops.OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        written: list[str],
    ) -> Any:
        form = functional_form(func, written)
        bound = bind_arguments(func, args, kwargs)
        call_args, call_kwargs = call_arguments(form.op, bound)
        node_args = self._to_argument(call_args)
        node_kwargs = self._to_argument(call_kwargs)
        with torch.no_grad():
            new = self._cpu_layout(
                form.op, call_args, call_kwargs, form.op(*call_args, **call_kwargs)
            )
        node = self.builder.call(
            aten_from_overload(form.op), *node_args, meta=result_meta(new), **node_kwargs
        )
        result = func(*args, **kwargs)  # keep the fake tensors' own state in step
        result = self._cpu_layout(func, args, kwargs, result)
        if form.returns_self:
            target = bound[form.written[0]]
            self._write(target, Value(new, node))
            return result
        originals = result if isinstance(result, tuple | list) else (result,)
        for index, item in enumerate(originals):
            if isinstance(item, torch.Tensor) and not any(item is arg for arg in args):
                self._fresh(item, self.builder.getitem(node, index))
        offset = len(new) - len(form.written)
        for position, name in enumerate(form.written):
            target = bound[name]
            if target is not None:
                index = offset + position
                self._write(target, Value(new[index], self.builder.getitem(node, index)))
        return result

    def _record_view_in_place(
        self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """``t_``, ``squeeze_``, ``unsqueeze_``, ``transpose_``...: the tensor becomes a view
        of what it was (same storage, new sizes and strides). Recorded as the view op; the
        tensor's entry becomes that view, one step further down its base's view chain, so
        later writes through it reach the base. ``F.linear`` on a 1-D input calls
        ``squeeze_`` on its matmul's result.

        :raises NotImplementedError: on a graph input itself (the caller's tensor would
            change shape) or a tensor made outside the graph.
        """
        target = args[0]
        entry = self._entries.get(id(target))
        if entry is None:
            raise NotImplementedError(
                f"in-place view op {func.name()} on a tensor made outside the graph"
            )
        if entry.base.input_index is not None and not entry.chain:
            raise NotImplementedError(
                f"in-place view op {func.name()} on a graph input: it would change the "
                "shape of the caller's tensor"
            )
        view = view_counterpart(func)
        value = self.emit(view, Value(target, self.node_of(target)), *args[1:], **kwargs)
        base = entry.base
        if base.value.fake is target:  # the base's value must keep the old sizes and strides
            with torch.no_grad():
                base.value = Value(torch.ops.aten.alias.default(target), base.value.node)
        result = func(*args, **kwargs)  # the fake tensor takes its new sizes and strides
        step = ViewStep(view, tuple(args), dict(kwargs), None)
        self._entries[id(target)] = _Entry(target, value.node, base, (*entry.chain, step))
        return result

    def _write(self, target: torch.Tensor, new: Value) -> None:
        """Record that ``target`` now holds ``new``: update its base and bump its version."""
        entry = self._entries.get(id(target))
        if entry is None:
            raise NotImplementedError("in-place write to a tensor made outside the graph")
        if new.fake.dtype != target.dtype:
            # In-place ops keep self's dtype where the functional op would promote.
            new = self.emit(torch.ops.aten._to_copy.default, new, dtype=target.dtype)
        base = entry.base
        if entry.chain:
            parents = [base.value]
            for step in entry.chain[:-1]:
                parents.append(step.replay(self.emit, parents[-1]))
            value = new
            for step, parent in zip(reversed(entry.chain), reversed(parents), strict=True):
                value = step.scatter(self.emit, parent, value)
            base.value = value
        else:
            base.value = new
        base.version += 1
        entry.node, entry.version = new.node, base.version
