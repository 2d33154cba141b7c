"""Registered code generators: what ``CompileOptions.codegen`` names.

A :class:`BackendSpec` names a backend and makes it for a device; plugins return specs
from the ``torchstrata_inductor_backends`` hook (:mod:`~torchstrata.inductor.hookspecs`).
:func:`builtin_backends` are the inductor's own: ``cpp``, ``triton`` and ``eager`` (no
code generated: the graph runs eagerly).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs
import pluggy
import torch

from torchstrata.core import CompileOptions
from torchstrata.inductor.codegen.backend import Backend, CppBackend


class CodegenError(RuntimeError):
    """The graph cannot be compiled for this device with the requested backend."""


#: ``create(device, options)``: the backend for ``device``, or None to run eagerly; raises
#: :class:`CodegenError` when it cannot generate code for that device.
BackendFactory = Callable[[torch.device, CompileOptions], Backend | None]


@attrs.frozen
class BackendSpec:
    """A code generator users can select with ``CompileOptions(codegen=name)``.

    ``default_for``: device types (``"cpu"``, ``"cuda"``) this backend serves when
    ``codegen`` is None; at most one registered backend may claim each.
    """

    name: str
    create: BackendFactory
    description: str = ""
    default_for: tuple[str, ...] = ()


def _cpp(device: torch.device, options: CompileOptions) -> Backend:
    if device.type != "cpu":
        raise CodegenError(f"the C++ backend generates CPU code; the graph lives on {device}")
    return CppBackend(options.inductor)


def _triton(device: torch.device, options: CompileOptions) -> Backend:
    if device.type not in ("cuda", "cpu"):
        raise CodegenError(f"Triton codegen does not target {device}")
    # Importing Triton costs 0.2 s, so a C++ compile never does; the module still imports
    # Triton before it sets TRITON_INTERPRET (see its docstring).
    from torchstrata.inductor.codegen.triton.backend import TritonBackend
    from torchstrata.inductor.codegen.triton.env import library_compiled

    if device.type == "cuda" and not library_compiled():
        raise CodegenError(
            "Triton was imported with TRITON_INTERPRET=1 set, so its own library is "
            "interpreted and no GPU kernel can be compiled in this process; unset "
            "TRITON_INTERPRET (torchstrata runs CPU tensors under the interpreter itself)"
        )
    return TritonBackend(
        interpret=device.type == "cpu", options=options.inductor, device_index=device.index
    )


def _eager(device: torch.device, options: CompileOptions) -> None:
    return None


def builtin_backends() -> tuple[BackendSpec, ...]:
    """The inductor's own backends."""
    return (
        BackendSpec("cpp", _cpp, "plain C++ with OpenMP, loaded with ctypes", ("cpu",)),
        BackendSpec(
            "triton", _triton, "@triton.jit kernels (the interpreter on CPU tensors)", ("cuda",)
        ),
        BackendSpec("eager", _eager, "no code generated: the graph runs eagerly"),
    )


def backend_table(specs: Iterable[BackendSpec]) -> dict[str, BackendSpec]:
    """``{name: spec}``; two specs of one name, or two defaults for one device, are errors."""
    table: dict[str, BackendSpec] = {}
    defaults: dict[str, str] = {}
    for spec in specs:
        if spec.name in table and table[spec.name] != spec:
            raise CodegenError(f"two inductor backends are named {spec.name!r}")
        table[spec.name] = spec
        for device_type in spec.default_for:
            if defaults.setdefault(device_type, spec.name) != spec.name:
                raise CodegenError(
                    f"inductor backends {defaults[device_type]!r} and {spec.name!r} both "
                    f"claim to be the default for {device_type} devices"
                )
    return table


def registered_backends(manager: pluggy.PluginManager) -> dict[str, BackendSpec]:
    """Every backend the plugins of ``manager`` register (the built-ins among them)."""
    results: list[Sequence[BackendSpec] | None] = manager.hook.torchstrata_inductor_backends()
    return backend_table(spec for specs in results for spec in specs or ())


def choose_backend(
    device: torch.device | str,
    options: CompileOptions,
    backends: Mapping[str, BackendSpec] | None = None,
) -> Backend | None:
    """The backend ``options.codegen`` names among ``backends`` (default: the built-ins),
    made for ``device``; None for a backend that runs the graph eagerly.

    ``codegen`` None picks the backend registered as the default for the device type
    (Triton on CUDA, C++ on CPU); "triton" on CPU runs under Triton's interpreter.
    """
    device = torch.device(device)
    table = backends if backends is not None else backend_table(builtin_backends())
    name = options.codegen
    if name is None:
        defaults = [spec.name for spec in table.values() if device.type in spec.default_for]
        if not defaults:
            raise CodegenError(f"no registered inductor backend generates code for {device}")
        name = defaults[0]
    spec = table.get(name)
    if spec is None:
        raise CodegenError(
            f"codegen={name!r} is not a registered inductor backend; registered: "
            f"{', '.join(sorted(table))} (a backend package registers more through the "
            "torchstrata_inductor_backends hook)"
        )
    return spec.create(device, options)
