"""Launch configurations for Triton kernels: candidates, first-call autotuning, a disk cache.

A :class:`Config` picks the code variant (persistent or looped) and the launch constants
(``XBLOCK`` rows per program, ``RBLOCK`` reduced elements per tile, ``num_warps``).

* Pointwise kernels: 1-D blocks of 1024-4096 elements, 4 or 8 warps.
* Rows that fit (``next_power_of_2(row) <= PERSISTENT_MAX``) are persistent: every input is
  read once. Short rows put several rows in one program (a tile of 2048-8192 elements), and
  ``num_warps`` grows with the tile (about 16 elements per thread).
* Column sums (loads contiguous along the rows, not the reduced dims) get looped tiles
  of 32-256 rows by 8-32 reduced elements, so that a warp reads consecutive addresses,
  software-pipelined over three stages; loops along a row run unpipelined (one stage:
  measured faster on the H200 for cross-entropy rows, where more stages only cost
  registers and shared memory).
* Rows over ``LOOPED_MIN`` elements also get looped candidates (RBLOCK 1024-4096, one to
  four rows per program, online max+sum where the kernel allows, with the running max
  kept per row or per group of 8 elements); huge rows only looped ones.

On a GPU every candidate is timed on the first call (``triton.testing.do_bench``, median)
with the real arguments (kernels only write their own fresh outputs, so reruns are
harmless) and the winner is stored in the artifact store (namespace ``triton-tuning``,
verified on read like every entry), the key hashing the kernel sources, the device name
and the Triton version, and the rows' bucket (the next power of two: a new size in a
tuned bucket is not timed again). Under the interpreter the first candidate is used without timing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import attrs
import torch
import triton
from triton.testing import do_bench

from torchstrata.core import Progress, progress
from torchstrata.core.artifacts import ArtifactStore
from torchstrata.inductor.codegen.triton.cluster import can_cluster
from torchstrata.inductor.codegen.triton.env import interpreted
from torchstrata.inductor.codegen.triton.precompile import (
    CompileJob,
    compile_configs,
    scratch_tensors,
    submit_compiles,
)
from torchstrata.inductor.codegen.triton.printer import ROWS_PARAM
from torchstrata.inductor.codegen.triton.row_count import rows_generic
from torchstrata.inductor.codegen.triton.size_buckets import (
    capped_power_of_2,
    column_sum,
    next_power_of_2,
)
from torchstrata.inductor.codegen.triton.split import can_split
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.ir.online import online_pairs
from torchstrata.inductor.launch.triton_launch import (
    ClusterLaunch,
    DirectLaunch,
    current_stream,
)

#: The artifact store's namespace for tuned launch configurations.
TUNING_NAMESPACE = "triton-tuning"

PERSISTENT_MAX = 32768  # largest RBLOCK of a persistent tile
MIN_TILE = 1024  # the smallest tile: rows it holds at once are one program whatever their count
LOOPED_MIN = 8192  # rows longer than this also try looped variants
INTERPRETER_TILE = 65536  # the interpreter runs programs one by one: few, large tiles
INTERPRETER_LOOP_BLOCK = 4096
#: (XBLOCK, RBLOCK, num_warps) of looped rows.
LOOPED_SHAPES = (
    (1, 1024, 4),
    (1, 2048, 4),
    (1, 2048, 8),
    (1, 4096, 4),
    (1, 4096, 8),
    (1, 4096, 16),
    (2, 2048, 8),
    (4, 1024, 8),
)
#: Rows of at least LONG_ROW_MIN elements are few (a 256 MB tensor has 1024 rows of 65536
#: bf16), so each program must keep more bytes in flight: also larger tiles, and software
#: pipelined loops (``num_stages=3``: the next tiles' loads are issued before this one is
#: used). (XBLOCK, RBLOCK, num_warps, num_stages).
LONG_ROW_MIN = 65536
LONG_ROW_SHAPES = (
    (1, 8192, 16, 1),
    (1, 16384, 16, 1),
    (1, 16384, 32, 1),
    (1, 4096, 16, 3),
    (1, 8192, 16, 3),
    (1, 4096, 8, 3),
)
#: Online softmax statistics kept per group of ONLINE_GROUP elements (a thread's vector of
#: bf16: no shuffles in the loop) under these (XBLOCK, RBLOCK, num_warps, num_stages); on the
#: H200 they beat the per-row form on cross-entropy's rows by 7-14%
#: (bench/results/2026-11-30-h200-online-groups.txt).
ONLINE_GROUP = 8
GROUPED_SHAPES = ((1, 2048, 4, 1), (1, 4096, 8, 1), (1, 8192, 8, 2), (1, 16384, 16, 2))
#: Grouped shapes added for rows of LONG_ROW_MIN or more: 32 warps won softmax over rows of
#: 65536 (80.2 us against 82.9) and 262144 (97.5 against 100.3 split)
#: (bench/results/2026-11-30-h200-prefetch.txt).
LONG_GROUPED_SHAPES = ((1, 16384, 32, 1), (1, 32768, 32, 1))
#: (RBLOCK, num_warps) of rows split across programs (``triton_split``): a chunk per
#: program. Few warps won on the H200 (64 elements per thread at 8192 with 4 warps; chunks
#: of 4096, or 2 or 16 warps, were slower: bench/results/2026-11-30-h200-split-rows.txt).
SPLIT_SHAPES = ((8192, 4), (16384, 4), (8192, 8))
#: Rows of at least SPLIT_MIN elements may be split with ``InductorOptions(split_rows=True)``; by
#: default from LONG_ROW_MIN on (below it a looped kernel's second read hits L2).
SPLIT_MIN = 16384
SPLIT_MAX = 64  # programs per row
#: (programs per row, RBLOCK, num_warps) of looped rows walked by clusters
#: (``triton_cluster``), offered for rows of at least LONG_ROW_MIN on GPUs with clusters.
#: On the H200, softmax over 256 rows of 262144 bf16: 91.4, 93.0 and 96.5 us against 97.9
#: for the best one-program-per-row kernel; over rows of 65536 the latter still wins (80.0
#: against 86.1) (bench/results/2026-12-01-h200-cluster-rows.txt).
CLUSTER_SHAPES = ((8, 8192, 16), (16, 8192, 8), (8, 8192, 8))
#: (XBLOCK, RBLOCK, num_warps) of column sums: many contiguous rows, a short row chunk.
OUTER_SHAPES = ((64, 8, 4), (64, 16, 4), (128, 8, 4), (128, 16, 8), (32, 32, 4), (256, 8, 8))
OUTER_RBLOCK = max(rblock for _, rblock, _ in OUTER_SHAPES)


@attrs.frozen
class Config:
    """One launch configuration of a kernel."""

    xblock: int
    rblock: int
    num_warps: int
    persistent: bool
    #: Looped online softmax statistics kept per group of this many elements (0: per row;
    #: see generate_triton).
    group: int = 0
    num_stages: int = 1  # software pipelining depth of the kernel's loops
    #: Programs per row (``triton_split``): each holds one ``RBLOCK`` chunk of the row.
    split: int = 1
    #: A fixed number of programs, each over a chunk of rows (a kernel with ``partials``).
    programs: int = 0
    #: Programs per row of a looped kernel launched as clusters (``triton_cluster``).
    cluster: int = 1

    @property
    def variant(self) -> tuple[bool, int, int, int]:
        """The code variant this configuration launches: ``(persistent, group, split,
        cluster)``."""
        return self.persistent, self.group, self.split, self.cluster

    def grid(self, rows: int) -> tuple[int]:
        """Programs needed for ``rows`` rows (or elements, for pointwise kernels)."""
        if self.programs:
            return (self.programs,)
        if self.split > 1 or self.cluster > 1:
            return (rows * max(self.split, self.cluster),)
        return (max(1, math.ceil(rows / self.xblock)),)


def _warps_for(tile: int) -> int:
    return max(1, min(16, next_power_of_2(tile // 512)))


def candidate_configs(
    kernel: Kernel, interpret: bool, split_rows: bool | None = None, clusters: bool = False
) -> list[Config]:
    """The configurations worth trying for ``kernel``; the first is the default.

    ``split_rows``: True offers rows split across programs from ``SPLIT_MIN`` elements on,
    False never; None (the default, ``InductorOptions.split_rows``) offers them from
    ``LONG_ROW_MIN`` on. ``clusters``: the GPU launches thread-block clusters,
    so rows of at least ``LONG_ROW_MIN`` may also be walked by clusters (``triton_cluster``).
    """
    if kernel.partials is not None:
        return _partials_configs(kernel, interpret)
    setting = None if split_rows is None else "1" if split_rows else "0"
    split_min = {"1": SPLIT_MIN, "0": math.inf, None: LONG_ROW_MIN}[setting]
    # the rows matter only between the fewest and the most rows a tile takes (a symbolic
    # lowering's bucket of rows, decision 0400)
    if not kernel.red_shape:
        if interpret:
            rows = capped_power_of_2(kernel.rows, INTERPRETER_TILE, MIN_TILE)
            return [Config(rows, 1, 1, True)]
        shapes = [(1024, 4), (2048, 4), (2048, 8), (4096, 8)]
        rows = capped_power_of_2(kernel.rows, 4096, MIN_TILE)
        return list(dict.fromkeys(_pointwise(min(rows, x), w) for x, w in shapes))
    length = kernel.row_length
    columns = not interpret and column_sum(kernel)
    # a column sum's tiles loop over its row, OUTER_RBLOCK at most at a time: a symbolic
    # row length (a weight gradient's rows, decision 0440) takes that block, masked, and
    # records no bucket (an int length keeps its own, smaller where the row is short)
    rblock = (
        capped_power_of_2(length, OUTER_RBLOCK, OUTER_RBLOCK)
        if columns
        else next_power_of_2(length)
    )
    most = max(1, INTERPRETER_TILE // rblock) if interpret else max(8192 // rblock, 256)
    rows = capped_power_of_2(kernel.rows, most, min(most, max(1, MIN_TILE // rblock)))
    if interpret:
        if rblock <= INTERPRETER_TILE:
            return [Config(max(1, min(rows, INTERPRETER_TILE // rblock)), rblock, 1, True)]
        return [Config(1, INTERPRETER_LOOP_BLOCK, 1, False)]
    configs: list[Config] = []
    if columns:
        for xblock, rblock_, warps in OUTER_SHAPES:
            shape = Config(min(rows, xblock), min(rblock, rblock_), warps, False, num_stages=3)
            configs.append(shape)
        return list(dict.fromkeys(configs))
    if rblock <= PERSISTENT_MAX:
        for tile in (1024, 2048, 4096, 8192):
            xblock = max(1, min(rows, tile // rblock))
            warps = _warps_for(xblock * rblock)
            configs += [Config(xblock, rblock, warps, True)]
            if warps < 16:
                configs.append(Config(xblock, rblock, warps * 2, True))
            if xblock == 1 and rblock >= 8192:  # one long row per program: try more warps
                configs += [Config(1, rblock, 8, True), Config(1, rblock, 32, True)]
    if split_min != math.inf and length >= split_min and can_split(kernel):
        for chunk, warps in SPLIT_SHAPES:
            split = math.ceil(length / chunk)
            if 1 < split <= SPLIT_MAX:
                configs.append(Config(1, chunk, warps, True, split=split))
    if length > LOOPED_MIN or not configs:
        online = bool(online_pairs(kernel.reductions, counts=True))
        looped = [(x, r, w, 1) for x, r, w in LOOPED_SHAPES]
        if length >= LONG_ROW_MIN:
            looped += LONG_ROW_SHAPES
        for xblock, block, warps, stages in looped:
            config = Config(min(xblock, rows), min(block, rblock), warps, False, num_stages=stages)
            configs.append(config)
        if online:
            grouped = GROUPED_SHAPES + (LONG_GROUPED_SHAPES if length >= LONG_ROW_MIN else ())
            for xblock, block, warps, stages in grouped:
                x, r = min(xblock, rows), min(block, rblock)
                configs.append(Config(x, r, warps, False, num_stages=stages, group=ONLINE_GROUP))
        if clusters and length >= LONG_ROW_MIN:
            group = ONLINE_GROUP if online_pairs(kernel.reductions) else 0  # no counts there
            for size, block, warps in CLUSTER_SHAPES:
                if can_cluster(kernel, size, block):
                    configs.append(Config(1, block, warps, False, group=group, cluster=size))
    return list(dict.fromkeys(configs))


def _pointwise(xblock: int, warps: int) -> Config:
    """A pointwise tile of ``xblock`` elements with ``warps`` warps, fewer where the tile is
    short (at least 256 elements a warp, as Inductor): 8 elements on 4 warps left 120 of
    128 threads idle."""
    return Config(xblock, 1, max(1, min(warps, xblock // 256)), True)


def _partials_configs(kernel: Kernel, interpret: bool) -> list[Config]:
    """Persistent tiles of ``XBLOCK`` rows (dividing the chunk) for a kernel with
    column partial sums; one program per chunk."""
    partials = kernel.partials
    assert partials is not None
    rblock = next_power_of_2(kernel.row_length)
    xblocks = [x for x in (1, 2, 4) if partials.chunk % x == 0 and x * rblock <= 16384]
    if interpret:  # few, wide blocks (the interpreter pays per operation), at least two
        wide = [x for x in (1, 2, 4, 8, 16, 32, 64) if 2 * x <= partials.chunk]
        x = max([w for w in wide if partials.chunk % w == 0 and w * rblock <= 16384] or [1])
        return [Config(x, rblock, 1, True, programs=partials.programs)]
    configs = [
        Config(x, rblock, warps, True, programs=partials.programs)
        for x in xblocks
        for warps in (4, 8, 16)
        if x * rblock >= warps * 128  # at least a vector of 4 per thread
    ]
    if configs:
        return configs
    # short rows (a group norm over 6 channels: the largest tile is 16 elements) or a row
    # too long for 16384-element tiles: the widest tile there is, its warps to match
    x = max(xblocks or [1])
    return [Config(x, rblock, _warps_for(x * rblock), True, programs=partials.programs)]


def rows_bucket(rows: int) -> int:
    """The bucket of row counts that share a tuned configuration: the next power of two.
    The candidates (:func:`candidate_configs`) depend on the rows only through it, so
    every configuration tuned in a bucket is one of each of its sizes' candidates."""
    return next_power_of_2(rows)


