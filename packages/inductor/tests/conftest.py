"""Shared helpers (the ``ind`` fixture): build prims graphs, compile them, check against the oracle."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import torch

from torchstrata.core import (
    CompiledGraph,
    CompileOptions,
    Graph,
    GraphBuilder,
    InductorOptions,
    Level,
    Node,
    TensorMeta,
    Transformer,
    interpret,
    prim,
    random_inputs,
)
from torchstrata.inductor import compile_graph
from torchstrata.inductor.codegen.cpp.build import COMPILER_FLAGS, find_compiler
from torchstrata.inductor.codegen.cpp.half import BF16_BLOCKS
from torchstrata.inductor.codegen.triton.printer import supports
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph

#: "cpp" and "triton" (its interpreter) run on the CPU; "cuda" is Triton on a GPU, when present.
BACKENDS = [
    "cpp",
    pytest.param("triton", marks=pytest.mark.triton),
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
        ],
    ),
]


class _ToDevice(Transformer):
    """The same graph with every tensor (and every device argument) on ``device``."""

    def __init__(self, graph: Graph, device: torch.device) -> None:
        super().__init__(graph)
        self.device = device

    def transform_input(self, node: Node) -> Node:
        return self.builder.input(node.name, attrs.evolve(node.tensor_meta, device=self.device))

    def transform_node(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node:
        assert node.op is not None
        args = tuple(self.device if isinstance(a, torch.device) else a for a in args)
        if "device" in kwargs:
            kwargs = {**kwargs, "device": self.device}
        moved = self.builder.call(node.op, *args, name=node.name, **kwargs)
        meta = node.meta
        if isinstance(meta, TensorMeta) and moved.tensor_meta.strides != meta.strides:
            moved = self.builder.relayout(moved, meta.strides)  # a relaid result stays so
        return moved


def to_device(graph: Graph, device: str) -> Graph:
    """``graph`` with its tensors on ``device`` (metadata re-inferred)."""
    return _ToDevice(graph, torch.device(device)).run() if device != "cpu" else graph


def same_layout_on(tensor: torch.Tensor, device: str) -> torch.Tensor:
    """``tensor`` copied to ``device`` with its strides and storage offset.

    ``tensor.to(device)`` makes a non-dense tensor contiguous, and a kernel compiled for
    the graph's strides would then read the wrong elements.
    """
    size = tensor.untyped_storage().nbytes() // tensor.element_size()
    # the whole storage, element by element: a layout with stride 0 (or any overlap)
    # cannot be the destination of a copy
    storage = tensor.as_strided((size,), (1,), 0).to(device)
    return storage.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())


def _on_device(compiled: CompiledGraph, device: str) -> CompiledGraph:
    """Takes CPU tensors, runs on ``device``, returns CPU tensors (tests stay device-blind)."""

    def fn(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        results = compiled.fn(*(same_layout_on(arg, device) for arg in args))
        torch.cuda.synchronize()
        return tuple(result.cpu() for result in results)

    return attrs.evolve(compiled, fn=fn)


def gelu(b: GraphBuilder, x: Node) -> Node:
    """0.5 * x * (1 + erf(x / sqrt(2))) in prims."""
    inner = b.call(prim("erf"), b.call(prim("mul"), x, 0.7071067811865476))
    return b.call(prim("mul"), b.call(prim("mul"), x, 0.5), b.call(prim("add"), inner, 1.0))


def softmax_last(b: GraphBuilder, x: Node) -> Node:
    """softmax over the last dim: amax, sub(broadcast), exp, sum, div."""
    shape = x.tensor_meta.shape
    keep = tuple(range(len(shape) - 1))
    last = (len(shape) - 1,)
    peak = b.call(prim("broadcast_in_dim"), b.call(prim("amax"), x, last), shape, keep)
    e = b.call(prim("exp"), b.call(prim("sub"), x, peak))
    total = b.call(prim("broadcast_in_dim"), b.call(prim("sum"), e, last), shape, keep)
    return b.call(prim("div"), e, total)


def demo_graph(
    m: int, n: int, dtype: torch.dtype = torch.float32, x_strides: Sequence[int] | None = None
) -> Graph:
    """The prims graph of ``torch.softmax(F.gelu(x + b), -1)``, x[m, n], b[n]."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((m, n), dtype, strides=x_strides))
    bias = b.input("b", TensorMeta((n,), dtype))
    added = b.call(prim("add"), x, b.call(prim("broadcast_in_dim"), bias, (m, n), (1,)))
    return b.build([softmax_last(b, gelu(b, added))])


