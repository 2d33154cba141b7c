"""Random small PyTorch programs, run eagerly and compiled, compared element by element.

:func:`make_program` turns a seed into a :class:`Program`: the source of a Python function
of 1-4 tensor inputs (odd, 0, 1 and broadcast sizes; float32, float64, bfloat16, float16,
int32, int64 and bool; contiguous, transposed, strided and offset layouts) and 2-10
statements over the common ops: elementwise math, comparisons, ``where``, casts,
reductions, softmax / log_softmax, views (reshape, permute, transpose, slices, unsqueeze,
expand), broadcasting binaries, matmul and cat. :func:`check_program` runs it eagerly, in
float64 (the reference) and compiled (``fullgraph=True``: a graph break or a stage failure
fails too), and compares:

* exact values (integers, bools, and floats no rounding touched: inputs, views, casts,
  ``where``, max/min, ``neg``/``abs``) bit for bit;
* other floats element by element: no further from the float64 value than 3x eager's
  error there, plus 8 ulps (of the least precise float dtype the program uses) of the
  largest value it computes, times the square root of its longest reduction.

Discontinuous ops (comparisons, ``floor``/``round``, float -> int casts, ``argmax``) read
exact values only, so a correct compiler never flips them. Not drawn: complex dtypes
(unsupported, issue 30 item 3) and ops outside the list above (in-place updates, tensor
indexing, random numbers: other tests cover them). Integer values stay small (no
overflow, which C++ leaves undefined), and float -> int casts read clamped exact values.

Replay one seed (and shrink a failure to its smallest graph with the minifier)::

    python -m integration_tests.fuzz.programs --seed 123 --codegen cpp
"""

from __future__ import annotations

import argparse
import math
import random
import types
from collections.abc import Callable
from typing import Any

import attrs
import torch
import torch.nn.functional as F

FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
INTS = (torch.int32, torch.int64)
#: Input dtypes by weight: float32 mostly.
INPUT_DTYPES = (torch.float32,) * 5 + (torch.bfloat16, torch.float16, torch.float64)
INPUT_DTYPES += (torch.int32, torch.int64, torch.bool)
SIZES = (1, 2, 3, 5, 7, 8, 13)
#: ``D`` in the programs' source: the dtypes by name.
_ALL_DTYPES = types.SimpleNamespace(
    **{str(d).removeprefix("torch."): d for d in (*FLOATS, *INTS, torch.bool)}
)


@attrs.frozen
class Value:
    """A variable of the program being drawn."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    exact: bool


@attrs.frozen
class InputSpec:
    """How to make one input: its shape, dtype and layout."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    layout: str  # contiguous | transposed | strided | offset


@attrs.frozen
class Program:
    """A drawn program: ``source`` defines ``program(*inputs)``."""

    seed: int
    source: str
    inputs: tuple[InputSpec, ...]
    longest_reduction: int
    float_dtypes: tuple[torch.dtype, ...]
    #: every variable (inputs and computed values), in order
    names: tuple[str, ...] = ()

    def function(self, *, float64: bool = False, every_value: bool = False) -> Callable:
        """The program; ``float64``: casts to float dtypes stay float64 (the reference);
        ``every_value``: it returns every variable (for the magnitude of the values)."""
        dtypes = types.SimpleNamespace(
            **{
                str(d).removeprefix("torch."): (torch.float64 if float64 and d in FLOATS else d)
                for d in (*FLOATS, *INTS, torch.bool)
            }
        )
        source = self.source
        if every_value:
            head, _ = source.rsplit("    return ", 1)
            source = head + f"    return ({', '.join(self.names)},)\n"
        namespace: dict[str, Any] = {"torch": torch, "F": F, "D": dtypes}
        exec(compile(source, f"<program {self.seed}>", "exec"), namespace)
        return namespace["program"]

    def make_inputs(self) -> list[torch.Tensor]:
        """The inputs, drawn from the seed (small integers, normal floats, some zeros)."""
        generator = torch.Generator().manual_seed(self.seed)
        return [_make_input(spec, generator) for spec in self.inputs]


