"""Pipeline hook specifications (pluggy project ``torchstrata``).

Every stage is a plugin that implements one of these hooks; the runtime calls them in
pipeline order. A third-party plugin can implement the same hooks (``tryfirst=True``
to take precedence over a built-in stage) or contribute graph passes.

Stages that have hooks of their own add them through :func:`torchstrata_addhooks`
from their own ``hookspecs.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy
import torch

if TYPE_CHECKING:  # hookspecs document types only; nothing here runs at import
    from torchstrata.core.contracts import GraphContract, SegmentCompiler
    from torchstrata.core.graph import Graph
    from torchstrata.core.options import CompileOptions
    from torchstrata.core.passes import GraphPass
    from torchstrata.core.results import AotResult, CaptureResult, CompiledGraph
    from torchstrata.core.symbolic_aot import SymbolicAot

PROJECT = "torchstrata"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: The stages at which graph passes run, in pipeline order.
PASS_STAGES = ("post_capture", "post_aot", "post_decomp")


# ------------------------------------------------------------------------- setup


@hookspec(historic=True)
def torchstrata_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Add hookspecs of a stage's own (``pluginmanager.add_hookspecs(module)``).

    Historic: a plugin registered later still receives the call.
    """


# ----------------------------------------------------------------------- capture


@hookspec(firstresult=True)
def torchstrata_capture(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: CompileOptions,
    compile_segment: SegmentCompiler | None,
) -> CaptureResult | None:
    """Capture ``fn`` as called with ``args``/``kwargs`` into torch-level graphs.

    :param fn: the user's function (a bound ``forward`` for modules).
    :param args: positional arguments of this call (real tensors).
    :param kwargs: keyword arguments of this call.
    :param options: the compile options.
    :param compile_segment: compiles a graph the program captures later, after a graph
        break, on its first run (None: such graphs run in the reference interpreter).
    :return: graphs, guards, graph breaks and the program that runs them; None to let
        another plugin try. firstresult.
    """


# ---------------------------------------------------------------------- autograd


@hookspec(firstresult=True)
def torchstrata_aot(graph: Graph, options: CompileOptions) -> AotResult | None:
    """Turn a torch-level graph into functional ATen forward (and backward) graphs.

    :param graph: a torch-level graph; input metadata says which inputs require grad.
    :param options: the compile options.
    :return: the ATen graphs; None to let another plugin try. firstresult.
    """


@hookspec(firstresult=True)
def torchstrata_aot_symbolic(
    graph: Graph, options: CompileOptions, hints: Mapping[str, int] | None
) -> SymbolicAot | None:
    """Trace a torch-level graph with symbolic sizes once for every size (decision 0220).

    :param graph: a torch-level graph whose sizes may be ``SymInt``s, each symbol the
        size of an input dimension.
    :param options: the compile options.
    :param hints: symbol name -> the size a decision of the trace is taken for (a size
        that an earlier symbolic trace did not serve); None: the sizes the capture saw.
    :return: the symbolic trace, whose ``at(sizes)`` computes what
        :func:`torchstrata_aot` computes for the graph made static at those sizes (its
        partition may have been chosen once, for the hints: what is saved for the
        backward can differ, never a value; its ``result`` then holds the symbolic
        partition, decision 0280); None when the plugin cannot trace it symbolically
        (the runtime then calls ``torchstrata_aot`` per size). firstresult.
    """


# ------------------------------------------------------------------------ decomp