def softmax_rows(rows: int, length: int, dtype: torch.dtype = torch.bfloat16) -> Graph:
    """Softmax over rows of ``dtype`` in float32, rounded back: K3's graph."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, length), dtype))
    xf = b.call(prim("convert_element_type"), x, torch.float32)
    return b.build([b.call(prim("convert_element_type"), softmax_last(b, xf), dtype)])


def layer_norm_rows(rows: int, n: int) -> Graph:
    """Mean, then the variance around it (two phases), the row's rstd stored too."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.float32))
    mean = b.call(prim("div"), b.call(prim("sum"), x, (1,)), float(n))
    centered = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), mean, (rows, n), (0,)))
    square = b.call(prim("mul"), centered, centered)
    var = b.call(prim("div"), b.call(prim("sum"), square, (1,)), float(n))
    rstd = b.call(prim("rsqrt"), b.call(prim("add"), var, 1e-5))
    out = b.call(prim("mul"), centered, b.call(prim("broadcast_in_dim"), rstd, (rows, n), (0,)))
    return b.build([out, rstd])


def logsumexp_rows(rows: int, n: int) -> Graph:
    """A row statistic only (cross-entropy's forward): no output along the row."""
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, n), torch.float32))
    peak = b.call(prim("amax"), x, (1,))
    shifted = b.call(prim("sub"), x, b.call(prim("broadcast_in_dim"), peak, (rows, n), (0,)))
    total = b.call(prim("sum"), b.call(prim("exp"), shifted), (1,))
    return b.build([b.call(prim("add"), b.call(prim("log"), total), peak)])


def only_kernel(graph: Graph) -> Kernel:
    """The one fused kernel of ``graph``'s plan for a GPU."""
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=False))
    (kernel,) = [step for step in plan_graph(graph, lowered).steps if isinstance(step, Kernel)]
    return kernel


_ROWS_BRANCH = re.compile(r"^(\s*)if \(rows\b.*\) \{$")


def serial_rows(source: str) -> str:
    """A C++ ``source`` whose row loops, held twice under ``if (rows ...)`` (parallel, else
    serial: decision 0355), are kept once, the serial copy: counts of loops or expressions
    in the text are then those of one row loop (the serial copy's closing brace stays)."""
    lines = source.splitlines()
    kept, number = [], 0
    while number < len(lines):
        found = _ROWS_BRANCH.match(lines[number])
        if found:
            number = lines.index(f"{found.group(1)}}} else {{", number) + 1
            continue
        kept.append(lines[number])
        number += 1
    return "\n".join(kept)


def kernel_code(source: str) -> str:
    """A C++ ``source`` without its prelude: from the function over a range of rows
    (decision 0359), where it has one, else from the kernel's function."""
    start = source.find("static void __attribute__((noinline, noclone))")
    return source[start if start >= 0 else source.rindex('extern "C" void') :]


