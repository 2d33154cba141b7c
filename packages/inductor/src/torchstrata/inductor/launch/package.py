"""A compiled graph as plain data, and back: what the compiled-graph cache stores.

The generated launcher is Python source plus a dict of globals (kernel handles, dtypes,
devices, extern ATen functions, constant arguments). The source is text; each global is
written as a small JSON record naming what it is (``{"dtype": "float32"}``,
``{"op": "aten.addmm.default"}``, ``{"opref": ["prims.scatter_add", false]}``,
``{"kernel": 3}``), never pickled. A global with no such
record (a tensor constant, an arbitrary Python object) makes the graph unsaveable: the
package is None and the cache keeps only the graphs before code generation.

Each record is checked when it is written: decoding it must give the very object (for
functions, dtypes, devices) or an equal value of the same type (for constants), so a
package that loads is the launcher that was generated, name for name.

Kernels are saved as what their backend needs to load them again (for C++: the source,
entry point, argument count and checks; the library itself comes from the kernel cache,
rebuilt if it was evicted; for Triton: each code variant's canonical module, the launch
configurations and scratch sizes, see :mod:`.triton_records`). No path is saved: a
package is relocatable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from torchstrata.core import CompiledGraph, KernelInfo, OpRef, TensorMeta, parse_op
from torchstrata.inductor.launch.extern_calls import direct_call
from torchstrata.inductor.launch.launcher import build_launcher, default_globals

#: The format tag of a package; a package of another format is not loaded.
FORMAT = "torchstrata.inductor.package/3"

#: Loads one backend's kernels from their records: ``load(records) -> (handles, paths)``.
KernelLoader = Callable[[Sequence[Mapping[str, Any]]], tuple[list[Any], list[str | None]]]


class UnsaveableError(ValueError):
    """A launcher global has no plain-data record (the graph is compiled, not cached)."""


def _torch_attribute(value: Any) -> str | None:
    """The name of ``value`` in the ``torch`` namespace (memory formats, layouts)."""
    if isinstance(value, torch.memory_format | torch.layout):
        name = str(value).removeprefix("torch.")
        return name if getattr(torch, name, None) is value else None
    return None


def op_callables(ops: Iterable[OpRef]) -> dict[int, dict[str, Any]]:
    """``id(callable) -> record`` of what the extern calls of a graph of ``ops`` may
    call: each op's resolved callable, and the binding :func:`direct_call` takes for it."""
    found: dict[int, dict[str, Any]] = {}
    for op in ops:
        try:
            target = op.resolve()
        except Exception:  # noqa: BLE001 - an op that does not resolve is not called here
            continue
        found.setdefault(id(target), {"opref": [op.name, False]})
        direct = direct_call(target)
        if direct is not target:
            found.setdefault(id(direct), {"opref": [op.name, True]})
    return found


