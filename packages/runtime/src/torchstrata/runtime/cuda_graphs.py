"""CUDA graphs for inference graphs: ``compile(..., mode="reduce-overhead")``.

A decode step launches dozens of small kernels and ATen calls, and its time is the host's
(``bench/results/2026-12-01-h200-s14-m5-in-place.txt``). Recorded once as a CUDA
graph, the whole launcher is one replay.

:class:`CudaGraphed` wraps a compiled graph's function. The first :data:`WARMUP_CALLS`
calls run it as it is (the first one autotunes and compiles). The next call records it:

* an input at the same address in every call so far (a parameter, a buffer, a
  static KV cache) is *stable*: the graph reads it where it is, and each replay first
  checks that it is still there;
* any other input gets a buffer of its own, allocated once; each replay copies the
  call's tensor into it;
* outputs are copied out of the graph's memory on every replay, so a result stays valid
  after the next call; an output that is a stable input (an update done in place) is
  returned as the caller's tensor.

A call whose stable inputs moved drops the graph and warms up again (at most
:data:`MAX_RECORDINGS` graphs; then the function runs as it is, with a warning). No graph
is recorded (the function runs as it is, with a warning) when an input is not a CUDA
tensor (a number would be baked into the graph), when the graph draws random numbers (a
replay would draw the same ones again), or when recording fails.

A symbolic entry's graph lowered once for many sizes (decision 0381) runs as a
:class:`SizeGraphs`: one :class:`CudaGraphed` per distinct input sizes over the shared
lowering (decision 0456), at most :data:`MAX_SIZE_GRAPHS`, each with the static input
buffers of its sizes; a size lowered on its own wraps its function as before (decision
0225). A new size logs one line at INFO saying that it records a graph of its own, and
every recording one naming the sizes it is for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchstrata.core import Graph, PrimFamily, get_prim, is_int_size_carrier
from torchstrata.runtime.fallback import warn_once

logger = logging.getLogger("torchstrata.runtime")

#: Calls run as they are before the graph is recorded.
WARMUP_CALLS = 2
#: Recordings a function may take: stable inputs that moved start the warm-up over, until
#: this many graphs were recorded; then it runs without one.
MAX_RECORDINGS = 3
#: Distinct sizes that record a CUDA graph over one lowering shared by many sizes; later
#: new sizes run the lowering without a graph (a warning, once).
MAX_SIZE_GRAPHS = 32
#: Modes that record CUDA graphs.
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def draws_random_numbers(graph: Graph | None) -> bool:
    """Whether ``graph`` (prims level, extern ATen nodes allowed) draws random numbers;
    unknown (None) counts as yes."""
    if graph is None:
        return True
    for node in graph.nodes:
        if node.op is None:
            continue
        name = node.op.name
        if name.startswith("prims."):
            if get_prim(name).family is PrimFamily.RANDOM:
                return True
            continue
        try:
            overload = node.op.resolve()
        except Exception:  # noqa: BLE001 - not an ATen op (getitem): draws nothing
            continue
        if torch.Tag.nondeterministic_seeded not in getattr(overload, "tags", ()):
            continue
        if _dropout(overload, node.args, node.kwargs) != 0.0:
            return True
    return False


def _dropout(overload: Any, args: Sequence[Any], kwargs: Any) -> Any:
    """The ``dropout_p`` an op is called with (attention: seeded, but drawing nothing at
    0.0); None when it takes none."""
    schema = overload._schema
    for position, argument in enumerate(schema.arguments):
        if argument.name == "dropout_p":
            if argument.name in kwargs:
                return kwargs[argument.name]
            if position < len(args):
                return args[position]
            return argument.default_value
    return None


class CudaGraphed:
    """``fn`` recorded as a CUDA graph after :data:`WARMUP_CALLS` calls (module
    docstring); ``name`` appears in warnings."""

    def __init__(self, fn: Callable[..., Sequence[Any]], name: str = "graph") -> None:
        self.fn = fn
        self.name = name
        self.calls = 0
        self.seen: list[tuple[int, ...]] = []
        self.graph: torch.cuda.CUDAGraph | None = None
        self.recordings = 0
        self.given_up = False
        self.stable: tuple[tuple[int, int], ...] = ()  # (input index, address)
        self.copied: tuple[tuple[int, torch.Tensor], ...] = ()  # (input index, buffer)
        self.outputs: tuple[Any, ...] = ()
        self.output_inputs: dict[int, int] = {}  # output index -> stable input index

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        """Run (or replay) on ``inputs``."""
        if self.graph is not None:
            return self._replay(inputs)
        if self.given_up:
            return tuple(self.fn(*inputs))
        addresses = _addresses(inputs)
        if addresses is None:
            return self._give_up(inputs, "an input is not a CUDA tensor")
        self.calls += 1
        if self.calls <= WARMUP_CALLS:
            self.seen.append(addresses)
            return tuple(self.fn(*inputs))
        try:
            self._record(inputs, addresses)
        except Exception as error:  # noqa: BLE001 - any failure: run without a graph
            self.graph = None
            return self._give_up(inputs, f"recording failed ({type(error).__name__}: {error})")
        return self._replay(inputs)

    def _moved(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        """A stable input moved (a parameter replaced, a module moved): drop the graph and
        warm up again, or give up after :data:`MAX_RECORDINGS` graphs."""
        self.graph, self.outputs, self.copied, self.stable = None, (), (), ()
        self.calls, self.seen = 0, []
        if self.recordings >= MAX_RECORDINGS:
            return self._give_up(inputs, f"its inputs moved after {self.recordings} recordings")
        return self(*inputs)

    def _give_up(self, inputs: Sequence[Any], why: str) -> tuple[Any, ...]:
        self.given_up = True
        warn_once(
            ("cuda-graph", id(self)),
            f"torchstrata: mode='reduce-overhead' runs {self.name} without a CUDA graph: {why}",
        )
        return tuple(self.fn(*inputs))

    def _record(self, inputs: Sequence[Any], addresses: tuple[int, ...]) -> None:
        stable: list[tuple[int, int]] = []
        copied: list[tuple[int, torch.Tensor]] = []
        args = list(inputs)
        for index, tensor in enumerate(inputs):
            if all(seen[index] == addresses[index] for seen in self.seen):
                stable.append((index, addresses[index]))
                continue
            if addresses[index] < 0:  # a size carrier is one length per recorded graph
                raise ValueError(f"input {index}, an int argument, changed between calls")
            buffer = torch.empty_strided(
                tensor.shape, tensor.stride(), dtype=tensor.dtype, device=tensor.device
            )
            buffer.copy_(tensor)
            copied.append((index, buffer))
            args[index] = buffer
        logger.info(
            "mode='reduce-overhead': recording a CUDA graph of %s for input sizes %s "
            "(a new size records a graph of its own)",
            self.name,
            ", ".join(str(list(t.shape)) for t in inputs),
        )
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = tuple(self.fn(*args))
        by_identity = {id(args[index]): index for index, _ in stable}
        self.output_inputs = {
            position: by_identity[id(value)]
            for position, value in enumerate(outputs)
            if isinstance(value, torch.Tensor) and id(value) in by_identity
        }
        self.stable = tuple(stable)
        self.copied = tuple(copied)
        self.outputs = outputs
        self.graph = graph
        self.recordings += 1

    def _replay(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        for index, address in self.stable:
            if _address(inputs[index]) != address:
                return self._moved(inputs)
        for index, buffer in self.copied:
            buffer.copy_(inputs[index])
        assert self.graph is not None
        self.graph.replay()
        mapped = self.output_inputs
        return tuple(
            inputs[mapped[position]]
            if position in mapped
            else value.clone()
            if isinstance(value, torch.Tensor)
            else value
            for position, value in enumerate(self.outputs)
        )


def _addresses(inputs: Sequence[Any]) -> tuple[int, ...] | None:
    """Each input's address, or None when one is not a CUDA tensor (a number would be
    baked into the graph as it was when recorded)."""
    found: list[int] = []
    for value in inputs:
        address = _address(value)
        if address is None:
            return None
        found.append(address)
    return tuple(found)


def _address(value: Any) -> int | None:
    """A CUDA tensor's address; for the size carrier of an ``int`` argument (a CPU tensor
    no kernel reads, decision 0330) a stand-in unique to its length, so that a graph
    recorded at one length is never replayed at another; None for anything else."""
    if isinstance(value, torch.Tensor):
        if value.is_cuda:
            return value.data_ptr()
        if is_int_size_carrier(value):
            return -1 - value.shape[0]
    return None


class SizeGraphs:
    """``fn``, a lowering that serves many sizes, run with a CUDA graph per distinct
    input sizes (decision 0456): each size's calls go to a :class:`CudaGraphed` of its
    own (its warm-up calls, its recording, its static input buffers), made by ``record``
    on the size's first call, for at most ``max_graphs`` sizes; later new sizes run
    ``fn`` without a graph (a warning, once).

    :param fn: the shared lowering's function (the inputs of any size it serves).
    :param name: what warnings and log lines call it.
    :param record: makes a size's graphed function from ``fn`` and a name (tests pass a
        recorder that needs no GPU).
    """

    def __init__(
        self,
        fn: Callable[..., Sequence[Any]],
        name: str = "a graph lowered for many sizes",
        max_graphs: int = MAX_SIZE_GRAPHS,
        record: Callable[[Callable[..., Sequence[Any]], str], Callable[..., Any]] = CudaGraphed,
    ) -> None:
        self.fn = fn
        self.name = name
        self.max_graphs = max_graphs
        self.record = record
        #: input sizes (each input's shape, None for a non-tensor) -> that size's graph
        self.graphs: dict[tuple[Any, ...], Callable[..., Any]] = {}

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        """Run ``inputs`` through the graph of their sizes (made on their first call)."""
        key = tuple([getattr(value, "shape", None) for value in inputs])
        graphed = self.graphs.get(key)
        if graphed is None:
            graphed = self._new_size(key)
        return tuple(graphed(*inputs))

    def _new_size(self, key: tuple[Any, ...]) -> Callable[..., Any]:
        sizes = ", ".join(str(list(shape)) for shape in key if shape is not None)
        if len(self.graphs) >= self.max_graphs:
            warn_once(
                ("cuda-graph-sizes", id(self)),
                f"torchstrata: mode='reduce-overhead' recorded CUDA graphs of {self.name} "
                f"for {self.max_graphs} sizes: new sizes (from {sizes}) run without one",
            )
            return self.fn
        logger.info(
            "mode='reduce-overhead': input sizes %s record a CUDA graph of their own over "
            "%s (size %d of at most %d with a graph; the lowering is shared)",
            sizes,
            self.name,
            len(self.graphs) + 1,
            self.max_graphs,
        )
        graphed = self.graphs[key] = self.record(self.fn, f"{self.name} at sizes {sizes}")
        return graphed


def records_cuda_graphs(prims_graph: Graph, device: torch.device, mode: str | None) -> bool:
    """Whether a compiled forward (its prims graph ``prims_graph``) for inputs on
    ``device`` is recorded as CUDA graphs under ``mode``: a mode that records them, CUDA
    inputs (elsewhere the mode changes nothing, as in torch), and no random numbers drawn
    (a warning, once per graph, says why not)."""
    if mode not in CUDA_GRAPH_MODES or device.type != "cuda":
        return False
    if draws_random_numbers(prims_graph):
        warn_once(
            ("cuda-graph-random", id(prims_graph)),
            f"torchstrata: mode={mode!r} runs a graph that draws random numbers "
            "without a CUDA graph (a replay would draw the same numbers again)",
        )
        return False
    return True


def graphed_per_size(
    fn: Callable[..., Sequence[Any]], prims_graph: Graph, device: torch.device, mode: str | None
) -> Callable[..., Sequence[Any]]:
    """``fn`` (a forward lowered once for many sizes, its prims graph ``prims_graph``) as a
    :class:`SizeGraphs` where :func:`records_cuda_graphs`; else ``fn`` itself."""
    return SizeGraphs(fn) if records_cuda_graphs(prims_graph, device, mode) else fn
