"""Differential fuzzing of the generated kernels against the reference interpreter.

:func:`fuzz_graphs.fuzz_cases` draws random valid prims graphs; each example compiles one
with the backend under test, calls it twice (the drawn inputs, then other random ones)
and compares both results with ``interpret`` (:func:`check_case`): exact values (integers,
bools, floats that no rounding touches) exactly, other floats within a tolerance of the
least precise float dtype they are computed through (:data:`TOLERANCES`), NaN where the
interpreter has NaN. A float outside that tolerance still passes where it is about as
close to a float64 evaluation of the graph as the interpreter is
(:func:`assert_float_output_matches`): a kernel rounds a 16-bit value once, at the store,
where the interpreter rounds after every op, and sums in another order.

Backends: ``cpp`` and ``triton`` (Triton's interpreter on the CPU; the backend sets
``TRITON_INTERPRET`` itself), and in long runs also ``cuda`` (Triton on a GPU, skipped
without one). CI runs :data:`CI_EXAMPLES` derandomized examples per CPU backend (the same
graphs on every run). For a long local or nightly campaign, set
``TORCHSTRATA_FUZZ_EXAMPLES`` to the number of examples per backend: the graphs are then
drawn at random (derandomize off; ``--hypothesis-seed`` makes a run repeatable), and
hypothesis's example database (``.hypothesis/``) replays earlier failures first::

    TORCHSTRATA_FUZZ_EXAMPLES=2000 .venv/bin/pytest -k match_the_interpreter \\
        --hypothesis-seed=1 --hypothesis-show-statistics \\
        packages/inductor/tests/test_fuzz_kernels.py

(the statistics list the prims, dtypes and kernel counts the run covered). A failure prints
the shrunk case as ``FuzzCase.from_text(...)``: paste it into a regression test at the end
of this module, ``xfail(strict=True)`` with a diagnosis until it is fixed, and add what
triggers it to :data:`KNOWN_BUGS` so that long runs look past it.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest
import torch
from hypothesis import HealthCheck, assume, event, given, settings

from torchstrata.core import (
    CompiledGraph,
    Graph,
    GraphBuilder,
    Level,
    Node,
    TensorMeta,
    Transformer,
    interpret,
    prim,
)


def _sibling_module(name: str) -> ModuleType:
    """Import ``<name>.py`` next to this file: pytest's importlib mode puts no test
    directory on ``sys.path``, and the tests directories are not packages."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_fuzz_graphs = _sibling_module("fuzz_graphs")
FuzzCase = _fuzz_graphs.FuzzCase
fuzz_cases = _fuzz_graphs.fuzz_cases
exact_values = _fuzz_graphs.exact_values

F32, BF16, F16, F64 = torch.float32, torch.bfloat16, torch.float16, torch.float64

#: Examples per backend in CI; ``TORCHSTRATA_FUZZ_EXAMPLES`` overrides (and derandomizes off).
CI_EXAMPLES = 150
#: (atol, rtol) of float outputs against the interpreter, by dtype.
TOLERANCES = {F32: (1e-5, 1e-5), F16: (2e-3, 2e-3), BF16: (2e-2, 2e-2), F64: (1e-10, 1e-10)}
#: Rounding slack, in ulps of the largest value an output is computed from (times the
#: square root of the longest sum on the way).
MAGNITUDE_ULPS = 8

