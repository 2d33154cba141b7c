"""The closure path: one OpInfo sample as a one-node torch graph -> aot_forward -> decompose.

The sweep runs samples through capture (:mod:`.captured`); this path is its fallback
when capture declines or fails, and holds the comparison helpers both use.

Every sample ends in exactly one :class:`Outcome` status:

* ``decomposed``: lowered to prims (extern-by-policy ATen calls such as ``mm`` allowed),
  results equal to eager's;
* ``extern``: correct, but some ATen op had no rule (``Outcome.extern`` names them);
* ``mismatch``: the prims graph ran but disagreed with eager (value, dtype or shape), or
  the pipeline raised after tracing succeeded (decompose/verify/interpret errors);
* ``skip``: not a question for decomposition (eager itself fails, random op, non-tensor
  output, tracing failed); ``Outcome.reason`` says which, and the sweep counts reasons.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from torchstrata.autograd import aot_forward
from torchstrata.core import (
    GraphBuilder,
    Level,
    OpKind,
    OpRef,
    TensorMeta,
    interpret,
    verify,
)
from torchstrata.decomp import decompose_with_stats

from . import calls

LOW_PRECISION = (torch.float16, torch.bfloat16)

#: OpInfo name prefixes whose values are uninitialised memory or random draws (a
#: functionalized trace consumes the RNG differently from eager, and dropout's mask comes
#: from ``prims.rand``): only their dtype and shape are compared.
UNCHECKED_PREFIXES = (
    "empty",
    "new_empty",
    "rand",
    "normal",
    "bernoulli",
    "multinomial",
    "uniform",
    "cauchy",
    "exponential",
    "geometric",
    "log_normal",
    "nn.functional.dropout",
    "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout",
    "nn.functional.rrelu",
    "nn.functional.fractional_max_pool",
    "nn.functional.multi_head_attention_forward",  # dropout inside (training=True)
    # A random projection (seeded inside the OpInfo's wrapper, which a trace does not
    # replay): of a complex input, the singular vectors come back with a phase per column
    # that depends on the draw (a real input's are unique up to sign, and matched).
    "svd_lowrank",
    "pca_lowrank",
)

#: Outputs (by position) of OpInfos whose values are uninitialised memory: the CUDA
#: flash attention's ``rng_state`` and ``unused`` without dropout. Only their dtype and
#: shape are compared.
UNCHECKED_OUTPUTS = {"torch.ops.aten._flash_attention_forward": (2, 3)}

#: The RNG seed set before the eager run and before the interpreter run.
SEED = 1234


@attrs.frozen
class Outcome:
    """What happened to one sample."""

    status: str
    reason: str = ""
    extern: tuple[str, ...] = ()
    #: What capture did (``full``, ``breaks``, ``declined``, ``error``); empty when the
    #: sample never reached capture (eager fails, sparse, ...) or for the closure path.
    capture: str = ""
    capture_reason: str = ""


def _skip(reason: str) -> Outcome:
    return Outcome("skip", reason)


_NODE_PREFIX = re.compile(r"%\w+ = [\w.]+\(\.\.\.\)( failed)?:\s*")


def first_line(error: BaseException) -> str:
    """``Type: first line`` without the per-sample node prefix, so reasons group."""
    text = str(error).strip().splitlines()
    line = _NODE_PREFIX.sub("", text[0]) if text else ""
    return f"{type(error).__name__}: {line[:100]}"


def structure_mismatch(actual: Any, expected: Any, where: str = "result") -> str | None:
    """None if ``actual`` has eager's ``expected`` structure exactly: the same type at
    every level (``torch.return_types`` structseqs, namedtuples, lists, dicts, tensors)
    and the same lengths and keys; else what differs, and where."""
    if type(actual) is not type(expected):
        return f"{where} is {type(actual).__qualname__}, eager's {type(expected).__qualname__}"
    if isinstance(expected, dict):
        if list(actual) != list(expected):
            return f"{where} has keys {list(actual)}, eager's {list(expected)}"
        items = [(f"{where}[{key!r}]", actual[key], expected[key]) for key in expected]
    elif isinstance(expected, list | tuple):
        if len(actual) != len(expected):
            return f"{where} has {len(actual)} items, eager's {len(expected)}"
        items = [(f"{where}[{i}]", a, e) for i, (a, e) in enumerate(zip(actual, expected))]
    else:
        return None
    for place, got, want in items:
        problem = structure_mismatch(got, want, place)
        if problem is not None:
            return problem
    return None


def flat_outputs(value: Any) -> list[torch.Tensor] | None:
    leaves, _ = tree_flatten(value)
    if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        return None
    return leaves


def build_graph(
    fn: Callable[..., Any], tensors: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]
):
    """A torch-level graph with one node calling ``fn(*tensors)`` (registered in ``calls``)."""
    path = calls.register(fn)
    builder = GraphBuilder(Level.TORCH)
    inputs = [builder.input(f"x{i}", TensorMeta.from_tensor(t)) for i, t in enumerate(tensors)]
    metas = tuple(TensorMeta.from_tensor(t) for t in outputs)
    op = OpRef(OpKind.TORCH, path)
    if len(outputs) == 1:
        node = builder.call(op, *inputs, meta=metas[0], name="op")
        return builder.build([node]), path
    node = builder.call(op, *inputs, meta=metas, name="op")
    return builder.build([builder.getitem(node, i) for i in range(len(outputs))]), path


def sample_callable(op: Any, sample: Any) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """``(fn, tensors)``: ``fn(*tensors)`` calls ``op`` on the sample; non-tensors are constants."""
    leaves, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    tensors = [leaves[i] for i in slots]
    target = op.op

    def fn(*values: torch.Tensor) -> Any:
        filled = list(leaves)
        for slot, value in zip(slots, values, strict=True):
            filled[slot] = value
        inp, args, kwargs = tree_unflatten(filled, spec)
        result = target(inp, *args, **kwargs)
        flat = flat_outputs(result)
        return flat[0] if flat is not None and len(flat) == 1 else tuple(flat or ())

    return fn, tensors


def compare(
    actual: torch.Tensor,
    expected: torch.Tensor,
    reference: torch.Tensor | None,
    check_values: bool = True,
) -> str | None:
    """None if ``actual`` matches eager's ``expected``, else what differs.

    With a float64 ``reference`` (the inputs had float16/bfloat16), any float output's
    elements that differ from eager must be at most 3x as far from the float64 answer as
    eager is (plus a small atol). That covers float32 outputs of low-precision inputs
    too: CUDA eager's batch norm over a non-contiguous float16 input returns its float32
    mean rounded to float16 (H200, torch 2.11), where ours is exact.
    """
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if not check_values or actual.numel() == 0:
        return None
    if expected.is_floating_point() and reference is not None:
        same = (actual == expected) | (actual.isnan() & expected.isnan())
        if bool(same.all()):
            return None
        ref = reference.double()[~same]
        ours = (actual.double()[~same] - ref).abs()
        eagers = (expected.double()[~same] - ref).abs()
        bad = ~(ours <= 3 * eagers + 1e-3 * (1 + ref.abs())) & ~(ours.isnan() & eagers.isnan())
        if bool(bad.any()):
            return (
                f"low-precision error {ours.max().item():.3g} vs eager's {eagers.max().item():.3g}"
            )
        return None
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, check_stride=False)
    except AssertionError as error:
        return " ".join(str(error).split())[:200]
    return None


def float64_reference(fn: Callable[..., Any], tensors: Sequence[torch.Tensor]) -> list[Any] | None:
    if not any(t.dtype in LOW_PRECISION for t in tensors):
        return None
    wide = [t.double() if t.dtype in LOW_PRECISION else t for t in tensors]
    try:
        result = fn(*wide)
    except Exception:  # noqa: BLE001 - no reference: compare with plain tolerances
        return None
    return flat_outputs(result)


def run_sample(op: Any, sample: Any) -> Outcome:
    """Run one OpInfo sample through aot_forward, decompose and the interpreter."""
    fn, tensors = sample_callable(op, sample)
    try:
        torch.manual_seed(SEED)
        expected = fn(*tensors)
    except Exception as error:  # noqa: BLE001 - eager refuses the sample: not our question
        return _skip(f"eager fails: {type(error).__name__}")
    outputs = flat_outputs(expected)
    if outputs is None:
        return _skip("non-tensor output")
    if any(t.is_sparse or t.layout is not torch.strided for t in (*tensors, *outputs)):
        return _skip("non-strided tensor")
    graph, path = build_graph(fn, tensors, outputs)
    try:
        try:
            aot = aot_forward(graph)
        except Exception as error:  # noqa: BLE001 - counted as "failed to trace"
            return _skip(f"trace: {first_line(error)}")
        try:
            prims, stats = decompose_with_stats(aot.forward)
            verify(prims)
            torch.manual_seed(SEED)
            # lifted constants (torch.tensor([...]) made inside) come after the inputs
            actual = interpret(prims, *tensors, *aot.constants)[: len(outputs)]
        except Exception as error:  # noqa: BLE001 - a decomposition bug: a mismatch
            return Outcome("mismatch", f"decompose: {first_line(error)}")
    finally:
        calls.release(path)
    reference = float64_reference(fn, tensors)
    check_values = not op.name.startswith(UNCHECKED_PREFIXES)
    for index, (got, want) in enumerate(zip(actual, outputs, strict=True)):
        ref = reference[index] if reference is not None and index < len(reference) else None
        if not isinstance(got, torch.Tensor):
            return Outcome("mismatch", f"output {index} is {type(got).__name__}")
        problem = compare(got, want, ref if isinstance(ref, torch.Tensor) else None, check_values)
        if problem is not None:
            return Outcome("mismatch", f"output {index}: {problem}")
    missing = tuple(sorted(stats.missing()))
    return Outcome("extern", extern=missing) if missing else Outcome("decomposed")
