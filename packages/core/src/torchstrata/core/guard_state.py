"""The global torch state that changes what ATen computes, read as one tuple.

A compiled graph is only right under the state it was traced in: grad mode decides what
autograd records, autocast which dtype a matmul runs in, the default dtype what
``torch.ones(3)`` makes, and so on. :func:`global_state` reads all of it into one tuple
(the list follows Dynamo's ``GlobalStateGuard`` in ``torch/csrc/dynamo/guards.cpp``,
plus the inference mode, the default device and the mode stacks that Dynamo guards
elsewhere); a cache entry keeps the tuple it was compiled under and every call compares
a fresh one with ``==`` (one :data:`~torchstrata.core.GuardKind.GLOBAL_STATE` guard).

The common case costs one C call per item: autocast, the torch function mode stack and
the dispatch mode stack are read in detail only when something is active.

Not in the snapshot: the float32 matmul precision, TF32 and reduced-precision-reduction
flags (cuBLAS, cuDNN, oneDNN, CPU fp16). Dynamo guards them because Inductor generates
matmul kernels of its own with them baked in; torchstrata generates none: matmuls and
convolutions run as ATen calls, which read these flags on every call, as eager does.
A backend that bakes them into generated code must add them here.

:func:`state_changes` names what differs between two snapshots (for the recompile
message), :func:`unsupported_state` what in a snapshot the compiler cannot reproduce
(the call then runs eagerly).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchstrata.core.results import Guard, GuardKind

_C: Any = torch._C


#: Device types autocast knows (``at::autocast::_AUTOCAST_SUPPORTED_DEVICES``).
AUTOCAST_DEVICES: tuple[str, ...] = tuple(
    getattr(_C, "_autocast_supported_devices", lambda: ("cpu", "cuda"))()
)

#: The items of a snapshot, in order: (name, expression over the readers in
#: :data:`_READERS`). An active autocast or mode stack is read in detail only when
#: there is one (the common call pays for one test each).
_ITEMS: list[tuple[str, str]] = [
    ("grad mode", "is_grad_enabled()"),
    ("inference mode", "is_inference_mode_enabled()"),
    ("autocast", "is_any_autocast_enabled() and autocast()"),
    ("default dtype", "get_default_dtype()"),
    ("torch function modes", "is_torch_function_mode_enabled() and function_modes()"),
    ("torch dispatch modes", "len_torch_dispatch_stack() and dispatch_modes()"),
    ("deterministic algorithms", "deterministic()"),
    ("deterministic algorithms warn_only", "deterministic_warn_only()"),
    ("deterministic fill of uninitialized memory", "deterministic_fill()"),
    ("number of threads", "get_num_threads()"),
]

#: The name of each item of a :func:`global_state` snapshot, in order.
STATE_FIELDS: tuple[str, ...] = tuple(name for name, _ in _ITEMS)


def _autocast() -> tuple[Any, ...]:
    """``((device, dtype), ..., ("cache", enabled))`` for each device autocast is on for
    (its dtype is compared only there, as in Dynamo's ``AutocastState``)."""
    enabled = _C.is_autocast_enabled
    dtype = _C.get_autocast_dtype
    found: list[Any] = [(device, dtype(device)) for device in AUTOCAST_DEVICES if enabled(device)]
    found.append(("cache", _C.is_autocast_cache_enabled()))
    return tuple(found)


def enabled_autocast() -> tuple[tuple[str, torch.dtype], ...]:
    """``(device type, dtype)`` of each device type autocast is enabled for now."""
    if not _C._is_any_autocast_enabled():
        return ()
    return tuple(item for item in _autocast() if item[0] != "cache")


def _mode_entry(mode: Any) -> Any:
    """A mode as a snapshot holds it: a default-device context by its device, any other
    mode by its type (a ``with Mode():`` per call makes a new object every time)."""
    device = getattr(mode, "device", None)
    if type(mode).__name__ == "DeviceContext" and device is not None:
        return ("device", torch.device(device))
    return type(mode)


def _function_modes() -> tuple[Any, ...]:
    return tuple(
        _mode_entry(_C._get_function_stack_at(i)) for i in range(_C._len_torch_function_stack())
    )


def _dispatch_modes() -> tuple[Any, ...]:
    return tuple(
        _mode_entry(_C._get_dispatch_stack_at(i)) for i in range(_C._len_torch_dispatch_stack())
    )


def _optional(name: str) -> Callable[[], Any]:
    """``torch._C.<name>``; a constant ``None`` where this torch lacks it."""
    return getattr(_C, name, lambda: None)


#: The functions the snapshot expressions of :data:`_ITEMS` call, by name.
_READERS: dict[str, Callable[..., Any]] = {
    "is_grad_enabled": _C.is_grad_enabled,
    "is_inference_mode_enabled": _C.is_inference_mode_enabled,
    "is_any_autocast_enabled": _C._is_any_autocast_enabled,
    "autocast": _autocast,
    "get_default_dtype": _C.get_default_dtype,
    "is_torch_function_mode_enabled": _C._is_torch_function_mode_enabled,
    "function_modes": _function_modes,
    "len_torch_dispatch_stack": _C._len_torch_dispatch_stack,
    "dispatch_modes": _dispatch_modes,
    "deterministic": _C._get_deterministic_algorithms,
    "deterministic_warn_only": _C._get_deterministic_algorithms_warn_only,
    "deterministic_fill": _optional("_get_deterministic_fill_uninitialized_memory"),
    "get_num_threads": _C.get_num_threads,
}


def _generate() -> Callable[[], tuple[Any, ...]]:
    """The snapshot function: one tuple display of every item's expression, each reader
    a local name (no global or attribute lookup per call)."""
    defaults = ", ".join(f"{name}={name}" for name in _READERS)
    body = ", ".join(f"({expression})" for _, expression in _ITEMS)
    source = f"def global_state({defaults}):\n    return ({body},)\n"
    namespace: dict[str, Any] = dict(_READERS)
    exec(compile(source, "<torchstrata global state>", "exec"), namespace)
    function: Callable[[], tuple[Any, ...]] = namespace["global_state"]
    function.__doc__ = "The global torch state now, one item per :data:`STATE_FIELDS` name."
    return function


#: ``global_state()``: the state now, a tuple with one item per :data:`STATE_FIELDS`.
global_state = _generate()

#: The guard source that reads the state (a name of every generated guard check).
GLOBAL_STATE_SOURCE = "global_torch_state()"
#: Names a generated guard check needs besides ``L``/``G``/its constants.
GUARD_NAMESPACE: dict[str, Any] = {"torch": torch, "global_torch_state": global_state}


def global_state_guard(snapshot: tuple[Any, ...] | None = None) -> Guard:
    """The guard that the global state is ``snapshot`` (by default the state now)."""
    expected = global_state() if snapshot is None else snapshot
    return Guard(GuardKind.GLOBAL_STATE, GLOBAL_STATE_SOURCE, expected, "global torch state")


def _describe(name: str, value: Any) -> str:
    if name == "autocast":
        if value is False:
            return "off"
        pieces = [f"{device} {dtype}" for device, dtype in value if device != "cache"]
        cache = dict(value).get("cache")
        return ", ".join(pieces) + ("" if cache else " (cache off)")
    if name.endswith("modes"):
        return "[" + ", ".join(_describe_mode(entry) for entry in value or ()) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def _describe_mode(entry: Any) -> str:
    if isinstance(entry, tuple) and entry[:1] == ("device",):
        return f"default device {entry[1]}"
    return getattr(entry, "__qualname__", str(entry))


def state_changes(expected: tuple[Any, ...], actual: tuple[Any, ...]) -> list[str]:
    """``"<item> changed from X to Y"`` for each item that differs between two
    snapshots."""
    return [
        f"{name} changed from {_describe(name, old)} to {_describe(name, new)}"
        for name, old, new in zip(STATE_FIELDS, expected, actual, strict=True)
        if old != new
    ]


def describe_state(snapshot: tuple[Any, ...]) -> dict[str, str]:
    """Each item of a snapshot, readable, by name."""
    return {
        name: _describe(name, value) for name, value in zip(STATE_FIELDS, snapshot, strict=True)
    }


def unsupported_state(snapshot: tuple[Any, ...]) -> str | None:
    """Why code compiled under ``snapshot`` could differ from eager (the call must run
    eagerly), or None when the compiler reproduces this state.

    Refused: autocast enabled for more than one device type at once (the capture
    reproduces one autocast region at a time), an active ``TorchFunctionMode`` or
    ``TorchDispatchMode`` (it would not see the compiled ops), and a default device other
    than the CPU (the graphs would make tensors on the CPU).
    """
    state = dict(zip(STATE_FIELDS, snapshot, strict=True))
    autocast = state["autocast"]
    if autocast is not False and sum(device != "cache" for device, _ in autocast) > 1:
        return (
            f"autocast is enabled for several device types ({_describe('autocast', autocast)}):"
            " torchstrata traces one autocast region at a time"
        )
    for entry in state["torch function modes"] or ():
        if isinstance(entry, tuple):
            if entry[1].type != "cpu":
                return (
                    f"the default device is {entry[1]} (torch.set_default_device or a "
                    "`with torch.device(...)` block): torchstrata compiles for the CPU "
                    "default device only"
                )
            continue
        return (
            f"a TorchFunctionMode ({_describe_mode(entry)}) is active: compiled code would "
            "bypass it"
        )
    for entry in state["torch dispatch modes"] or ():
        return (
            f"a TorchDispatchMode ({_describe_mode(entry)}) is active: compiled code would "
            "bypass it"
        )
    return None
