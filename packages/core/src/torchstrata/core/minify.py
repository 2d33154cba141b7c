"""Find where a compiled program goes wrong, and shrink it to the smallest graph that does.

:func:`stage_walk` takes one torch-level graph and its inputs through the installed stages
one at a time (autograd's forward, each ``post_aot`` pass, decomposition, each
``post_decomp`` pass, code generation), runs what each produced (graphs in the reference
interpreter :func:`~torchstrata.core.interpret`, the compiled callable itself) and
compares it with the reference interpreter on the torch-level graph, which computes what
eager PyTorch computes. The first :class:`StageCheck` that disagrees names the stage or
pass at fault. :func:`walk_function` does the same from a Python function (capture first,
compared with calling the function eagerly).

:func:`minify_graph` reduces a failing graph by delta debugging over its nodes: it keeps
one failing output, then tries to replace each node by a graph input holding the value the
interpreter computed for it (cutting off everything above it) and to remove each node whose
result can be replaced by its first operand, until no single change fails any more (the
result is 1-minimal). :func:`minify` combines the two: walk, then shrink the graph with
"the same stage still disagrees" as the failure to keep.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pluggy
import torch

from torchstrata.core.builder import GraphBuilder
from torchstrata.core.contracts import GraphContract
from torchstrata.core.graph import Graph, Node, map_nodes
from torchstrata.core.interpret import interpret
from torchstrata.core.meta import TensorMeta
from torchstrata.core.options import CompileOptions
from torchstrata.core.passes import GraphPass, order_passes
from torchstrata.core.plugins import create_plugin_manager
from torchstrata.core.results import guard_cells
from torchstrata.core.transform import eliminate_dead_code

#: ``compare(actual, expected) -> ''`` when they agree, else what differs.
Compare = Callable[[Sequence[Any], Sequence[Any]], str]


@attrs.frozen
class StageCheck:
    """One stage or pass and whether what it produced still computes eager's values.

    ``stage`` is ``capture``, ``aot``, ``post_aot:<pass>``, ``decomp``,
    ``post_decomp:<pass>`` or ``codegen``; ``problem`` is '' when it agrees, else what
    differs (or the exception it raised); ``graph`` is what it produced (None for code).
    """

    stage: str
    problem: str
    graph: Graph | None = None

    @property
    def ok(self) -> bool:
        """Whether the stage's result matched."""
        return not self.problem


@attrs.frozen
class Minified:
    """The smallest failing graph found, the inputs it fails on and the stage at fault."""

    graph: Graph
    inputs: tuple[torch.Tensor, ...]
    stage: str
    problem: str
    tries: int

    def __str__(self) -> str:
        metas = ", ".join(f"{tuple(t.shape)} {t.dtype}" for t in self.inputs)
        return (
            f"first wrong stage: {self.stage} ({self.problem})\n"
            f"smallest failing graph ({len(self.graph.nodes)} nodes, inputs {metas}):\n"
            f"{self.graph}"
        )


