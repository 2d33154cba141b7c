"""The Triton backend: generate a module per kernel, load it, launch it from the launcher.

On a CPU device the kernels run under Triton's interpreter: ``TRITON_INTERPRET=1`` is set
while the generated module is executed (``@triton.jit`` reads it at decoration time, in
Triton 3.6 and 3.9 alike) and while its kernel is launched, and only then (see
:mod:`~torchstrata.inductor.codegen.triton.env`). For GPU kernels it is cleared while the module
executes. Triton itself is imported with this module, so its own library functions are
always decorated as compiled functions, never as a side effect of our setting.

Generated modules live in the artifact store (:mod:`torchstrata.core.artifacts`,
namespace ``triton``), keyed by their canonical source (the names taken from graph nodes
renamed, see :func:`~torchstrata.core.artifacts.canonical_source`): the kernels of
identical layers are one file, one module and one Triton compile. Each file's hash is
checked before it is executed. What Triton compiles from them (IR, PTX, cubin, launcher
stubs) goes to the same store, verified the same way, instead of Triton's own cache: the
first call of a kernel and its launches through Triton's dispatch run inside
:func:`~torchstrata.inductor.codegen.triton.verified_cache.verified_triton_cache`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import torch
import triton  # noqa: F401 - imported before any TRITON_INTERPRET change, see above

from torchstrata.core import (
    CompileOptions,
    GraphPass,
    InductorOptions,
    KernelInfo,
    active_symbols,
    python_source,
    size_printer,
)
from torchstrata.core.artifacts import CacheSettings, open_store
from torchstrata.inductor.codegen.backend import BuiltLaunch
from torchstrata.inductor.codegen.cpp.build import canonical_text
from torchstrata.inductor.codegen.flat_rows import flatten_reduced, flatten_rows
from torchstrata.inductor.codegen.half_roundings import drop_half_roundings
from torchstrata.inductor.codegen.reciprocals import hoist_reciprocals
from torchstrata.inductor.codegen.triton.cluster import scratch_size as cluster_scratch_size
from torchstrata.inductor.codegen.triton.env import triton_interpret
from torchstrata.inductor.codegen.triton.generate import generate_triton
from torchstrata.inductor.codegen.triton.passes import triton_graph_passes, triton_plan_passes
from torchstrata.inductor.codegen.triton.precompile import default_threads
from torchstrata.inductor.codegen.triton.printer import RED_PARAM, rounds_to_half, size_values
from torchstrata.inductor.codegen.triton.printer import supports as triton_supports
from torchstrata.inductor.codegen.triton.row_tiles import as_row_kernel
from torchstrata.inductor.codegen.triton.shifted_exps import shift_row_exps
from torchstrata.inductor.codegen.triton.size_buckets import hint, symbol_params
from torchstrata.inductor.codegen.triton.size_source import triton_size_source
from torchstrata.inductor.codegen.triton.sized_launch import (
    SizedKernel,
    size_function,
    sized_record_checks,
)
from torchstrata.inductor.codegen.triton.split import generate_split_triton, scratch_sizes
from torchstrata.inductor.codegen.triton.tails import tail_scratch
from torchstrata.inductor.codegen.triton.tuning import (
    ChoiceCache,
    Config,
    TunedKernel,
    candidate_configs,
    tuning_key,
)
from torchstrata.inductor.codegen.triton.verified_cache import verified_triton_cache
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.launch.launcher import KernelLaunch
from torchstrata.inductor.launch.triton_launch import cluster_launch_supported
from torchstrata.inductor.launch.triton_records import (
    TritonKernelRecord,
    from_json,
    make_record,
    to_json,
)
from torchstrata.inductor.schedule.plan_passes import PlanPass

#: The artifact store's namespace for generated Triton modules.
CACHE_NAMESPACE = "triton"
#: Modules imported in this process, by (cache root, source key, interpreted): identical
#: kernels share one ``@triton.jit`` function, so Triton compiles it once.
_MODULES: dict[tuple[Path, str, bool], tuple[ModuleType, str]] = {}
_MODULES_LOCK = threading.Lock()


def load_module(
    source: str,
    name: str,
    cache_dir: str | None,
    interpret: bool,
    size_limit: int | None = None,
) -> tuple[ModuleType, str]:
    """Import ``source``, whose kernel is ``name``, from a verified store entry (Triton
    reads a kernel's source from its file) and return the module and the file's path.

    The entry is keyed by the source's SHA-256 and checked against its recorded hash
    before it is executed; one module per source per process.
    """
    key = hashlib.sha256(source.encode()).hexdigest()
    store = open_store(CacheSettings.resolve(cache_dir, size_limit))
    with _MODULES_LOCK:
        loaded = _MODULES.get((store.root, key, interpret))
        if loaded is not None:
            return loaded
        path, _ = store.get_or_build(CACHE_NAMESPACE, key, ".py", source.encode)
        # The verified text is executed as it is, not imported: an import would read (and
        # write) a ``__pycache__`` beside the entry, bytecode the store's hash never checked.
        module = ModuleType(f"torchstrata_triton_{name}_{key[:24]}")
        module.__file__ = str(path)
        code = compile(source, str(path), "exec", dont_inherit=True)
        with triton_interpret(interpret):
            exec(code, module.__dict__)
        loaded = _MODULES[(store.root, key, interpret)] = (module, str(path))
        return loaded


class TritonBackend:
    """``@triton.jit`` kernels; ``interpret=True`` runs them on CPU tensors under the interpreter."""

    name = "triton"

    def __init__(
        self,
        interpret: bool,
        options: InductorOptions | None = None,
        device_index: int | None = None,
    ) -> None:
        self.interpret = interpret
        self.options = options if options is not None else InductorOptions()
        #: The CUDA device compiled for (None: the current one when a kernel is built).
        self.device_index = device_index

    def supports(self, prim: str, dtype: torch.dtype) -> bool:
        """See :class:`~torchstrata.inductor.codegen.backend.Backend`."""
        return triton_supports(prim, dtype, interpret=self.interpret)

    def graph_passes(self) -> Sequence[GraphPass]:
        """See :class:`~torchstrata.inductor.codegen.backend.Backend`: long sums split."""
        return triton_graph_passes(self.options)

    def plan_passes(self) -> Sequence[PlanPass]:
        """See :class:`~torchstrata.inductor.codegen.backend.Backend`: partials, tails and
        horizontal fusion (a launch costs microseconds on a GPU)."""
        return triton_plan_passes(self.options)

    def generate(
        self, kernel: Kernel, clusters: bool
    ) -> tuple[Kernel, list[Config], list[tuple[tuple[bool, int, int, int], str]]]:
        """The kernel as generated (rewritten, see :meth:`build`), its candidate launch
        configurations and one Triton source per code variant; ``clusters``: the GPU
        launches thread-block clusters."""
        options = self.options
        if options.row_tiles:
            kernel = as_row_kernel(kernel) or kernel
        # contiguous leading row dims as one (as in C++): the source of a kernel over
        # rows (B, T) no longer names T, so a new T reuses the module (decision 0225)
        # and reduced dims, and all dims of a pointwise kernel (walked as one flat range
        # of elements): decision 0250
        flat = flatten_reduced(_flat_elements(kernel))
        if flat.parts:  # a horizontal kernel's parts, each on its own
            flat = attrs.evolve(flat, parts=tuple(map(_flat_elements, flat.parts)))
        kernel = kernel if flat == kernel else flat  # unchanged: the same kernel
        if not options.half_roundings:
            kernel = drop_half_roundings(kernel)
        if options.reciprocals:
            kernel = hoist_reciprocals(kernel)
        shifted = shift_row_exps(kernel) if options.shifted_exps else kernel
        # a symbolic lowering's long rows loop: split and clustered rows take scratch
        # buffers sized by the row (decision 0400)
        symbolic = bool(symbol_params())
        configs = candidate_configs(
            kernel,
            self.interpret,
            split_rows=False if symbolic else options.split_rows,
            clusters=clusters and not symbolic,
        )
        if len(configs) > 1 and kernel.rows * kernel.row_length < options.tune_min_elements:
            configs = configs[:1]  # launch-bound: every configuration takes the same time
        masks_dropped = not symbolic  # a size a symbolic lowering serves may not divide a block
        generated = []
        # a size with ``//`` or ``%`` in it prints as Triton reads it (decision 0438)
        with size_printer(triton_size_source):
            for variant in sorted({config.variant for config in configs}, reverse=True):
                persistent, group, split, cluster = variant
                launches = [config for config in configs if config.variant == variant]
                if split > 1:
                    (chunk,) = {config.rblock for config in launches}
                    source = generate_split_triton(kernel, split, chunk, options.flat_indices)
                else:
                    source = generate_triton(
                        shifted,
                        interpret=self.interpret,
                        persistent=persistent,
                        group=group,
                        even_rows=masks_dropped
                        and all(kernel.rows % config.xblock == 0 for config in launches),
                        even_row=masks_dropped
                        and all(kernel.row_length % config.rblock == 0 for config in launches),
                        cluster=cluster,
                        prefetch_partials=options.partials_prefetch,
                        flat_indices=options.flat_indices,
                    )
                generated.append((variant, source))
        return kernel, configs, generated

    def build(self, kernel: Kernel, options: CompileOptions) -> BuiltLaunch:
        """See :class:`Backend`: one module per code variant, the launch config tuned later.

        A pointwise kernel with per-row work is generated as a row kernel (``row_tiles``);
        contiguous leading row dims are walked as one
        (:func:`~torchstrata.inductor.codegen.flat_rows.flatten_rows`); divisions by per-row values become multiplications (``reciprocals``); a row's
        ``exp(v - max(v))`` is shifted (``shifted_exps``) except in split rows, whose
        output reuses the statistics' own exps. The launch's record (for the
        compiled-graph cache) is what :meth:`load` builds it from."""
        clusters = not self.interpret and self.options.cluster_rows and cluster_launch_supported()
        kernel, configs, generated = self.generate(kernel, clusters)
        # Named as in every identical kernel (repeated layers): one module, one entry.
        named = [
            (
                variant,
                source,
                canonical_text(source, kernel.name),
            )
            for variant, source in generated
        ]
        record = make_record(
            kernel.name,
            kernel.rows,
            self.interpret,
            configs,
            named,
            lambda split: scratch_sizes(kernel, split),
            tail_scratch(kernel) if kernel.tail is not None else None,
            lambda size: cluster_scratch_size(kernel, size),
            size_values(kernel),
        )
        symbols = symbol_params()
        if symbols:  # a symbolic lowering (decision 0400)
            sized_record_checks(kernel, configs, record.sizes, self.interpret)
            hints = tuple(hint(symbol) for symbol in active_symbols())
            record = attrs.evolve(record, symbols=symbols, hints=hints)
        tuned, path = self.load(record, options)
        handle: TunedKernel | SizedKernel = SizedKernel(tuned, symbols) if symbols else tuned
        # compiled on the pool while the graph is lowered further (a GPU build-only run,
        # as in tests without one, compiles nothing ahead)
        if not self.interpret and torch.cuda.is_available():
            device = self.device_index
            handle.start_compiles(
                [arg.dtype for arg in kernel.args],
                torch.cuda.current_device() if device is None else device,
            )
        info = KernelInfo(kernel.name, self.name, record.source, path, kernel.ops)
        call = functools.partial(_run_call, sizes=symbols)
        with size_printer(python_source):  # sizes with ``//`` or ``%`` in them
            json = to_json(record)  # a symbolic one's sizes as expressions (decision 0450)
        return BuiltLaunch(KernelLaunch(kernel, handle, call), info, record=json)

    def load(self, record: TritonKernelRecord, options: CompileOptions) -> tuple[TunedKernel, str]:
        """The launchable kernel of ``record`` (its modules from the store, generated
        no more) and its first module's path."""
        if record.interpret != self.interpret:
            raise ValueError(f"{record.name} was generated for another Triton mode")
        variants, canonical, paths = {}, [], []
        for variant, (text, symbol) in record.variants.items():
            module, path = load_module(
                text, symbol, options.cache_dir, self.interpret, options.cache_size_limit
            )
            variants[variant] = getattr(module, symbol)
            canonical.append(text)
            paths.append(path)
        choice_cache = None
        compile_scope: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
        if not self.interpret:
            store = open_store(CacheSettings.resolve(options.cache_dir, options.cache_size_limit))
            rows, sizes = _hinted(record)
            row_length = sizes.get(RED_PARAM)
            rekey = functools.partial(
                tuning_key, canonical, torch.cuda.get_device_name(), row_length=row_length
            )
            # the first size's buckets (decision 0400); a sized kernel's other rows rekey
            choice_cache = ChoiceCache(store, rekey(rows), rekey)
            compile_scope = functools.partial(verified_triton_cache, store)
        tuned = TunedKernel(
            variants,
            list(record.configs),
            record.rows,
            choice_cache,
            not self.interpret,
            scratch=record.split_sizes,
            tail=record.tail,
            cluster_scratch=record.cluster_size,
            direct_launch=self.options.direct_launch,
            compile_scope=compile_scope,
            fp_fusion=not any(rounds_to_half(text) for text in canonical),
            compile_threads=self.options.compile_threads or default_threads(),
            sizes=record.sizes,
        )
        return tuned, paths[0]

    def load_kernels(
        self, records: Sequence[Mapping[str, Any]], options: CompileOptions
    ) -> tuple[list[Any], list[str | None]]:
        """The kernels of the records :meth:`build` made (see :meth:`load`), and their
        first modules' paths."""
        handles: list[Any] = []
        paths: list[str | None] = []
        for data in records:
            record = from_json(data)
            tuned, path = self.load(record, options)
            sized = SizedKernel(tuned, record.symbols, record.hints) if record.symbols else None
            handles.append(tuned if sized is None else sized)
            paths.append(path)
        return handles, paths


def _hinted(record: TritonKernelRecord) -> tuple[int, dict[str, int]]:
    """``record``'s rows and size arguments where it was lowered (a symbolic record's
    evaluated at its hints, decision 0450)."""
    if not record.symbols:
        return hint(record.rows), {name: hint(size) for name, size in record.sizes.items()}
    evaluate = size_function(record.symbols, (record.rows, *record.sizes.values()))
    rows, *sizes = evaluate(*record.hints)
    return rows, dict(zip(record.sizes, sizes, strict=True))


def _flat_elements(kernel: Kernel) -> Kernel:
    """``kernel``'s rows as one (:func:`flatten_rows`): a pointwise kernel's elements as
    one flat range where every index walks them contiguously, else its leading dims."""
    whole = flatten_rows(kernel, inner_loop=False)
    if kernel.red_shape or len(kernel.row_shape) < 2 or len(whole.row_shape) == 1:
        return whole
    return flatten_rows(kernel)


def _run_call(handle: str, args: Sequence[str], sizes: Sequence[str] = ()) -> str:
    return f"{handle}.run({', '.join([*args, *sizes])})"
