"""The callables ``compile()`` returns: guarded dispatch to cached compiled frames."""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable
from typing import Any

import torch

from torchstrata.core import (
    CaptureResult,
    CompileOptions,
    Guard,
    artifact_logger,
    global_state,
    global_state_guard,
    unsupported_state,
)
from torchstrata.runtime.artifacts import FrameArtifacts
from torchstrata.runtime.cache import CacheEntry, FrameCache
from torchstrata.runtime.dynamic_shapes import DynamicPolicy, compile_symbolic
from torchstrata.runtime.errors import CompilationError, StageFailure, TorchstrataFallbackWarning
from torchstrata.runtime.fallback import warn_once
from torchstrata.runtime.frames import FrameBinder, frame_globals
from torchstrata.runtime.guards import GuardFailure, GuardSet
from torchstrata.runtime.native_guards import tensor_checks
from torchstrata.runtime.pipeline import Pipeline

logger = logging.getLogger("torchstrata.runtime")
recompiles_log = artifact_logger(__name__, "recompiles")
cache_log = artifact_logger(__name__, "cache")
perf_hints_log = artifact_logger(__name__, "perf_hints")

_ALWAYS = GuardSet(())


def describe(fn: Callable[..., Any]) -> str:
    """``qualname (file:line)`` of a function, for messages."""
    plain = getattr(fn, "__func__", fn)
    name = getattr(plain, "__qualname__", type(plain).__name__)
    code = getattr(plain, "__code__", None)
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code else name