def encode_value(
    value: Any, kernels: Mapping[int, int], callables: Mapping[int, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The record of one launcher global (``kernels``: ``id(handle) -> kernel index``;
    ``callables``: the records of :func:`op_callables`)."""
    if id(value) in kernels:
        return {"kernel": kernels[id(value)]}
    if callables is not None and id(value) in callables:
        return callables[id(value)]
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch._ops.OpOverload):
        return {
            "op": f"{value.namespace}.{value._schema.name.split('::')[-1]}.{value._overloadname}"
        }
    if isinstance(value, bool | int | float | str) or value is None:
        return {"value": value}
    if isinstance(value, list | tuple):
        items = [encode_value(item, kernels) for item in value]
        return {"list" if isinstance(value, list) else "tuple": items}
    name = _torch_attribute(value)
    if name is not None:
        return {"torch": name}
    function = getattr(torch._C._VariableFunctions, getattr(value, "__name__", ""), None)
    if function is not None and function is value:
        return {"function": value.__name__}
    method = getattr(torch._C.TensorBase, getattr(value, "__name__", ""), None)
    if method is not None and method is value:
        return {"method": value.__name__}
    raise UnsaveableError(f"no plain-data record for a launcher global {type(value).__name__}")


def decode_value(record: Mapping[str, Any], handles: Sequence[Any]) -> Any:
    """The launcher global that :func:`encode_value` wrote as ``record``."""
    ((kind, data),) = record.items()
    if kind == "kernel":
        return handles[data]
    if kind == "opref":
        name, direct = data
        target = parse_op(name).resolve()
        return direct_call(target) if direct else target
    if kind == "dtype":
        dtype = getattr(torch, data)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{data!r} is not a torch dtype")
        return dtype
    if kind == "device":
        return torch.device(data)
    if kind == "op":
        namespace, name, overload = data.split(".")
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)
    if kind == "value":
        return data
    if kind in ("list", "tuple"):
        items = [decode_value(item, handles) for item in data]
        return items if kind == "list" else tuple(items)
    if kind == "torch":
        return getattr(torch, data)
    if kind == "function":
        return getattr(torch._C._VariableFunctions, data)
    if kind == "method":
        return getattr(torch._C.TensorBase, data)
    raise ValueError(f"unknown launcher global record {kind!r}")


def _same(decoded: Any, value: Any) -> bool:
    """Whether a decoded global stands for ``value`` (the object itself, or an equal
    constant of the same type, NaN included)."""
    if decoded is value:
        return True
    if type(decoded) is not type(value):
        return False
    if isinstance(value, list | tuple):
        return len(decoded) == len(value) and all(map(_same, decoded, value))
    if isinstance(value, float) and math.isnan(value):
        return math.isnan(decoded)
    return isinstance(value, bool | int | float | str | torch.device) and decoded == value


def make_package(
    backend: str,
    launcher_source: str,
    env: Mapping[str, Any],
    handles: Sequence[Any],
    kernel_records: Sequence[Mapping[str, Any] | None],
    infos: Sequence[KernelInfo],
    eager_ops: Sequence[str],
    ops: Iterable[OpRef] = (),
    output_layouts: Sequence[TensorMeta | None] = (),
) -> dict[str, Any] | None:
    """The package of a compiled graph, or None when it cannot be saved as plain data
    (a kernel its backend gives no record for, a global with no record). ``ops``: the
    graph's ops, which extern calls may call; ``output_layouts``: the compiled graph's
    :attr:`~torchstrata.core.CompiledGraph.output_layouts`."""
    if any(record is None for record in kernel_records):
        return None
    defaults = default_globals()
    index = {id(handle): position for position, handle in enumerate(handles)}
    callables = op_callables(ops)
    globals_: dict[str, Any] = {}
    for name, value in env.items():
        if defaults.get(name) is value:
            continue
        try:
            record = encode_value(value, index, callables)
            same = _same(decode_value(record, handles), value)
        except Exception:  # noqa: BLE001 - no package, never a failed compile
            return None
        if not same:
            return None
        globals_[name] = record
    return {
        "format": FORMAT,
        "backend": backend,
        "launcher": launcher_source,
        "globals": globals_,
        "kernels": [dict(record) for record in kernel_records if record is not None],
        "kernel_ops": [list(info.ops) for info in infos],
        "eager_ops": list(eager_ops),
        "output_layouts": [_encode_layout(meta) for meta in output_layouts],
    }


def _encode_layout(meta: TensorMeta | None) -> dict[str, Any] | None:
    if meta is None:
        return None
    return {
        "shape": list(meta.shape),
        "dtype": str(meta.dtype).removeprefix("torch."),
        "device": str(meta.device),
        "strides": None if meta.strides is None else list(meta.strides),
        "requires_grad": meta.requires_grad,
    }


def _decode_layout(record: Mapping[str, Any] | None) -> TensorMeta | None:
    if record is None:
        return None
    dtype = getattr(torch, record["dtype"])
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a dtype: {record['dtype']!r}")
    return TensorMeta(
        tuple(record["shape"]),
        dtype,
        torch.device(record["device"]),
        None if record["strides"] is None else tuple(record["strides"]),
        bool(record["requires_grad"]),
    )


def load_package(
    package: Mapping[str, Any],
    load_kernels: KernelLoader,
    empty_strided: Callable[..., torch.Tensor] = torch.empty_strided,
) -> CompiledGraph:
    """The compiled graph saved as ``package`` (by :func:`make_package`), its kernels
    loaded by ``load_kernels``, its launcher allocating with ``empty_strided`` (see
    :func:`~torchstrata.inductor.launch.launcher.build_launcher`)."""
    if package.get("format") != FORMAT:
        raise ValueError(f"not a package of format {FORMAT!r}")
    records = package["kernels"]
    handles, paths = load_kernels(records)
    env = {name: decode_value(record, handles) for name, record in package["globals"].items()}
    source = package["launcher"]
    fn = build_launcher(source, env, empty_strided)
    backend = package["backend"]
    infos = tuple(
        KernelInfo(record["name"], backend, record["source"], path, tuple(ops))
        for record, path, ops in zip(records, paths, package["kernel_ops"], strict=True)
    )
    stats = {"backend": backend, "kernels": len(infos), "compile_seconds": 0.0, "cached": True}
    layouts = tuple(_decode_layout(record) for record in package["output_layouts"])
    return CompiledGraph(
        fn, infos, tuple(package["eager_ops"]), stats, source, layouts, dict(package)
    )