def tuning_key(
    sources: Sequence[str], device: str, rows: int, row_length: int | None = None
) -> str:
    """Hash of the kernel sources (as :func:`rows_generic` writes them), the device name,
    the Triton version and the rows' bucket (:func:`rows_bucket`): a source serves every
    number of rows and the best launch depends on it, but a size in a bucket tuned
    already takes its configuration without timing again (decision 0225). Likewise the
    bucket of a reduction's ``row_length`` (a source serves every row length since
    decision 0250; the candidates depend on it only through its next power of two)."""
    generic = [rows_generic(source) for source in sources]
    buckets = [f"rows<={rows_bucket(rows)}"]
    if row_length is not None:
        buckets.append(f"row<={rows_bucket(row_length)}")
    text = "\0".join([*generic, device, triton.__version__, *buckets])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@attrs.frozen
class ChoiceCache:
    """Where a kernel's tuned configuration is kept: the entry ``key`` of ``store``;
    ``rekey(rows)`` is the key of the same kernel at another number of rows (its
    :func:`tuning_key`: one entry per bucket of rows)."""

    store: ArtifactStore
    key: str
    rekey: Callable[[int], str] | None = None

    def at_rows(self, rows: int) -> ChoiceCache:
        """The entry of the same kernel launched over ``rows`` rows."""
        return self if self.rekey is None else attrs.evolve(self, key=self.rekey(rows))

    def read(self) -> Config | None:
        """The stored configuration, or None (none stored, or not a configuration)."""
        path = self.store.get(TUNING_NAMESPACE, self.key, ".json")
        if path is None:
            return None
        try:
            return Config(**json.loads(path.read_bytes()))
        except (OSError, ValueError, TypeError):
            return None

    def write(self, config: Config) -> None:
        """Store ``config`` (atomically, see :class:`~torchstrata.core.artifacts.ArtifactStore`)."""
        data = json.dumps(attrs.asdict(config)).encode()
        self.store.put(TUNING_NAMESPACE, self.key, ".json", data)