def _make_input(spec: InputSpec, generator: torch.Generator) -> torch.Tensor:
    shape = spec.shape
    if spec.layout == "transposed" and len(shape) >= 2:
        base = _values((*shape[:-2], shape[-1], shape[-2]), spec.dtype, generator)
        return base.transpose(-1, -2)
    if spec.layout == "strided" and shape:
        base = _values((*shape[:-1], 2 * shape[-1]), spec.dtype, generator)
        return base[..., ::2]
    if spec.layout == "offset":
        flat = _values((math.prod(shape) + 3,), spec.dtype, generator)
        return flat[3:].view(shape)
    return _values(shape, spec.dtype, generator)


def _values(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype in INTS:
        return torch.randint(-8, 9, shape, generator=generator).to(dtype)
    values = torch.randn(shape, generator=generator, dtype=torch.float64)
    values = torch.where(torch.rand(shape, generator=generator) < 0.05, 0.0, values)
    return values.to(dtype)


class _Draft:
    """The program being drawn: its statements, values and inputs."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[str] = []
        self.values: list[Value] = []
        self.inputs: list[InputSpec] = []
        self.longest = 1
        self.float_dtypes: set[torch.dtype] = set()

    def new_input(self, shape: tuple[int, ...], dtype: torch.dtype) -> Value:
        name = f"x{len(self.inputs)}"
        layouts = ["contiguous"] * 3 + ["transposed", "strided", "offset"]
        self.inputs.append(InputSpec(name, shape, dtype, self.rng.choice(layouts)))
        if dtype in FLOATS:
            self.float_dtypes.add(dtype)
        value = Value(name, shape, dtype, True)
        self.values.append(value)
        return value

    def emit(
        self, expression: str, shape: tuple[int, ...], dtype: torch.dtype, exact: bool
    ) -> Value:
        """Append ``name = expression``; its shape and dtype are those eager gives on zeros
        (``shape``/``dtype`` are the caller's expectation, used only if it fails). An
        expression eager rejects is dropped (a new input of that shape stands in)."""
        scope = {v.name: torch.zeros(v.shape, dtype=v.dtype) for v in self.values}
        try:
            result = eval(expression, {"torch": torch, "F": F, "D": _ALL_DTYPES}, scope)
        except Exception:  # noqa: BLE001 - an op eager refuses here: draw something else
            return self.new_input(shape, dtype)
        value = Value(f"v{len(self.values)}", tuple(result.shape), result.dtype, exact)
        self.lines.append(f"    {value.name} = {expression}")
        self.values.append(value)
        if value.dtype in FLOATS:
            self.float_dtypes.add(value.dtype)
        return value

    def pick(self, accept: Callable[[Value], bool] = lambda v: True) -> Value | None:
        found = [v for v in self.values if accept(v)]
        if not found:
            return None
        # later values more often: programs get deep, not only wide
        return found[min(len(found) - 1, int(len(found) * self.rng.random() ** 0.5))]


def _random_shape(rng: random.Random) -> tuple[int, ...]:
    rank = rng.choice((0, 1, 2, 2, 2, 3, 3, 4))
    shape = [rng.choice(SIZES) for _ in range(rank)]
    if shape and rng.random() < 0.08:
        shape[rng.randrange(len(shape))] = 0
    return tuple(shape)


def _dtype_name(dtype: torch.dtype) -> str:
    return "D." + str(dtype).removeprefix("torch.")


def _is_float(v: Value) -> bool:
    return v.dtype in FLOATS


def _unary(d: _Draft) -> None:
    v = d.pick(lambda v: v.dtype is not torch.bool)
    if v is None:
        return
    n = v.name
    if _is_float(v):
        choices = [
            (f"torch.exp({n})", False),
            (f"torch.tanh({n})", False),
            (f"torch.sigmoid({n})", False),
            (f"torch.relu({n})", v.exact),
            (f"F.gelu({n})", False),
            (f"torch.sin({n})", False),
            (f"torch.log(torch.abs({n}) + 1)", False),
            (f"torch.sqrt(torch.abs({n}))", False),
            (f"torch.neg({n})", v.exact),
            (f"torch.abs({n})", v.exact),
            (f"{n} * {d.rng.choice((0.5, -2.0, 3.0, 0.1))}", False),
            (f"{n} + {d.rng.choice((1.0, -0.5, 0.25, 3))}", False),
            (f"{n} / {d.rng.choice((2.0, -3.0, 7.0))}", False),
            (f"F.hardsigmoid({n} * 4)", False),
            (f"torch.clamp({n}, -0.5, 0.5)", v.exact),
        ]
        if v.exact:
            choices += [(f"torch.floor({n} * 4)", True), (f"torch.round({n} * 2)", True)]
    else:
        choices = [
            (f"torch.neg({n})", True),
            (f"torch.abs({n})", True),
            (f"{n} + {d.rng.choice((1, -3, 5))}", True),
            (f"{n} * {d.rng.choice((2, -1))}", True),
            (f"torch.remainder({n}, 3)", True),
            (f"torch.clamp({n}, -2, 4)", True),
        ]
    expression, exact = d.rng.choice(choices)
    d.emit(expression, v.shape, v.dtype, exact and v.exact)


def _broadcast_partner(d: _Draft, v: Value) -> tuple[Value, tuple[int, ...]]:
    """Another value (or a new input) that broadcasts with ``v``; the result shape."""

    def compatible(w: Value) -> bool:
        try:
            torch.broadcast_shapes(v.shape, w.shape)
        except RuntimeError:
            return False
        return w is not v and torch.broadcast_shapes(v.shape, w.shape) == v.shape

    partner = d.pick(compatible) if d.rng.random() < 0.6 else None
    if partner is None:
        shape = list(v.shape)
        for i in range(len(shape)):
            if d.rng.random() < 0.3:
                shape[i] = 1
        shape = shape[d.rng.randrange(len(shape) + 1) :] if shape else shape
        dtype = v.dtype if d.rng.random() < 0.7 else d.rng.choice(INPUT_DTYPES)
        partner = d.new_input(tuple(shape), dtype)
    return partner, torch.broadcast_shapes(v.shape, partner.shape)


def _result_dtype(a: Value, b: Value) -> torch.dtype:
    return torch.promote_types(a.dtype, b.dtype)


def _binary(d: _Draft) -> None:
    a = d.pick()
    if a is None:
        return
    b, shape = _broadcast_partner(d, a)
    dtype = _result_dtype(a, b)
    exact = a.exact and b.exact
    if dtype is torch.bool:
        op = d.rng.choice(("torch.logical_and", "torch.logical_or", "torch.logical_xor"))
        d.emit(f"{op}({a.name}, {b.name})", shape, torch.bool, exact)
        return
    choices = [("torch.add", False), ("torch.sub", False), ("torch.mul", False)]
    choices += [("torch.maximum", exact), ("torch.minimum", exact)]
    op, keeps_exact = d.rng.choice(choices)
    if torch.bool in (a.dtype, b.dtype) and op == "torch.sub":
        op = "torch.add"  # eager refuses to subtract bools
    exact_result = (keeps_exact or dtype not in FLOATS) and exact
    d.emit(f"{op}({a.name}, {b.name})", shape, dtype, exact_result)
    if d.rng.random() < 0.3:  # a true division by a positive divisor
        result = (
            torch.promote_types(dtype, torch.get_default_dtype()) if dtype not in FLOATS else dtype
        )
        d.emit(f"{a.name} / (torch.abs({b.name}) + 1)", shape, result, False)


def _where(d: _Draft) -> None:
    a = d.pick(lambda v: v.exact and v.dtype is not torch.bool)
    if a is None:
        return
    b, shape = _broadcast_partner(d, a)
    if b.dtype is torch.bool or not b.exact:
        return
    comparison = d.rng.choice(("lt", "gt", "le", "ge", "eq", "ne"))
    condition = d.emit(f"torch.{comparison}({a.name}, {b.name})", shape, torch.bool, True)
    x = d.pick(lambda v: v.dtype is not torch.bool and _broadcasts(v.shape, shape))
    if x is None:
        return
    other = d.rng.choice(("0.0", "1", "-2.5")) if _is_float(x) else d.rng.choice(("0", "7"))
    d.emit(f"torch.where({condition.name}, {x.name}, {other})", shape, x.dtype, x.exact)


def _broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    try:
        return torch.broadcast_shapes(shape, to) == to
    except RuntimeError:
        return False


def _cast(d: _Draft) -> None:
    v = d.pick()
    if v is None:
        return
    target = d.rng.choice((*FLOATS, *INTS, torch.bool))
    if target == v.dtype:
        return
    if target in (*INTS, torch.bool) and _is_float(v) and not v.exact:
        return  # a float -> int cast of a rounded value may flip: not compared exactly
    if target in INTS and _is_float(v):
        d.emit(
            f"torch.clamp({v.name} * 4, -100, 100).to({_dtype_name(target)})", v.shape, target, True
        )
        return
    d.emit(f"{v.name}.to({_dtype_name(target)})", v.shape, target, v.exact)


def _reduction(d: _Draft) -> None:
    v = d.pick(lambda v: len(v.shape) >= 1 and v.dtype is not torch.bool)
    if v is None:
        return
    dim = d.rng.randrange(len(v.shape))
    keep = d.rng.random() < 0.3
    shape = list(v.shape)
    if keep:
        shape[dim] = 1
    else:
        del shape[dim]
    length = v.shape[dim]
    kinds = ["sum", "amax", "amin"] + (["mean", "softmax", "log_softmax"] if _is_float(v) else [])
    if v.exact and length:
        kinds.append("argmax")
    kind = d.rng.choice(kinds)
    d.longest = max(d.longest, length)
    if kind in ("softmax", "log_softmax"):
        d.emit(f"torch.{kind}({v.name}, {dim})", v.shape, v.dtype, False)
        return
    if kind in ("amax", "amin", "argmax") and length == 0:
        return  # eager raises for an empty dim
    dtype = v.dtype
    if kind == "sum" and v.dtype in INTS:
        dtype = torch.int64
    if kind == "argmax":
        dtype = torch.int64
    exact = v.exact and (kind in ("amax", "amin", "argmax") or dtype not in FLOATS)
    d.emit(f"{v.name}.{kind}({dim}, keepdim={keep})", tuple(shape), dtype, exact)


def _view(d: _Draft) -> None:
    v = d.pick(lambda v: len(v.shape) >= 1)
    if v is None:
        return
    shape, n, rng = v.shape, v.name, d.rng
    kind = rng.choice(
        ("reshape", "permute", "transpose", "slice", "unsqueeze", "expand", "flatten")
    )
    if kind == "reshape" and math.prod(shape) and len(shape) >= 2:
        new = (shape[0] * shape[1], *shape[2:])
        d.emit(f"{n}.reshape({new})", new, v.dtype, v.exact)
    elif kind == "permute" and len(shape) >= 2:
        order = list(range(len(shape)))
        rng.shuffle(order)
        d.emit(f"{n}.permute({tuple(order)})", tuple(shape[i] for i in order), v.dtype, v.exact)
    elif kind == "transpose" and len(shape) >= 2:
        new = (*shape[:-2], shape[-1], shape[-2])
        d.emit(f"{n}.transpose(-1, -2)", new, v.dtype, v.exact)
    elif kind == "slice" and shape[-1] >= 2:
        start, step = rng.choice(((0, 2), (1, 1), (1, 2)))
        new = (*shape[:-1], len(range(start, shape[-1], step)))
        d.emit(f"{n}[..., {start}::{step}]", new, v.dtype, v.exact)
    elif kind == "unsqueeze":
        dim = rng.randrange(len(shape) + 1)
        d.emit(f"{n}.unsqueeze({dim})", (*shape[:dim], 1, *shape[dim:]), v.dtype, v.exact)
    elif kind == "expand" and 1 in shape:
        new = tuple(rng.choice((2, 3)) if s == 1 else s for s in shape)
        d.emit(f"{n}.expand({new})", new, v.dtype, v.exact)
    elif kind == "flatten":
        d.emit(f"{n}.flatten()", (math.prod(shape),), v.dtype, v.exact)


def _matmul(d: _Draft) -> None:
    a = d.pick(lambda v: len(v.shape) in (2, 3) and _is_float(v))
    if a is None:
        return
    k = a.shape[-1]
    n = d.rng.choice(SIZES)
    b = d.new_input((k, n), a.dtype)
    d.longest = max(d.longest, k)
    d.emit(f"torch.matmul({a.name}, {b.name})", (*a.shape[:-1], n), a.dtype, False)


def _cat(d: _Draft) -> None:
    a = d.pick(lambda v: len(v.shape) >= 1)
    if a is None:
        return
    dim = d.rng.randrange(len(a.shape))
    size = d.rng.choice(SIZES)
    shape = list(a.shape)
    shape[dim] = size
    b = d.new_input(tuple(shape), a.dtype)
    shape[dim] = a.shape[dim] + size
    d.emit(f"torch.cat([{a.name}, {b.name}], {dim})", tuple(shape), a.dtype, a.exact)


STEPS = (_unary,) * 4 + (_binary,) * 3 + (_where, _cast, _cast, _reduction, _reduction)
STEPS += (_view, _view, _matmul, _cat)


def make_program(seed: int) -> Program:
    """The program of ``seed`` (the same seed always gives the same program)."""
    rng = random.Random(seed)
    d = _Draft(rng)
    for _ in range(rng.randint(1, 2)):
        d.new_input(_random_shape(rng), rng.choice(INPUT_DTYPES))
    for _ in range(rng.randint(2, 10)):
        rng.choice(STEPS)(d)
    if len(d.values) == len(d.inputs):
        _unary(d)
    computed = [v for v in d.values if v.name.startswith("v")] or d.values
    outputs = [computed[-1], *rng.sample(computed[:-1], min(len(computed) - 1, rng.randint(0, 2)))]
    signature = ", ".join(spec.name for spec in d.inputs)
    returned = ", ".join(v.name for v in outputs)
    source = f"def program({signature}):\n" + "\n".join(d.lines) + f"\n    return ({returned},)\n"
    floats = tuple(sorted(d.float_dtypes, key=str))
    names = tuple(v.name for v in d.values)
    return Program(seed, source, tuple(d.inputs), d.longest, floats, names)


def _errors(value: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``|value - reference|`` in float64: 0 where both are NaN or equal (infinities too)."""
    value, reference = value.double(), reference.double()
    same = (value == reference) | (value.isnan() & reference.isnan())
    return torch.where(same, 0.0, (value - reference).abs().nan_to_num(nan=math.inf))


def compare_outputs(
    program: Program, eager: Any, compiled: Any, inputs: list[torch.Tensor]
) -> None:
    """Assert ``compiled`` matches ``eager`` as the module docstring says."""
    assert isinstance(compiled, tuple) and len(compiled) == len(eager), type(compiled)
    wide_inputs = [t.double() if t.dtype in FLOATS else t for t in inputs]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # int / int is float64 in the reference too
    try:
        reference = program.function(float64=True)(*wide_inputs)
        every = program.function(float64=True, every_value=True)(*wide_inputs)
    finally:
        torch.set_default_dtype(default)
    finite = [v.double().abs()[v.isfinite()] for v in every if v.dtype in FLOATS and v.numel()]
    magnitude = max((float(v.max()) for v in finite if v.numel()), default=0.0)
    eps = max((torch.finfo(d).eps for d in program.float_dtypes), default=0.0)
    eps = max(eps, torch.finfo(torch.float32).eps) if program.float_dtypes else eps
    slack = 8 * eps * math.sqrt(program.longest_reduction) * magnitude
    for position, (got, want, ref) in enumerate(zip(compiled, eager, reference, strict=True)):
        what = f"output {position}"
        assert got.shape == want.shape and got.dtype == want.dtype, (
            f"{what}: compiled {got.dtype}{list(got.shape)}, eager {want.dtype}{list(want.shape)}"
        )
        if not want.is_floating_point():
            bad = got != want
        else:
            exact = _errors(got, want) == 0
            ours, eagers = _errors(got, ref), _errors(want, ref)
            ulp = eps * ref.double().abs().nan_to_num(posinf=0.0, neginf=0.0)
            within = ours <= 3 * eagers + 4 * ulp + slack + 1e-6
            bad = ~(exact | within)
        if bad.any():
            at = tuple(int(i) for i in torch.nonzero(bad)[0])
            raise AssertionError(
                f"{what}: {int(bad.sum())} of {bad.numel()} elements differ; first at {at}: "
                f"compiled {got[at].item()!r}, eager {want[at].item()!r}, "
                f"float64 {ref[at].item()!r}"
            )


def compile_program(program: Program, codegen: str, cache_dir: str | None = None) -> Callable:
    """``program`` compiled with ``codegen``, whole (a graph break raises)."""
    import torchstrata.runtime as tsr

    options = {"cache_dir": cache_dir} if cache_dir else None
    return tsr.compile(program.function(), codegen=codegen, fullgraph=True, options=options)


def check_program(program: Program, codegen: str, cache_dir: str | None = None) -> None:
    """Run ``program`` eagerly and compiled; raise AssertionError (with the source and a
    replay command) where they differ."""
    inputs = program.make_inputs()
    eager = program.function()(*inputs)
    try:
        compiled = compile_program(program, codegen, cache_dir)(*[t.clone() for t in inputs])
        compare_outputs(program, eager, compiled, inputs)
    except Exception as error:
        raise AssertionError(
            f"{type(error).__name__}: {error}\n{program.source}"
            f"replay: python -m integration_tests.fuzz.programs --seed {program.seed} "
            f"--codegen {codegen}"
        ) from error


def main(argv: list[str] | None = None) -> None:
    """Replay one program; on a mismatch, name the first wrong stage and shrink the graph."""
    parser = argparse.ArgumentParser(description="Replay one fuzzed program.")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--codegen", default="cpp", choices=("cpp", "triton"))
    args = parser.parse_args(argv)
    from torchstrata.core import CompileOptions, first_failure, minify, walk_function

    program = make_program(args.seed)
    print(program.source)
    try:
        check_program(program, args.codegen)
    except AssertionError as error:
        print(f"MISMATCH: {error}")
    else:
        print("eager and compiled agree")
        return
    options = CompileOptions(codegen=args.codegen)
    checks, graph, inputs = walk_function(program.function(), program.make_inputs(), options)
    failure = first_failure(checks)
    print("stages:", ", ".join(f"{c.stage} {'ok' if c.ok else 'WRONG'}" for c in checks))
    if failure is None or graph is None:
        print("the reference interpreter agrees with eager at every stage")
        return
    if failure.stage == "capture":
        print(f"capture: {failure.problem}")
        return
    print(minify(graph, inputs, options))


if __name__ == "__main__":
    main()