def _compiled_out(lines: Sequence[str], command: Sequence[str]) -> set[int]:
    """1-based numbers of the lines that an ``#ifdef TS_AVX512BF16`` / ``#else`` /
    ``#endif`` of ``lines`` leaves out (decision 0526: which side depends on the build)."""
    probe = "#include <cstdint>\n" + BF16_BLOCKS + "\n#ifdef TS_AVX512BF16\nts_bf16_on\n#endif\n"
    text = subprocess.run(
        [*command, "-E", "-x", "c++", "-", "-o", "-"],
        input=probe,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    on = "ts_bf16_on" in text
    out, state = set(), None
    for number, line in enumerate(lines, 1):
        directive = line.strip()
        if directive == "#ifdef TS_AVX512BF16":
            state = "if"
        elif directive == "#else" and state == "if":
            state = "else"
        elif directive == "#endif" and state:
            state = None
        elif state == ("else" if on else "if"):
            out.add(number)
    return out


def _loop_body(lines: Sequence[str], start: int) -> str:
    """The text of the loop whose ``for`` line is ``lines[start]``, to its closing brace."""
    depth, end = 0, start
    for end in range(start, len(lines)):
        depth += lines[end].count("{") - lines[end].count("}")
        if depth <= 0 and end > start:
            break
    return "\n".join(lines[start : end + 1])


class InductorHelpers:
    """Compile-and-compare helpers handed to tests by the ``ind`` fixture."""

    gelu = staticmethod(gelu)
    softmax_last = staticmethod(softmax_last)
    serial_rows = staticmethod(serial_rows)
    kernel_code = staticmethod(kernel_code)
    demo_graph = staticmethod(demo_graph)
    softmax_rows = staticmethod(softmax_rows)
    layer_norm_rows = staticmethod(layer_norm_rows)
    logsumexp_rows = staticmethod(logsumexp_rows)
    only_kernel = staticmethod(only_kernel)

    def __init__(self, cache_dir: str) -> None:
        self.cache_dir = cache_dir

    @staticmethod
    def backend(codegen: str) -> str:
        """The backend name a kernel compiled for the ``codegen`` parameter reports."""
        return "triton" if codegen == "cuda" else codegen

    def compile(
        self, graph: Graph, codegen: str, inductor: InductorOptions | None = None
    ) -> CompiledGraph:
        """Compile ``graph`` with ``codegen`` (and ``inductor`` options, default ones if
        None); "cuda" compiles a CUDA copy of ``graph`` and wraps it to take and return
        CPU tensors."""
        options = CompileOptions(
            codegen=self.backend(codegen),
            cache_dir=self.cache_dir,
            inductor=inductor if inductor is not None else InductorOptions(),
        )
        if codegen != "cuda":
            return compile_graph(graph, "cpu", options)
        return _on_device(compile_graph(to_device(graph, "cuda"), "cuda", options), "cuda")

    @staticmethod
    def assert_simd_loops_vectorised(source: str, loading: bool = False) -> None:
        """GCC's ``-fopt-info`` report names every ``#pragma omp simd`` loop of the C++
        ``source`` vectorised (the test is skipped under another compiler); ``loading``:
        only those that load from a buffer (GCC turns a loop that zeroes or adds a lane
        array into other code, and does not report it)."""
        compiler = find_compiler()
        if "GCC" not in compiler.version and "g++" not in compiler.version:
            pytest.skip(f"-fopt-info is GCC's; the compiler is {compiler.version}")
        lines = source.splitlines()
        # 1-based number of each SIMD loop's `for` line; GCC names it or the body's first line
        loops = [n + 2 for n, line in enumerate(lines) if line.strip() == "#pragma omp simd"]
        if loading:
            loops = [loop for loop in loops if "buf_" in _loop_body(lines, loop - 1)]
        assert loops, "no SIMD loop"
        command = [*compiler.command, *COMPILER_FLAGS, "-fopt-info-vec-optimized"]
        report = subprocess.run(
            [*command, "-x", "c++", "-", "-o", "/dev/null"],
            input=source,
            capture_output=True,
            text=True,
            check=True,
        ).stderr
        pattern = r"^<stdin>:(\d+):\d+: optimized: loop vectorized"
        vectorised = {int(number) for number in re.findall(pattern, report, re.MULTILINE)}
        skipped = _compiled_out(lines, [*compiler.command, *COMPILER_FLAGS])
        missed = [
            loop for loop in loops if not {loop, loop + 1} & vectorised and loop not in skipped
        ]
        assert not missed, f"SIMD loops at lines {missed} not vectorised:\n{report}"

    def check(
        self,
        graph: Graph,
        codegen: str,
        *,
        seeds: Sequence[int] = (0,),
        inputs: Sequence[torch.Tensor] | None = None,
        inductor: InductorOptions | None = None,
        **tolerances: float,
    ) -> CompiledGraph:
        """Compile ``graph`` and compare it with the reference interpreter on random inputs."""
        compiled = self.compile(graph, codegen, inductor)
        for seed in seeds:
            args = list(inputs) if inputs is not None else random_inputs(graph, seed=seed)
            expected = interpret(graph, *args)
            actual = compiled(*args)
            assert isinstance(actual, tuple) and len(actual) == len(expected)
            for got, want in zip(actual, expected, strict=True):
                assert got.shape == want.shape and got.dtype == want.dtype
                torch.testing.assert_close(got, want, equal_nan=True, **tolerances)
        return compiled


@pytest.fixture
def ind(tmp_path_factory: pytest.TempPathFactory) -> InductorHelpers:
    """Helpers with a per-session kernel cache directory."""
    return InductorHelpers(str(tmp_path_factory.getbasetemp() / "kernel_cache"))


@pytest.fixture(params=BACKENDS)
def codegen(request: pytest.FixtureRequest) -> str:
    """Each backend in turn ("triton" runs under the interpreter, marked ``triton``)."""
    return request.param
