"""What the Dynamo backend hands back for one graph, and the record ``explain`` reads.

Dynamo keeps the callables a backend returns in its own caches, out of reach without
its internals. So each one is a :class:`BackendGraph` that knows what it was compiled
into (or why it runs eagerly) and the guards Dynamo had collected when it was made;
while :func:`recording` is active, every BackendGraph that runs adds itself to the
record. :func:`torchstrata.runtime.explain_dynamo` runs a call inside it.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch.fx
from torch._guards import TracingContext  # the backend's view of Dynamo's trace state

from torchstrata.runtime.artifacts import GraphArtifacts
from torchstrata.runtime.errors import TorchstrataFallbackWarning

logger = logging.getLogger("torchstrata.runtime")

_RECORDING: contextvars.ContextVar[list[BackendGraph] | None] = contextvars.ContextVar(
    "torchstrata_dynamo_recording", default=None
)


class BackendGraph:
    """The callable the backend returns to Dynamo for one FX graph.

    :param gm: Dynamo's graph (what runs when the graph runs eagerly).
    :param artifacts: what the runtime's pipeline made of it; None when it runs eagerly.
    :param eager_reason: why it runs eagerly ("" when compiled).
    :param compiled: Dynamo's arguments in, the graph's outputs out (None: eager).
    :param dynamo_guards: Dynamo's guards when the graph was handed over, as text.
    :param strict: compiled code raising on its first call re-raises (``fullgraph``)
        instead of falling back to ``gm``.
    """

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        artifacts: GraphArtifacts | None,
        eager_reason: str,
        compiled: Callable[..., Any] | None = None,
        dynamo_guards: tuple[str, ...] = (),
        *,
        strict: bool = False,
    ) -> None:
        self.gm = gm
        self.artifacts = artifacts
        self.eager_reason = eager_reason
        self.dynamo_guards = dynamo_guards
        self._strict = strict
        self._run: Callable[..., Any] = compiled if compiled is not None else gm.forward
        #: for a graph with symbolic sizes: says how its sizes were lowered (shared
        #: lowerings, sizes on their own and why), for ``explain()``
        self.size_lowering: Callable[[], str] | None = None
        self._checked = compiled is None

    @property
    def is_compiled(self) -> bool:
        """Whether calls run torchstrata's compiled code (not the FX graph eagerly)."""
        return self.artifacts is not None and not self.eager_reason

    def __call__(self, *args: Any) -> Any:
        record = _RECORDING.get()
        if record is not None and all(seen is not self for seen in record):
            record.append(self)
        if self._checked:
            return self._run(*args)
        return self._first_call(args)

    def _first_call(self, args: tuple[Any, ...]) -> Any:
        """Run fresh compiled code; if it raises, this graph runs eagerly from now on."""
        try:
            result = self._run(*args)
        except Exception as error:
            if self._strict:
                raise
            self.eager_reason = f"compiled code raised {type(error).__name__}: {error}"
            warnings.warn(
                f"torchstrata dynamo backend: {self.eager_reason}; running this graph eagerly",
                TorchstrataFallbackWarning,
                stacklevel=3,
            )
            logger.info("dynamo backend: compiled graph failed", exc_info=error)
            self._run, self._checked = self.gm.forward, True
            return self._run(*args)
        self._checked = True
        return result


def dynamo_guards() -> tuple[str, ...]:
    """The guards Dynamo has collected for the frame being compiled, as Dynamo names
    them (``TENSOR_MATCH: L['x']``; shape guards as ``SHAPE_ENV: Eq(s77, 5)``); empty
    outside a Dynamo compilation or where its state does not look as expected."""
    try:
        context = TracingContext.try_get()
        if context is None:
            return ()
        guards = sorted(context.guards_context.dynamo_guards, key=lambda g: g.sort_key())
        text = [f"{g.create_fn_name()}: {g.name}" if g.name else g.create_fn_name() for g in guards]
        shape_env = getattr(context.fake_mode, "shape_env", None)
        if shape_env is not None:
            text += [f"SHAPE_ENV: {guard.expr}" for guard in shape_env.guards]
    except Exception:  # Dynamo's internals moved: report no guards
        logger.debug("dynamo backend: could not read Dynamo's guards", exc_info=True)
        return ()
    return tuple(text)


@contextlib.contextmanager
def recording() -> Iterator[list[BackendGraph]]:
    """Within the block, every :class:`BackendGraph` that runs is appended (once) to the
    list this yields."""
    record: list[BackendGraph] = []
    token = _RECORDING.set(record)
    try:
        yield record
    finally:
        _RECORDING.reset(token)