_LONG_RUN = os.environ.get("TORCHSTRATA_FUZZ_EXAMPLES")
FUZZ_SETTINGS = settings(
    max_examples=int(_LONG_RUN) if _LONG_RUN else CI_EXAMPLES,
    derandomize=not _LONG_RUN,
    deadline=None,
    # ``ind`` and ``codegen`` are function-scoped but hold no state (a cache directory, a
    # backend name): sharing them between examples is safe.
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


class _Float64(Transformer):
    """The graph computed in float64; explicit casts to a float dtype still round to it."""

    def transform_input(self, node: Node) -> Node:
        meta = node.tensor_meta
        if meta.dtype.is_floating_point:
            meta = attrs.evolve(meta, dtype=F64)
        return self.builder.input(node.name, meta)

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        assert node.op is not None
        result = self.builder.call(node.op, *args, name=node.name, **kwargs)
        if result.tensor_meta.dtype.is_floating_point and result.tensor_meta.dtype != F64:
            result = self.builder.call(prim("convert_element_type"), result, F64)
        return result


def float64_values(graph: Graph, inputs: list[torch.Tensor]) -> dict[Node, torch.Tensor]:
    """Every value of ``graph`` (inputs and nodes) computed in float64, casts rounding."""
    widening = _Float64(graph)
    wide = widening.run()
    values = (*graph.inputs, *graph.nodes)
    everything = Graph(wide.level, wide.inputs, wide.nodes, tuple(widening.env[v] for v in values))
    wide_inputs = [t.double() if t.is_floating_point() else t for t in inputs]
    return dict(zip(values, interpret(everything, *wide_inputs), strict=True))


def cone(output: Node) -> list[Node]:
    """``output`` and every value it is computed from."""
    seen, stack = {output}, [output]
    while stack:
        for arg in stack.pop().input_nodes():
            if arg not in seen:
                seen.add(arg)
                stack.append(arg)
    return list(seen)


def precision(output: Node) -> torch.dtype:
    """The least precise float dtype that ``output`` is computed through (a float32
    output of a bfloat16 computation carries bfloat16's rounding)."""
    floats = [n.tensor_meta.dtype for n in cone(output) if n.tensor_meta.dtype.is_floating_point]
    return max(floats, key=lambda dtype: torch.finfo(dtype).eps, default=F32)


def _error(value: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``|value - reference|`` per element in float64: 0 where both are NaN or the same
    infinity, infinite where only one is NaN."""
    value, reference = value.double(), reference.double()
    same = (value == reference) | (value.isnan() & reference.isnan())
    return torch.where(same, 0.0, (value - reference).abs().nan_to_num(nan=float("inf")))


def longest_sum(nodes: list[Node]) -> int:
    """The most terms any sum, product or cumulative sum among ``nodes`` accumulates."""
    longest = 1
    for node in nodes:
        if node.op in (prim("sum"), prim("prod")):
            source, dims = node.args
            longest = max(longest, math.prod(source.tensor_meta.shape[d] for d in dims))
        elif node.op == prim("cumsum") and node.args[0].tensor_meta.ndim:
            longest = max(longest, node.args[0].tensor_meta.shape[node.args[1]])
    return longest


def _largest_finite(values: list[torch.Tensor]) -> float:
    finite = [v.double().abs()[v.isfinite()] for v in values if v.is_floating_point()]
    return max((float(v.max()) for v in finite if v.numel()), default=0.0)


def assert_float_output_matches(
    actual: torch.Tensor,
    expected: torch.Tensor,
    reference: torch.Tensor,
    magnitude: float,
    terms: int,
    dtype: torch.dtype,
    what: str,
) -> None:
    """Each element of ``actual`` is about as close to ``reference`` (the float64 value) as
    the interpreter's ``expected``: within 3x its error there, plus ``dtype``'s tolerance,
    plus :data:`MAGNITUDE_ULPS` x sqrt(``terms``) ulps of ``magnitude``, the largest value
    the output is computed from (``terms``: the longest sum it goes through). A sum in
    another order legitimately differs by that much (a kernel's per-lane accumulators
    against torch's cascade; rounding errors of n additions grow like sqrt(n)), and
    ``cos(x * sum)`` carries it anywhere. The float64 value rounded to the output dtype
    always passes (an overflow to infinity included); another NaN or infinity where the
    interpreter is right fails."""
    atol, rtol = TOLERANCES[dtype]
    rounded = reference.to(actual.dtype)
    ours = torch.minimum(_error(actual, reference), _error(actual, rounded))
    eagers = _error(expected, reference)
    slack = (
        atol
        + rtol * reference.double().abs()
        + MAGNITUDE_ULPS * math.sqrt(terms) * torch.finfo(dtype).eps * magnitude
    )
    bad = ours > 3 * eagers + torch.where(reference.isfinite(), slack, 0.0)
    if bad.any():
        at = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements differ; first at {at}: "
            f"compiled {actual[at].item()!r}, interpreter {expected[at].item()!r}, "
            f"float64 {reference[at].item()!r}"
        )


def record_coverage(case: FuzzCase, compiled: Any) -> None:
    """Hypothesis events (``--hypothesis-show-statistics``): prims, input dtypes, kernels."""
    for name in sorted({node.op.short_name for node in case.graph.nodes if node.op}):
        event(f"prim {name}")
    for dtype in sorted({str(node.tensor_meta.dtype) for node in case.graph.inputs}):
        event(f"input {dtype}")
    event(f"{min(len(compiled.kernels), 3)}{'+' * (len(compiled.kernels) >= 3)} kernels")
    if compiled.eager_ops:
        event("extern calls")
    if max((node.tensor_meta.numel for node in case.graph.nodes), default=0) > 4096:
        event("large (> 4096 elements)")
    if case.specials:
        event("special input values")


def check_case(ind: Any, case: FuzzCase, codegen: str) -> CompiledGraph:
    """Compile ``case.graph`` with ``codegen``, call it twice (the case's inputs, then other
    random ones) and compare both results with the interpreter, after the second call: an
    output of the first call that the second overwrote (a reused buffer) fails too."""
    compiled = ind.compile(case.graph, codegen)
    calls = [case.inputs(), attrs.evolve(case, seed=case.seed + 1, specials=()).inputs()]
    results = [compiled(*inputs) for inputs in calls]
    for inputs, actual in zip(calls, results, strict=True):
        assert_outputs_match(case.graph, inputs, actual)
    return compiled


def assert_outputs_match(graph: Graph, inputs: list[torch.Tensor], actual: Any) -> None:
    """``actual`` (what the compiled ``graph`` returned for ``inputs``) against the
    interpreter: exact values exactly, other floats as :func:`assert_float_output_matches`."""
    expected = interpret(graph, *inputs)
    assert isinstance(actual, tuple) and len(actual) == len(expected)
    wide, exact = None, exact_values(graph)
    for position, (got, want) in enumerate(zip(actual, expected, strict=True)):
        output = graph.outputs[position]
        what = f"output {position} (%{output.name})"
        assert got.shape == want.shape and got.dtype == want.dtype, (
            f"{what}: {got.dtype}{list(got.shape)}, interpreter {want.dtype}{list(want.shape)}"
        )
        if output in exact:  # integers, bools, and floats that no rounding touches
            torch.testing.assert_close(
                got, want, atol=0, rtol=0, equal_nan=True, msg=lambda m, w=what: f"{w}: {m}"
            )
            continue
        dtype = precision(output)
        atol, rtol = TOLERANCES[dtype]
        if torch.isclose(got, want, atol=atol, rtol=rtol, equal_nan=True).all():
            continue
        wide = wide or float64_values(graph, inputs)
        computed_from = cone(output)
        magnitude = _largest_finite([wide[node] for node in computed_from])
        terms = longest_sum(computed_from)
        assert_float_output_matches(got, want, wide[output], magnitude, terms, dtype, what)


CPU_BACKENDS = ["cpp", pytest.param("triton", marks=pytest.mark.triton)]
_CUDA = pytest.param(
    "cuda",
    marks=[
        pytest.mark.gpu,
        pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    ],
)
#: Long runs also fuzz Triton on a GPU when there is one (CI would spend minutes autotuning).
FUZZ_BACKENDS = [*CPU_BACKENDS, _CUDA] if _LONG_RUN else CPU_BACKENDS


@pytest.mark.parametrize("codegen", FUZZ_BACKENDS)
@FUZZ_SETTINGS
@given(case=fuzz_cases())
def test_fuzz_kernels_match_the_interpreter(ind, codegen, case):
    assume(not any(triggers(case, codegen) for triggers in KNOWN_BUGS.values()))
    record_coverage(case, check_case(ind, case, codegen))


# ------------------------------------------------------------------ regression tests
# Failures the fuzzer found, shrunk (and trimmed by hand while they kept failing), one per
# bug. A bug not fixed yet is marked ``xfail(strict=True)`` with its diagnosis, and its
# trigger goes into KNOWN_BUGS (at the end) so that long runs look for new ones.


@pytest.mark.parametrize("codegen", CPU_BACKENDS)
def test_gather_pushed_to_a_computed_bool_leaf_compiles(ind, codegen):
    # gather_as_reduction pushed the gather through the cast down to the bool slice and
    # built sum(where(hit, bool, 0)), which prims.sum rejects (a where's condition too).
    case = FuzzCase.from_text(
        """
graph prims {
  %x: b8[2, 3] = input
  %i: i64[1, 3] = input
  %r: i64[1, 3] = prims.remainder(%i, 2)
  %s: b8[2, 3] = prims.slice(%x, (0, 0), (2, 3), (1, 1))
  %c: i32[2, 3] = prims.convert_element_type(%s, torch.int32)
  %g: i32[1, 3] = prims.gather(%c, 0, %r)
  return %g
}
"""
    )
    check_case(ind, case, codegen)


@pytest.mark.parametrize("codegen", CPU_BACKENDS)
def test_sign_of_nan_matches_the_reference(ind, codegen):
    # The C++ ts_sign kept NaN; the reference (torch.sign) gives 0.
    case = FuzzCase.from_text(
        """
graph prims {
  %x: f32[3] = input
  %s: f32[3] = prims.sign(%x)
  return %s
}
""",
        specials=((0, 1, "nan"),),
    )
    check_case(ind, case, codegen)


@pytest.mark.parametrize("codegen", CPU_BACKENDS)
def test_scalar_operand_of_a_16_bit_value_is_rounded_to_it(ind, codegen):
    # A scalar became a Constant of the 16-bit dtype but kept its float32 value: 0.1, not
    # bfloat16(0.1) = 0.10009765625 (the same for a full value and a maximum operand).
    case = FuzzCase.from_text(
        """
graph prims {
  %x: bf16[3] = input
  %c: b8[3] = prims.ne(%x, %x)
  %w: bf16[3] = prims.where(%c, %x, 0.1)
  %f: f32[3] = prims.convert_element_type(%w, torch.float32)
  return %f
}
"""
    )
    check_case(ind, case, codegen)


#: Prims whose result shows the sign of a zero operand (1/-0.0 is -inf, 1/+0.0 is +inf).
_SHOWS_A_ZEROS_SIGN = frozenset({"reciprocal", "atan2", "div"})


def _opposite_zeros(a: Any, b: Any) -> bool:
    """Do the (broadcast) values ``a`` and ``b`` hold +0.0 and -0.0 at the same position?"""
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    if not (a.is_floating_point() or b.is_floating_point()):
        return False
    a, b = torch.broadcast_tensors(a.double(), b.double())
    return bool(((a == 0) & (b == 0) & (a.signbit() != b.signbit())).any())


def _sees_the_sign_of_a_max_of_zeros(case: FuzzCase, codegen: str) -> bool:
    """A maximum/minimum that, for the inputs :func:`check_case` calls with, compares a
    +0.0 with a -0.0 somewhere, in a graph with a prim that shows a zero's sign."""
    names = {node.op.short_name for node in case.graph.nodes if node.op}
    if not (names & {"maximum", "minimum"} and names & _SHOWS_A_ZEROS_SIGN):
        return False
    extrema = [n for n in case.graph.nodes if n.op in (prim("maximum"), prim("minimum"))]
    operands = list(dict.fromkeys(a for n in extrema for a in n.args if isinstance(a, Node)))
    probe = Graph(case.graph.level, case.graph.inputs, case.graph.nodes, tuple(operands))
    for inputs in (case.inputs(), attrs.evolve(case, seed=case.seed + 1, specials=()).inputs()):
        values = dict(zip(operands, interpret(probe, *inputs), strict=True))
        for node in extrema:
            a, b = (values[arg] if isinstance(arg, Node) else arg for arg in node.args)
            if _opposite_zeros(a, b):
                return True
    return False


#: Graphs the fuzzer does not compare, by reason: a predicate ``(case, codegen) -> bool``
#: for each. A bug found and not fixed yet goes here too, named after its xfail test.
#: The sign of a zero picked by maximum/minimum of equal zeros is unspecified: eager's own
#: ``torch.maximum(-0.0, 0.0)`` is -0.0 on one element and +0.0 on a vectorised tensor of
#: 64 (torch 2.13 CPU), so 1/relu(-0.0) has no single eager answer to match. Only cases
#: whose max/min actually meets a +0.0 and a -0.0 (for the inputs checked) are left out.
KNOWN_BUGS: dict[str, Callable[[FuzzCase, str], bool]] = {
    "unspecified: sign of a max/min of equal zeros": _sees_the_sign_of_a_max_of_zeros,
}


@pytest.mark.parametrize("codegen", CPU_BACKENDS)
def test_long_float32_sum_of_equal_values_is_accurate(ind, codegen):
    # The C++ kernel added 70001 copies of a float32 value in float accumulators, one per
    # SIMD lane, each element after the other: the rounding errors all leaned the same way
    # and the sum came out 4e-5 off (torch's cascade sum: 1e-7). Float32 sums now add in
    # double (cpp_codegen._accumulator_type).
    rows = 70001
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((1,), torch.float32))
    column = b.call(prim("broadcast_in_dim"), x, (rows, 1), (1,))
    graph = b.build([b.call(prim("sum"), column, (0,))])
    value = torch.tensor([-2.3104217])
    (got,) = ind.compile(graph, codegen)(value)
    exact = torch.tensor([rows * value.double().item()])
    (eager,) = interpret(graph, value)
    assert abs(got.double() - exact).item() <= 3 * max(
        abs(eager.double() - exact).item(), torch.finfo(torch.float32).eps * abs(exact).item()
    )


@pytest.mark.parametrize("codegen", CPU_BACKENDS)
def test_long_sum_of_a_picked_value_matches_the_interpreter(ind, codegen):
    # The fuzzer's shrunk case, as it printed it: sum_3 adds 70001 copies of in1[0, 0]
    # (where_1 picks it out, and mul_1 is 0, so the division is by 1); C++ returned
    # -161793.84 for -161731.13.
    case = FuzzCase.from_text(
        """
graph prims {
  %in1: f32[70001, 1] = input
  %iota: i64[2] = prims.iota(2, 0, 1, torch.int64, device('cpu'))
  %broadcast_in_dim: i64[2] = prims.broadcast_in_dim(%iota, (2,), (0,))
  %lt: b8[2] = prims.lt(%broadcast_in_dim, 0)
  %sum: f32[70001] = prims.sum(%in1, (1,))
  %div: f32[70001] = prims.div(%sum, 1.0)
  %broadcast_in_dim_1: f32[70001, 1]{1, 0} = prims.broadcast_in_dim(%div, (70001, 1), (0,))
  %sub: f32[70001, 1] = prims.sub(%in1, %broadcast_in_dim_1)
  %mul: f32[70001, 1] = prims.mul(%sub, %sub)
  %sum_1: f32[70001] = prims.sum(%mul, (1,))
  %div_1: f32[70001] = prims.div(%sum_1, 1.0)
  %add: f32[70001] = prims.add(%div_1, 0.1)
  %rsqrt: f32[70001] = prims.rsqrt(%add)
  %broadcast_in_dim_2: f32[70001, 1]{1, 0} = prims.broadcast_in_dim(%rsqrt, (70001, 1), (0,))
  %mul_1: f32[70001, 1] = prims.mul(%sub, %broadcast_in_dim_2)
  %iota_1: i64[70001] = prims.iota(70001, 0, 1, torch.int64, device('cpu'))
  %broadcast_in_dim_3: i64[70001] = prims.broadcast_in_dim(%iota_1, (70001,), (0,))
  %convert_element_type: i64[2] = prims.convert_element_type(%lt, torch.int64)
  %slice: i64[1] = prims.slice(%convert_element_type, (0,), (1,), (1,))
  %broadcast_in_dim_4: i64[1] = prims.broadcast_in_dim(%slice, (1,), (0,))
  %broadcast_in_dim_5: i64[70001]{0} = prims.broadcast_in_dim(%broadcast_in_dim_4, (70001,), (0,))
  %eq: b8[70001] = prims.eq(%broadcast_in_dim_3, %broadcast_in_dim_5)
  %full_1: f32[70001] = prims.full((70001,), 0, torch.float32, device('cpu'))
  %where_1: f32[70001] = prims.where(%eq, %div, %full_1)
  %sum_2: f32[] = prims.sum(%where_1, (0,))
  %broadcast_in_dim_6: f32[70001, 1]{0, 0} = prims.broadcast_in_dim(%sum_2, (70001, 1), ())
  %abs: f32[70001, 1] = prims.abs(%mul_1)
  %maximum: f32[70001, 1] = prims.maximum(%abs, 1.0)
  %div_2: f32[70001, 1] = prims.div(%broadcast_in_dim_6, %maximum)
  %maximum_1: f32[70001, 1] = prims.maximum(%div_2, %div_2)
  %sum_3: f32[1] = prims.sum(%maximum_1, (0,))
  return %sum_3
}
"""
    )
    check_case(ind, case, codegen)


def test_the_signed_zero_filter_leaves_out_only_cases_that_meet_opposite_zeros():
    text = """
graph prims {
  %x: f32[4] = input
  %m: f32[4] = prims.maximum(%x, 0.0)
  %r: f32[4] = prims.reciprocal(%m)
  return %r
}
"""
    meets = FuzzCase.from_text(text, specials=((0, 1, "-0.0"),))
    assert _sees_the_sign_of_a_max_of_zeros(meets, "cpp")
    # The same graph on inputs without a -0.0 is compared like any other.
    assert not _sees_the_sign_of_a_max_of_zeros(FuzzCase.from_text(text), "cpp")