def _with_scratch(run: Callable[..., Any], floats: int, counters: int | None) -> Callable[..., Any]:
    """``run`` with scratch buffers appended to its arguments: ``floats`` float32
    elements, then (unless ``counters`` is None) ``counters`` int32 ones, zeroed once
    (kernels reset their counters).

    One set per stream: two launches at once on different streams must not share them."""
    scratch: dict[Any, tuple[torch.Tensor, ...]] = {}

    def run_with_scratch(*args: Any) -> None:
        device = args[0].device
        stream = current_stream(device.index) if device.type == "cuda" else 0  # a raw pointer
        buffers = scratch.get(stream)
        if buffers is None:  # allocated on the first call on this stream
            buffers = scratch_tensors((floats, counters), device)
            if counters is not None:
                buffers[1].zero_()  # the counters start at zero; kernels reset them
            scratch[stream] = buffers
        run(*args, *buffers)

    return run_with_scratch


class TunedKernel:
    """A kernel's variants (``{Config.variant: jit function}``) behind one call.

    The first call picks a configuration (cache, benchmark, or the default), then every call
    launches it as a plain ``fn[grid](*args, XBLOCK=..., RBLOCK=..., num_warps=...)``, or
    on a GPU (unless ``direct_launch`` is False: ``InductorOptions.direct_launch``) through
    :class:`~torchstrata.inductor.launch.triton_launch.DirectLaunch`.
    """

    def __init__(
        self,
        variants: dict[tuple[bool, int, int, int], Any],
        configs: list[Config],
        rows: int,
        choice_cache: ChoiceCache | None,
        compiled: bool,
        scratch: Callable[[int], tuple[int, int]] | None = None,
        tail: tuple[int, int] | None = None,
        cluster_scratch: Callable[[int], int] | None = None,
        direct_launch: bool = True,
        compile_scope: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
        fp_fusion: bool = True,
        compile_threads: int = 1,
        sizes: Mapping[str, int] | None = None,
    ) -> None:
        self.variants = variants
        self.configs = configs
        self.rows = rows
        self.choice_cache = choice_cache
        self.compiled = compiled
        #: Split variants' scratch sizes (float32 partials, int32 counters) per split.
        self.scratch = scratch
        #: A tail's scratch sizes (float32 partial sums, int32 ticket), see ``tails.py``.
        self.tail = tail
        #: Cluster variants' float32 partials per cluster size (``triton_cluster``).
        self.cluster_scratch = cluster_scratch
        self.direct_launch = direct_launch
        #: Entered around whatever may make Triton compile or load a binary (the first
        #: call, launches through Triton's dispatch): the verified binary cache, see
        #: :func:`~torchstrata.inductor.codegen.triton.verified_cache.verified_triton_cache`.
        self.compile_scope = compile_scope
        #: False: compiled without floating-point contraction (Triton's
        #: ``enable_fp_fusion``), for kernels that round intermediates as eager does
        #: (:func:`~torchstrata.inductor.codegen.triton.printer.rounds_to_half`).
        self.fp_fusion = fp_fusion
        #: Threads compiling the configurations at once before they are timed
        #: (:mod:`~torchstrata.inductor.codegen.triton.precompile`).
        self.compile_threads = compile_threads
        #: The size arguments its sources take beyond ``xnumel``, by name (a reduction's
        #: ``rnumel``, a horizontal kernel's parts' elements).
        self.sizes = dict(sizes or {})
        #: Compiles queued when the kernel was built (:meth:`start_compiles`).
        self.pending: list[concurrent.futures.Future[bool]] | None = None
        self.chosen: Config | None = None
        #: Launches the kernel: the first call's tuning, then the chosen launcher itself
        #: (the generated launcher calls ``kernel.run(...)``: no frame of this class).
        self.run: Callable[..., Any] = self._first_call

    def __call__(self, *args: Any) -> None:
        """Launch the kernel on ``args`` (tensors)."""
        self.run(*args)

    def bind(self, config: Config) -> Callable[..., Any]:
        """A launcher of ``config`` (with ``TRITON_INTERPRET=1`` while it runs, for an
        interpreted kernel)."""
        launcher = self._launcher(config)
        return launcher if self.compiled else interpreted(launcher)

    def constants(self, config: Config) -> dict[str, Any]:
        """The keyword arguments of a launch of ``config``: the rows (one source serves
        every number of rows, ``module_source``), its constexprs and, compiled, its warps,
        stages and floating-point contraction (explicit: Triton's default is changing)."""
        constants: dict[str, Any] = {
            ROWS_PARAM: self.rows,
            **self.sizes,
            "XBLOCK": config.xblock,
            "RBLOCK": config.rblock,
        }
        if self.compiled:
            constants["num_warps"] = config.num_warps
            constants["num_stages"] = config.num_stages
            constants["enable_fp_fusion"] = self.fp_fusion
        return constants

    def compile_jobs(
        self, args: Sequence[Any], configs: Sequence[Config] | None = None
    ) -> list[CompileJob]:
        """``(jit function, arguments, grid, constants)`` of every configuration (of
        ``configs``, by default all) launched through Triton's dispatch (cluster launches
        compile their own way, when timed), the scratch arguments its launch appends
        included. ``args``: the tensors, or their dtypes (then the scratch's too)."""
        jobs: list[CompileJob] = []
        dtypes = all(isinstance(arg, torch.dtype) for arg in args)
        for config in self.configs if configs is None else configs:
            if config.cluster > 1:
                continue
            sizes = None
            if config.split > 1 and self.scratch is not None:
                sizes = self.scratch(config.split)
            elif config.split == 1 and self.tail is not None:
                sizes = self.tail
            extra: tuple[Any, ...] = ()
            if sizes is not None and dtypes:
                extra = (torch.float32,) if sizes[1] is None else (torch.float32, torch.int32)
            elif sizes is not None:
                extra = scratch_tensors(sizes, args[0].device)
            jit_fn = self.variants[config.variant]
            jobs.append(
                (jit_fn, (*args, *extra), tuple(config.grid(self.rows)), self.constants(config))
            )
        return jobs

    def start_compiles(self, dtypes: Sequence[torch.dtype], device: int | None) -> None:
        """Queue the compiles of this kernel's configurations (the tuned one alone when
        the tuning cache has it) for arguments of ``dtypes`` on CUDA device ``device``;
        its first call waits for them (see
        :mod:`~torchstrata.inductor.codegen.triton.precompile`)."""
        if not self.compiled or self.pending is not None:
            return
        configs = self.configs
        if self.choice_cache is not None and len(configs) > 1:
            cached = self.choice_cache.read()
            configs = [cached] if cached in configs else configs
        jobs = self.compile_jobs(tuple(dtypes), configs)
        self.pending = submit_compiles(jobs, self.compile_scope, self.compile_threads, device)

    def _launcher(self, config: Config) -> Callable[..., Any]:
        constants = self.constants(config)
        scope = self.compile_scope
        if config.cluster > 1:  # launched as clusters only, with its partials
            assert self.compiled and self.cluster_scratch is not None
            jit_fn = self.variants[config.variant]
            clustered = ClusterLaunch(jit_fn, self.rows, config.cluster, constants)

            def run_clusters(*args: Any) -> None:  # a binary is taken per alignment
                with scope():
                    clustered(*args)

            return _with_scratch(run_clusters, self.cluster_scratch(config.cluster), None)
        launch = self.variants[config.variant][config.grid(self.rows)]

        def run(*args: Any) -> None:  # Triton's dispatch compiles each new specialization
            with scope():
                launch(*args, **constants)

        if self.compiled and self.direct_launch:
            jit_fn = self.variants[config.variant]
            run = DirectLaunch(jit_fn, config.grid(self.rows), constants, run)
        if config.split > 1:  # scratch partials and counters (see triton_split)
            assert self.scratch is not None, "a split variant needs its scratch sizes"
            return _with_scratch(run, *self.scratch(config.split))
        return run if self.tail is None else _with_scratch(run, *self.tail)

    def _first_call(self, *args: Any) -> None:
        with self.compile_scope():
            self._tune_and_launch(args)

    def _tune_and_launch(self, args: Sequence[Any]) -> None:
        if self.pending is not None:
            concurrent.futures.wait(self.pending)
        config = self.configs[0]
        if self.compiled and self.choice_cache is not None and len(self.configs) > 1:
            cached = self.choice_cache.read()
            config = cached if cached in self.configs else self._benchmark(args)
            if cached != config:
                self.choice_cache.write(config)
        self.chosen = config
        self.run = self.bind(config)
        if isinstance(self.run, DirectLaunch):  # later calls: its hot path as ``run``
            self.run.on_proven = self._take_hot_path
        self.run(*args)

    def _take_hot_path(self, hot: Callable[..., Any]) -> None:
        self.run = hot

    def _benchmark(self, args: Sequence[Any]) -> Config:
        name = getattr(next(iter(self.variants.values())), "__name__", "a kernel")
        if self.compile_threads > 1 and self.pending is None:
            with progress(f"compiling {name}", total=None, delay=0.5):
                compile_configs(self.compile_jobs(args), self.compile_scope, self.compile_threads)
        with progress(f"autotuning {name}", total=len(self.configs), delay=0) as report:
            return self._time_configs(args, report)

    def _time_configs(self, args: Sequence[Any], report: Progress) -> Config:
        best, best_time = self.configs[0], math.inf
        for config in self.configs:
            report.step(f"{config}")
            run = self.bind(config)
            try:
                run(*args)
                elapsed = do_bench(
                    lambda run=run: run(*args), warmup=5, rep=25, return_mode="median"
                )
            except Exception:  # noqa: BLE001 - a config out of resources is skipped
                continue
            if elapsed < best_time:
                best, best_time = config, elapsed
        torch.cuda.synchronize()
        return best