@hookspec(firstresult=True)
def torchstrata_decompose(
    graph: Graph, options: CompileOptions, contract: GraphContract
) -> Graph | None:
    """Lower an ATen graph to prims, keeping ATen nodes it chooses not to lower (extern).

    :param graph: an ATen-level graph. Its sizes may be ``SymInt``s (a symbolic trace's
        partitioned graph, decomposed once for every size, decision 0280; called under
        ``symbolic_scope`` of a ``ShapeEnv`` of its own): the prims graph keeps them
        symbolic where it can; a decision on a size made by comparing ``SymInt``s is a
        condition the runtime checks for each size (a size that violates it is
        decomposed on its own, static), and raising sends every size to its own
        decomposition. A decision taken on a size without a ``SymInt`` comparison (its
        hint, ``maybe_as_int``) would be assumed for every size: never do that.
    :param options: the compile options.
    :param contract: what the caller promises about the graph: the outputs the user gets
        (laid out as eager lays them out) and the layouts its inputs come in (the prims
        graph's inputs must have them: :meth:`GraphContract.laid_out`).
    :return: a prims-level graph; None to let another plugin try. firstresult.
    """


# ----------------------------------------------------------------------- codegen


@hookspec(firstresult=True)
def torchstrata_codegen(
    graph: Graph, device: torch.device, options: CompileOptions, contract: GraphContract
) -> CompiledGraph | None:
    """Generate code for a prims-level graph on ``device``.

    :param graph: a prims-level graph (may hold extern ATen nodes).
    :param device: where the inputs live.
    :param options: the compile options (``options.codegen`` picks the backend).
    :param contract: what the caller promises about the graph; its ``write_backs`` name
        the outputs the caller copies into inputs (updates that may run in place).
    :return: the compiled callable with its kernels, and the layouts it returns its
        outputs in (``output_layouts``); None to let another plugin try (for example a
        backend that does not handle this device). firstresult.
    """


@hookspec(firstresult=True)
def torchstrata_direct_launch(
    kernel: Any,
    grid: tuple[int, ...],
    constants: dict[str, Any],
    fallback: Callable[..., None],
    options: CompileOptions,
) -> Callable[..., None] | None:
    """Launch a Triton kernel without Triton's per-call dispatch (the runtime scales unit
    gradients with a kernel of its own this way).

    :param kernel: a ``triton.jit`` function.
    :param grid: the launch grid.
    :param constants: its constexpr arguments by name, and ``num_warps``.
    :param fallback: launches the kernel through Triton, on the same arguments.
    :param options: the compile's options (where its compiled files are cached).
    :return: a launch taking the kernel's tensor arguments (falling back to ``fallback``
        where it cannot launch directly); None: no direct launch here. firstresult.
    """


@hookspec(firstresult=True)
def torchstrata_codegen_load(
    package: Mapping[str, Any], device: torch.device, options: CompileOptions
) -> CompiledGraph | None:
    """Rebuild a compiled graph from its ``package`` (what an earlier
    ``torchstrata_codegen`` put in :attr:`CompiledGraph.package`, read back from the
    on-disk compiled-graph cache) without scheduling it again.

    :param package: the plain data (JSON types) of the compiled graph.
    :param device: where the inputs live.
    :param options: the compile options.
    :return: the compiled graph; None when this plugin did not make ``package`` (or
        cannot load it here), to let another plugin try; the runtime then generates
        the code afresh. firstresult.
    """


# ------------------------------------------------------------------------- cache


@hookspec
def torchstrata_cache_key(options: CompileOptions) -> str | None:
    """What, beyond installed versions and the options, decides this plugin's output.

    The runtime's compiled-graph cache adds every plugin's answer to the key of each
    entry, so a change of, say, the C++ compiler or the host CPU makes a new entry.
    Called once per process and options.

    :param options: the compile options.
    :return: a string (no absolute paths that differ between equal setups), or None.
        Not firstresult: every plugin's answer is part of the key.
    """


# ------------------------------------------------------------------------ passes


@hookspec
def torchstrata_graph_passes(stage: str, options: CompileOptions) -> Sequence[GraphPass] | None:
    """Contribute graph passes for ``stage`` (one of :data:`PASS_STAGES`).

    :param stage: ``post_capture`` (torch level), ``post_aot`` (ATen) or
        ``post_decomp`` (prims).
    :param options: the compile options.
    :return: passes to run at that stage (ordered by their ``before``/``after``
        declarations, then by plugin order), or None. Not firstresult: every plugin's
        passes are collected.
    """