class CompiledFunction:
    """``fn`` compiled on first call per guard set; calls it with the same results.

    :param fn: the user's function (or a bound ``forward``).
    :param options: resolved compile options.
    :param pipeline: drives the stages (found through the plugin manager).
    """

    def __init__(self, fn: Callable[..., Any], options: CompileOptions, pipeline: Pipeline) -> None:
        self.fn = fn
        self.options = options
        self.pipeline = pipeline
        self.cache = FrameCache()
        self._globals = frame_globals(fn)
        self._bind = FrameBinder(fn)
        #: The plain function and the code its cache entries were compiled from: its
        #: ``__code__`` reassigned (a hot reload) drops them (see :meth:`_code_replaced`).
        self._plain: Any = getattr(fn, "__func__", fn)
        self._code = getattr(self._plain, "__code__", None)
        #: Why each recompile happened: the first guard that failed, in order.
        self.recompile_reasons: list[str] = []

        #: which dimensions each compile makes symbolic (decision 0200)
        self.dynamic = DynamicPolicy(options.dynamic, options.dynamic_sources)
        self._by_policy = False
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._code is not None and self._plain.__code__ is not self._code:
            self._code_replaced()
        if not kwargs and len(args) == self._bind.arity:
            # The common call: guards read the arguments tuple, no frame dict is built.
            entry, inputs = self.cache.find_args(args, self._globals, self._bind_positional)
            if inputs is not None and entry.checked:  # type: ignore[union-attr]
                # The guards read the first graph's inputs: the program need not again.
                return entry.run_inputs(inputs)  # type: ignore[union-attr,misc]
        else:
            try:
                entry = self.cache.find(self._bind(args, kwargs), self._globals)
            except TypeError:
                return self.fn(*args, **kwargs)  # let the function report its own bad call
        if entry is None:
            entry = self._miss(args, kwargs, self._bind(args, kwargs))
        run = entry.run
        if run is None:
            return self.fn(*args, **kwargs)
        if entry.checked:
            return run(args, kwargs)
        return self._first_run(entry, args, kwargs)

    def _code_replaced(self) -> None:
        """The function runs other code than its entries were compiled from (guards read
        its arguments and globals, not the function): drop them, and bind calls by the
        new code's signature."""
        with self.cache.lock:
            if self._plain.__code__ is self._code:
                return
            reason = f"{describe(self.fn)}: __code__ was replaced"
            if len(self.cache):
                self.recompile_reasons.append(reason)
            logger.info("recompiling %s", reason)
            recompiles_log.debug("recompiling %s", reason)
            self.cache.clear()
            self._bind = FrameBinder(self.fn)
            self._code = self._plain.__code__

    def _bind_positional(self, args: tuple[Any, ...]) -> dict[str, Any]:
        return self._bind(args, {})

    def guard_failures(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
        """For a call with these arguments, the guard that fails in each cached entry tried
        before one that holds (all of them on a miss)."""
        try:
            frame = self._bind(args, kwargs)
        except TypeError:
            return []
        return [str(failure) for failure in self.cache.lookup(frame, self._globals)[1]]

    # ------------------------------------------------------------------ misses

    def _miss(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], frame: dict[str, Any]
    ) -> CacheEntry:
        with self.cache.lock:
            entry, failures = self.cache.lookup(frame, self._globals)
            if entry is not None:
                return entry
            if self.cache.recompiles >= self.options.recompile_limit:
                return self._limit_reached(failures)
            if failures:
                reason = str(failures[0])
                sized = [f for f in failures[1:] if f.detail]
                if sized:  # the static entry failed first; say why the symbolic one did
                    reason += f"; symbolic entry: {sized[-1].detail}"
                self.recompile_reasons.append(reason)
                logger.info("recompiling %s: guard failed: %s", describe(self.fn), reason)
                recompiles_log.debug(
                    "recompiling %s (entry %d): guard failed: %s",
                    describe(self.fn),
                    len(self.cache) + 1,
                    str(failures[0])
                    + "".join(f"; entry {i}: {f}" for i, f in enumerate(failures[1:], 1)),
                )
            cache_log.debug(
                "%s: no cached entry of %d holds for this call; compiling",
                describe(self.fn),
                len(self.cache),
            )
            self._by_policy = False
            entry = self._compile(args, kwargs)
            # recompile_limit counts the compiles guard failures force, not the entries the
            # dynamic-shape policy makes: a dimension turning symbolic, a size 0 or 1 of a
            # dimension, each once per dimension (at most 3 per dimension; decision 0208)
            if self._by_policy:
                self.cache.policy_entries += 1
            else:
                self.cache.recompiles += 1
            self.cache.add(entry)
            return entry

    def _limit_reached(self, failures: list[GuardFailure]) -> CacheEntry:
        failed = f"; last guard failed: {failures[-1]}" if failures else ""
        if not self.cache.limit_warned:
            self.cache.limit_warned = True
            warnings.warn(
                f"torchstrata: {describe(self.fn)}: recompile limit reached "
                f"({self.options.recompile_limit}); running eagerly{failed}",
                TorchstrataFallbackWarning,
                stacklevel=4,
            )
        logger.info("recompile limit reached for %s%s", describe(self.fn), failed)
        perf_hints_log.debug(
            "%s runs eagerly from now on: recompile limit (%d) reached%s",
            describe(self.fn),
            self.options.recompile_limit,
            failed,
        )
        return CacheEntry(_ALWAYS, None, "recompile limit reached")

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CacheEntry:
        logger.debug("compiling %s", describe(self.fn))
        # Every entry holds under the global state it was made in (grad mode, autocast,
        # default dtype...: see torchstrata.core.guard_state), checked first.
        state = global_state()
        state_guard = global_state_guard(state)
        refused = unsupported_state(state)
        if refused is not None:
            return self._state_refused(refused, state_guard)
        try:
            artifacts = self._compile_once(args, kwargs)
            capture = artifacts.capture
            # the ints it read beyond the arguments (decision 0365); one the policy makes
            # symbolic at once (dynamic=True) is known only now: compiled again (0387)
            if capture is not None and self._note(capture.guards, args, kwargs):
                recompiles_log.debug("%s: compiled again with its ints symbolic", describe(self.fn))
                artifacts = self._compile_once(args, kwargs)
                capture = artifacts.capture
                if capture is not None:
                    self._note(capture.guards, args, kwargs)
        except StageFailure as failure:
            return self._stage_failed(failure, state_guard)
        if capture is None:
            if self.options.fullgraph:
                raise CompilationError(
                    "fullgraph=True but torchstrata-capture is not installed", stage="capture"
                )
            warn_once(
                ("missing-stage", "capture"),
                f"torchstrata-capture is not installed; running {describe(self.fn)} eagerly",
                stacklevel=5,
            )
            return CacheEntry(_ALWAYS, None, artifacts.eager_reason)
        self._check_graph_breaks(capture, artifacts)
        guarded = (state_guard, *capture.guards)
        if artifacts.run is None:
            return CacheEntry(GuardSet(guarded, self._bind), None, artifacts.eager_reason)
        run_inputs = artifacts.run_inputs
        guards = GuardSet(
            guarded,
            self._bind,
            fetch_sources=capture.direct_sources if run_inputs is not None else None,
            routes=artifacts.routes,
            tensor_checks=tensor_checks(self.options.native_guards, self.options.cache_dir),
        )
        if guards.routed:
            assert artifacts.routes is not None
            run_inputs = artifacts.routes.run
        return CacheEntry(
            guards,
            artifacts.run,
            has_side_effects=bool(capture.graph_breaks),
            run_inputs=run_inputs if guards.fetch_args is not None else None,
        )

    def _note(self, guards: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """:meth:`DynamicPolicy.note` with this call's frame and globals."""
        try:
            frame = self._bind(args, kwargs)
        except TypeError:
            frame = {}
        return self.dynamic.note(guards, frame, self._globals)

    def _compile_once(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The frame's artifacts: symbolic where the policy plans it, else static."""
        artifacts = self._compile_symbolic(args, kwargs)
        if artifacts is None:
            artifacts = self.pipeline.compile_frame(self.fn, args, kwargs, self.options)
        return artifacts

    def _compile_symbolic(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The frame compiled with symbolic sizes where the policy makes dimensions
        dynamic (:mod:`.dynamic_shapes`); None: compile it static."""
        try:
            plan = self.dynamic.plan(self._bind(args, kwargs), self._globals)
        except TypeError:
            return None
        reason = self.dynamic.reason()
        self._by_policy = self.dynamic.first_time
        if reason:
            if self.recompile_reasons and reason not in self.recompile_reasons[-1]:
                self.recompile_reasons[-1] += f" ({reason})"
            recompiles_log.debug("%s: %s", describe(self.fn), reason)
        if not plan:
            return None
        return compile_symbolic(self.pipeline, self.fn, args, kwargs, self.options, plan)

    def _state_refused(self, reason: str, state_guard: Guard) -> CacheEntry:
        """An eager entry for a global state the compiler cannot reproduce (a user
        ``TorchFunctionMode``, autocast...), valid while that state lasts."""
        if self.options.fullgraph:
            raise CompilationError(
                f"fullgraph=True but {describe(self.fn)} is called while {reason}",
                stage="global-state",
            )
        warn_once(
            ("global-state", reason, describe(self.fn)),
            f"torchstrata: running {describe(self.fn)} eagerly: {reason}",
            stacklevel=6,
        )
        logger.info("running %s eagerly: %s", describe(self.fn), reason)
        return CacheEntry(GuardSet((state_guard,), self._bind), None, reason)

    def _check_graph_breaks(self, capture: CaptureResult, artifacts: FrameArtifacts) -> None:
        if not capture.graph_breaks:
            return
        if self.options.fullgraph:
            first = capture.graph_breaks[0]
            raise CompilationError(
                f"fullgraph=True but {describe(self.fn)} has a graph break at {first}",
                stage="graph-break",
            )
        for graph_break in capture.graph_breaks:
            logger.info("graph break in %s: %s", describe(self.fn), graph_break)
        if artifacts.run is None:
            for graph_break in capture.graph_breaks:
                warn_once(
                    ("graph-break", graph_break.filename, graph_break.lineno),
                    f"torchstrata: graph break at {graph_break}; running {describe(self.fn)} "
                    "eagerly",
                    stacklevel=6,
                )

    def _stage_failed(self, failure: StageFailure, state_guard: Guard | None = None) -> CacheEntry:
        if self.options.fullgraph:
            raise CompilationError(
                f"torchstrata stage {failure.stage!r} failed while compiling "
                f"{describe(self.fn)}: {type(failure.error).__name__}: "
                f"{failure.error}",
                stage=failure.stage,
            ) from failure.error
        warnings.warn(
            f"torchstrata: stage {failure.stage!r} failed while compiling "
            f"{describe(self.fn)} ({type(failure.error).__name__}: {failure.error}); "
            "running eagerly for these inputs",
            TorchstrataFallbackWarning,
            stacklevel=5,
        )
        logger.info(
            "stage %s failed for %s", failure.stage, describe(self.fn), exc_info=failure.error
        )
        # Eager for these inputs under this global state (another state may compile).
        state = (state_guard,) if state_guard is not None else ()
        guards = (*state, *(failure.capture.guards if failure.capture is not None else ()))
        return CacheEntry(GuardSet(guards, self._bind), None, str(failure))

    def _first_run(self, entry: CacheEntry, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run fresh compiled code; if it raises, fall back to eager for this entry."""
        assert entry.run is not None
        try:
            result = entry.run(args, kwargs)
        except Exception as error:  # compiled code failing must not be fatal
            if entry.has_side_effects:
                # Code between graphs already ran (prints, mutations): a re-run would repeat it.
                raise
            failure = StageFailure("program", error)
            self._stage_failed(failure)
            entry.run, entry.run_inputs, entry.reason = None, None, str(failure)
            return self.fn(*args, **kwargs)
        entry.checked = True
        return result


class CompiledModule(torch.nn.Module):
    """Wraps a module whose ``forward`` is compiled; the original stays usable.

    Parameters and buffers are the original's (as submodule ``_orig_mod``, like
    ``torch.compile``); attributes not found here are looked up on the original.
    """

    def __init__(self, module: torch.nn.Module, forward: CompiledFunction) -> None:
        super().__init__()
        self._orig_mod = module
        self.compiled_forward = forward

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the compiled ``forward``; a module with hooks of its own runs its compiled
        ``__call__`` instead, whose trace inlines the hooks (see :func:`_called`)."""
        module = self._modules["_orig_mod"]  # not through nn.Module.__getattr__ (1.5 us)
        assert module is not None
        if (
            module._forward_hooks
            or module._forward_pre_hooks
            or module._backward_hooks
            or module._backward_pre_hooks
        ):
            return self._compiled_call(module)(*args, **kwargs)
        return self.compiled_forward(*args, **kwargs)

    def _compiled_call(self, module: torch.nn.Module) -> CompiledFunction:
        """``module(*args, **kwargs)`` compiled (made on the first call with hooks): the
        hooks are traced with the forward, or break the graph where capture cannot trace
        them, and the hook-dict guards recompile when hooks are added or removed."""
        compiled = self.__dict__.get("_call_with_hooks")
        if compiled is None:
            forward = self.compiled_forward
            compiled = CompiledFunction(_called(module), forward.options, forward.pipeline)
            self.__dict__["_call_with_hooks"] = compiled
        return compiled

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_orig_mod":
                raise
            return getattr(self._orig_mod, name)


def _called(module: torch.nn.Module) -> Callable[..., Any]:
    """A function that calls ``module`` as users do (``nn.Module.__call__``: its hooks
    run around ``forward``), for capture to trace."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return module(*args, **kwargs)

    call.__qualname__ = f"{type(module).__qualname__}.__call__"
    return call
