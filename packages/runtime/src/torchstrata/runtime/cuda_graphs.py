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

A symbolic entry lowers its graph once per size and wraps each size's function on its
own, so each size records its own graph, keyed by the concrete sizes (decision 0225);
every recording logs one line at INFO naming the sizes it is for.
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