def close(actual: Sequence[Any], expected: Sequence[Any], rtol: float = 1e-3) -> str:
    """The default comparison: same count, shapes and dtypes; integers and bools exactly;
    floats within ``rtol`` (relative, and absolute for values below 1), NaN where NaN."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for position, (got, want) in enumerate(zip(actual, expected, strict=True)):
        if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
            if got != want:
                return f"output {position}: {got!r}, expected {want!r}"
            continue
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"output {position}: {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
        if not want.is_floating_point() and not want.is_complex():
            bad = got != want
        else:
            g, w = got.detach().double(), want.detach().double()
            same = (g == w) | (g.isnan() & w.isnan())
            bad = ~(same | ((g - w).abs() <= rtol * w.abs().clamp(min=1.0)))
        if bad.any():
            at = tuple(int(i) for i in torch.nonzero(bad)[0])
            return (
                f"output {position}: {int(bad.sum())} of {bad.numel()} elements differ, "
                f"first at {at}: {got[at].item()!r}, expected {want[at].item()!r}"
            )
    return ""


def _attempt(
    stage: str,
    run: Callable[[], tuple[Any, Graph | None]],
    inputs: Sequence[torch.Tensor],
    want: Sequence[Any],
    compare: Compare,
) -> tuple[StageCheck, Any]:
    """Run one stage: its check against ``want`` (what the graph it made computes on
    ``inputs``, or the values it returned) and what it produced (None if it raised)."""
    try:
        produced, values_graph = run()
        values = produced if values_graph is None else interpret(values_graph, *inputs)
    except Exception as error:  # noqa: BLE001 - a stage that raises is the answer
        return StageCheck(stage, f"raised {type(error).__name__}: {error}"), None
    problem = compare(list(values)[: len(want)], want)
    return StageCheck(stage, problem, values_graph), produced


def stage_walk(
    graph: Graph,
    inputs: Sequence[torch.Tensor],
    options: CompileOptions | None = None,
    *,
    plugin_manager: pluggy.PluginManager | None = None,
    compare: Compare = close,
    stop_at_first: bool = True,
) -> list[StageCheck]:
    """Take the torch-level ``graph`` through each installed stage and pass, comparing each
    result on ``inputs`` with ``interpret(graph, *inputs)``; the checks in order (up to the
    first that fails when ``stop_at_first``). A missing stage ends the walk."""
    options = options or CompileOptions(codegen="cpp")
    manager = plugin_manager or create_plugin_manager(blocked=options.blocked_plugins)
    want = list(interpret(graph, *inputs))
    checks: list[StageCheck] = []
    _walk(graph, inputs, manager, options, want, compare, checks, stop_at_first)
    return checks


def _walk(
    graph: Graph,
    inputs: Sequence[torch.Tensor],
    manager: pluggy.PluginManager,
    options: CompileOptions,
    want: list[Any],
    compare: Compare,
    checks: list[StageCheck],
    stop_at_first: bool,
) -> None:
    def step(stage: str, run: Callable[[], tuple[Any, Graph | None]]) -> Any:
        check, produced = _attempt(stage, run, inputs, want, compare)
        checks.append(check)
        return None if (produced is None or (stop_at_first and not check.ok)) else produced

    torch_graph = _passes("post_capture", graph, manager, options, step)
    if torch_graph is None:
        return
    aot = step(
        "aot",
        lambda: _graph_result(manager.hook.torchstrata_aot(graph=torch_graph, options=options)),
    )
    if aot is None:
        return
    aten = _passes("post_aot", aot.forward, manager, options, step)
    if aten is None:
        return
    contract = GraphContract(user_outputs=len(want))
    prims = step(
        "decomp",
        lambda: _as_graph(
            manager.hook.torchstrata_decompose(graph=aten, options=options, contract=contract)
        ),
    )
    if prims is None:
        return
    prims = _passes("post_decomp", prims, manager, options, step)
    if prims is None:
        return
    device = next((m.device for m in prims.input_metas), torch.device("cpu"))

    def codegen() -> tuple[Any, None]:
        compiled = manager.hook.torchstrata_codegen(
            graph=prims, device=device, options=options, contract=contract
        )
        if compiled is None:
            raise RuntimeError("no codegen plugin answered")
        return compiled(*inputs), None

    step("codegen", codegen)


def _graph_result(aot: Any) -> tuple[Any, Graph]:
    if aot is None:
        raise RuntimeError("no autograd plugin answered")
    return aot, aot.forward


def _as_graph(graph: Graph | None) -> tuple[Graph, Graph]:
    if graph is None:
        raise RuntimeError("no plugin answered")
    return graph, graph


def _passes(
    stage: str,
    graph: Graph,
    manager: pluggy.PluginManager,
    options: CompileOptions,
    step: Callable[[str, Callable[[], tuple[Any, Graph | None]]], Any],
) -> Graph | None:
    """Apply the ``stage`` passes one at a time, checking after each."""
    groups = manager.hook.torchstrata_graph_passes(stage=stage, options=options)
    passes = [
        p for group in groups if group for p in group if p.name not in options.blocked_plugins
    ]
    for graph_pass in order_passes(passes):

        def run(p: GraphPass = graph_pass, g: Graph = graph) -> tuple[Graph, Graph]:
            return _as_graph(p(g))

        produced = step(f"{stage}:{graph_pass.name}", run)
        if produced is None:
            return None
        graph = produced
    return graph


def walk_function(
    fn: Callable[..., Any],
    args: Sequence[Any],
    options: CompileOptions | None = None,
    *,
    plugin_manager: pluggy.PluginManager | None = None,
    compare: Compare = close,
) -> tuple[list[StageCheck], Graph | None, list[torch.Tensor]]:
    """Capture ``fn(*args)``, compare the captured graph with eager ``fn(*args)``, then
    :func:`stage_walk` it. Returns the checks, the captured graph and its inputs (None and
    [] when capture found no single graph whose inputs it can name)."""
    options = options or CompileOptions(codegen="cpp")
    manager = plugin_manager or create_plugin_manager(blocked=options.blocked_plugins)
    eager = fn(*args)
    eager = list(eager) if isinstance(eager, tuple | list) else [eager]
    try:
        capture = manager.hook.torchstrata_capture(
            fn=fn, args=tuple(args), kwargs={}, options=options, compile_segment=None
        )
    except Exception as error:  # noqa: BLE001 - reported as the capture stage's failure
        return [StageCheck("capture", f"raised {type(error).__name__}: {error}")], None, []
    if capture is None or len(capture.graphs) != 1 or capture.direct_sources is None:
        why = "no graph" if capture is None or not capture.graphs else "a graph break"
        return [StageCheck("capture", f"capture gave {why}; nothing to walk")], None, []
    (graph,) = capture.graphs
    local = inspect.signature(fn).bind(*args).arguments
    namespace = {"L": local, "G": fn.__globals__, **guard_cells(capture.guards)}
    inputs = [eval(source, namespace) for source in capture.direct_sources]
    problem = compare(list(interpret(graph, *inputs)), eager)
    checks = [StageCheck("capture", problem, graph)]
    if problem:
        return checks, graph, inputs
    return (
        checks + stage_walk(graph, inputs, options, plugin_manager=manager, compare=compare),
        graph,
        inputs,
    )


def first_failure(checks: Sequence[StageCheck]) -> StageCheck | None:
    """The first check that failed (None when every stage agreed)."""
    return next((check for check in checks if not check.ok), None)


# ------------------------------------------------------------------ shrinking


def minify_graph(
    graph: Graph,
    inputs: Sequence[torch.Tensor],
    fails: Callable[[Graph, list[torch.Tensor]], bool],
    max_tries: int = 500,
) -> tuple[Graph, list[torch.Tensor], int]:
    """The smallest graph (and its inputs) that ``fails`` found, 1-minimal over nodes, and
    the number of candidates tried. ``fails(graph, inputs)`` must hold for the start."""
    inputs = list(inputs)
    tries = 0

    def keep(candidate: tuple[Graph, list[torch.Tensor]] | None) -> bool:
        nonlocal tries, graph, inputs
        if candidate is None or tries >= max_tries:
            return False
        tries += 1
        try:
            failing = fails(*candidate)
        except Exception:  # noqa: BLE001 - a candidate the oracle cannot run is not kept
            failing = False
        if failing:
            graph, inputs = candidate
        return failing

    for output in range(len(graph.outputs)):
        if len(graph.outputs) > 1 and keep(_rebuilt(graph, inputs, outputs=[output])):
            break
    changed = True
    while changed and tries < max_tries:
        changed = False
        for node in list(graph.nodes):
            if node not in graph.nodes:
                continue
            if keep(_rebuilt(graph, inputs, cut=node)) or keep(
                _rebuilt(graph, inputs, bypass=node)
            ):
                changed = True
    return graph, inputs, tries


def _rebuilt(
    graph: Graph,
    inputs: list[torch.Tensor],
    *,
    outputs: list[int] | None = None,
    cut: Node | None = None,
    bypass: Node | None = None,
) -> tuple[Graph, list[torch.Tensor]] | None:
    """``graph`` with only ``outputs`` kept, ``cut`` made an input (its interpreted value)
    or ``bypass`` replaced by its first tensor operand of the same metadata; dead nodes
    and unused inputs dropped. None when the change does not apply."""
    if cut is not None and not isinstance(cut.meta, TensorMeta):
        return None
    replacement = None
    if bypass is not None:
        replacement = next((a for a in bypass.input_nodes() if a.meta == bypass.meta), None)
        if replacement is None:
            return None
    cut_value = None
    if cut is not None:
        probe = Graph(graph.level, graph.inputs, graph.nodes, (cut,))
        (value,) = interpret(probe, *inputs)
        meta = attrs.evolve(cut.tensor_meta, requires_grad=False)
        cut_value = torch.empty_strided(meta.shape, meta.strides, dtype=meta.dtype).copy_(value)
    builder = GraphBuilder(graph.level)
    env: dict[Node, Node] = {}
    values: dict[Node, torch.Tensor] = {}
    for node, tensor in zip(graph.inputs, inputs, strict=True):
        env[node] = builder.input(node.name, node.tensor_meta)
        values[env[node]] = tensor
    if cut is not None and cut_value is not None:
        env[cut] = builder.input(cut.name, TensorMeta.from_tensor(cut_value))
        values[env[cut]] = cut_value
    for node in graph.nodes:
        if node is cut:
            continue
        if node is bypass and replacement is not None:
            env[node] = env[replacement]
            continue
        assert node.op is not None
        args = map_nodes(node.args, env.__getitem__)
        kwargs = map_nodes(dict(node.kwargs), env.__getitem__)
        env[node] = builder.call(node.op, *args, meta=node.meta, name=node.name, **kwargs)
    chosen = [graph.outputs[i] for i in outputs] if outputs is not None else list(graph.outputs)
    new_outputs = list(dict.fromkeys(env[node] for node in chosen))
    built = eliminate_dead_code(builder.build(new_outputs))
    used = {arg for node in built.nodes for arg in node.input_nodes()} | set(built.outputs)
    kept = tuple(node for node in built.inputs if node in used)
    if not built.nodes and cut is None and bypass is None and outputs is None:
        return None
    return Graph(built.level, kept, built.nodes, built.outputs), [values[node] for node in kept]


def minify(
    graph: Graph,
    inputs: Sequence[torch.Tensor],
    options: CompileOptions | None = None,
    *,
    plugin_manager: pluggy.PluginManager | None = None,
    compare: Compare = close,
    max_tries: int = 200,
) -> Minified | None:
    """Walk ``graph`` through the stages; when one disagrees, shrink ``graph`` to the
    smallest graph on which the same stage still disagrees. None when every stage agrees."""
    options = options or CompileOptions(codegen="cpp")
    manager = plugin_manager or create_plugin_manager(blocked=options.blocked_plugins)
    failure = first_failure(
        stage_walk(graph, inputs, options, plugin_manager=manager, compare=compare)
    )
    if failure is None:
        return None

    def fails(candidate: Graph, candidate_inputs: list[torch.Tensor]) -> bool:
        checks = stage_walk(
            candidate, candidate_inputs, options, plugin_manager=manager, compare=compare
        )
        found = first_failure(checks)
        return found is not None and found.stage == failure.stage

    small, small_inputs, tries = minify_graph(graph, inputs, fails, max_tries)
    final = first_failure(
        stage_walk(small, small_inputs, options, plugin_manager=manager, compare=compare)
    )
    problem = final.problem if final is not None else failure.problem
    return Minified(small, tuple(small_inputs), failure.stage, problem, tries)
