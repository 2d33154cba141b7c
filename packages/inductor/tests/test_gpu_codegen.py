"""GPU Triton source compiled ahead of time for sm_90 (no GPU needed): every variant the
autotuner may pick compiles, and bf16 rows are read and written with 128-bit accesses."""

from __future__ import annotations

import re

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.codegen.triton.generate import generate_triton
from torchstrata.inductor.codegen.triton.printer import supports
from torchstrata.inductor.codegen.triton.ptx import kernel_ptx
from torchstrata.inductor.codegen.triton.tuning import Config, candidate_configs
from torchstrata.inductor.ir.kernel import Kernel
from torchstrata.inductor.schedule.columns import is_column_reduction
from torchstrata.inductor.schedule.lowering import lower_graph
from torchstrata.inductor.schedule.plan import plan_graph

pytest.importorskip("triton")


def _kernel(graph) -> Kernel:
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=False))
    (kernel,) = [step for step in plan_graph(graph, lowered).steps if isinstance(step, Kernel)]
    return kernel


def _ptx(kernel: Kernel, config: Config, cache_dir: str, **flags: bool) -> str:
    return kernel_ptx(kernel, config, cache_dir=cache_dir, **flags)


def _softmax_bf16(ind, rows: int, length: int):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, length), torch.bfloat16))
    xf = b.call(prim("convert_element_type"), x, torch.float32)
    return b.build([b.call(prim("convert_element_type"), ind.softmax_last(b, xf), torch.bfloat16)])


@pytest.mark.parametrize("length", [16384, 40000, 65536])
def test_softmax_variants_compile_with_vector_accesses(ind, length, tmp_path):
    kernel = _kernel(_softmax_bf16(ind, 64, length))
    configs = candidate_configs(kernel, interpret=False, split_rows=True)
    assert any(not c.persistent for c in configs)
    assert any(c.persistent and c.split == 1 for c in configs) == (length <= 32768)
    assert any(c.split > 1 for c in configs)  # rows of 16384 and more: also split ones
    assert any(c.group for c in configs) == (length > 8192)  # online pairs when looped
    # rows of 65536 and more: also larger and software-pipelined tiles per row
    per_row = [c for c in configs if not c.group]
    assert any(c.num_stages > 1 for c in per_row) == (length >= 65536)
    assert any(c.rblock == 16384 and not c.persistent for c in per_row) == (length >= 65536)
    chosen = {
        configs[0],
        configs[-1],
        *(c for c in configs if c.group or c.split > 1 or c.num_stages > 1),
    }
    for config in chosen:
        ptx = _ptx(kernel, config, str(tmp_path))
        assert re.search(r"ld\.global(\.[\w:]+)*\.v4\.b32", ptx), config
        assert re.search(r"st\.global(\.\w+)*\.v4\.b32", ptx), config
        assert not re.search(r"ld\.global(\.[\w:]+)*\.b16", ptx), config


def _in_loops(ptx: str, instruction: str) -> int:
    """How often ``instruction`` occurs between a loop's label and its backward branch."""
    count = 0
    for match in re.finditer(r"^\$(L__BB\w+):", ptx, re.MULTILINE):
        back = re.search(rf"\bbra(\.uni)?\s+\${match.group(1)};", ptx[match.end() :])
        if back:
            count += ptx[match.end() : match.end() + back.start()].count(instruction)
    return count


def test_grouped_online_statistics_need_no_barrier_in_the_loop(ind, tmp_path):
    # Per row, every tile's max and sum cross the threads (shuffles, shared memory,
    # barriers); per group of 8 a thread's own vector is the group, so the loop has none.
    kernel = _kernel(_softmax_bf16(ind, 64, 65536))
    per_row = _ptx(kernel, Config(1, 4096, 8, False), str(tmp_path))
    grouped = _ptx(kernel, Config(1, 4096, 8, False, group=8), str(tmp_path))
    assert _in_loops(per_row, "bar.sync") >= 2 and _in_loops(per_row, "shfl.sync") >= 10
    assert _in_loops(grouped, "bar.sync") == _in_loops(grouped, "shfl.sync") == 0
    assert _in_loops(grouped, "ex2.approx") > 0  # the loop was found


@pytest.mark.parametrize("elements", [8, 300, 1024, 1 << 20])
def test_short_pointwise_tiles_take_fewer_warps(elements):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((elements,), torch.float32))
    kernel = _kernel(b.build([b.call(prim("mul"), b.call(prim("add"), x, 1.0), 2.0)]))
    configs = candidate_configs(kernel, interpret=False)
    # at least 256 elements a warp (one warp at the least); large tiles keep 4 or 8
    assert all(c.num_warps * 256 <= max(c.xblock, 256) for c in configs)
    assert configs[0].num_warps == {8: 1, 300: 2, 1024: 4, 1 << 20: 4}[elements]
    assert max(c.num_warps for c in configs) == (8 if elements >= 2048 else configs[0].num_warps)


def test_short_rows_share_a_program(ind):
    kernel = _kernel(_softmax_bf16(ind, 4096, 128))
    assert all(c.persistent and c.xblock >= 8 for c in candidate_configs(kernel, False))


def test_column_sums_get_wide_row_tiles_and_vector_loads(tmp_path):
    # A weight-gradient-like sum over the rows of a [512, 4096] bf16 value: the loads are
    # contiguous along the kernel's rows, so tiles are wide in rows and the loads vectorise.
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((512, 4096), torch.bfloat16))
    xf = b.call(prim("convert_element_type"), x, torch.float32)
    kernel = _kernel(b.build([b.call(prim("sum"), xf, (0,))]))
    configs = candidate_configs(kernel, interpret=False)
    assert is_column_reduction(kernel, unanimous=True)
    assert all(not c.persistent and c.xblock >= 32 and c.rblock <= 32 for c in configs)
    ptx = _ptx(kernel, configs[0], str(tmp_path))
    assert re.search(r"ld\.global(\.\w+)*\.v[24]\.b32", ptx)


def test_row_sums_are_not_outer(ind):
    kernel = _kernel(_softmax_bf16(ind, 64, 1024))
    assert not is_column_reduction(kernel, unanimous=True)


def test_a_row_sum_without_row_loads_is_not_outer():
    # Cross-entropy's backward sums where(iota == target, g, 0) over the row: it loads only
    # the row's target; that is no reason for column tiles.
    b = GraphBuilder(Level.PRIMS)
    t = b.input("t", TensorMeta((64,), torch.int64))
    iota = b.call(prim("iota"), 1000, 0, 1, torch.int64, torch.device("cpu"))
    hit = b.call(
        prim("eq"),
        b.call(prim("broadcast_in_dim"), iota, (64, 1000), (1,)),
        b.call(prim("broadcast_in_dim"), t, (64, 1000), (0,)),
    )
    ones = b.call(prim("convert_element_type"), hit, torch.float32)
    kernel = _kernel(b.build([b.call(prim("sum"), ones, (1,))]))
    assert not is_column_reduction(kernel, unanimous=True)


def test_masks_vanish_when_every_block_divides_the_sizes(ind, tmp_path):
    kernel = _kernel(_softmax_bf16(ind, 64, 1024))
    config = Config(2, 1024, 4, True)
    even = generate_triton(kernel, interpret=False, persistent=True, even_rows=True, even_row=True)
    assert "xindex < xnumel" not in even and "rindex < rnumel" not in even
    odd = generate_triton(kernel, interpret=False, persistent=True)
    assert "xindex < xnumel" in odd and "rindex < rnumel" in odd
    ptx = _ptx(kernel, config, str(tmp_path), even_rows=True, even_row=True)
    assert not re.search(r"@%p\d+ ld\.global", ptx)  # unpredicated loads


def test_a_column_sum_with_a_per_row_statistic_is_outer():
    # RMSNorm's weight gradient, split in parts: sum over r of dy * x * rsqrt(ms[s, r])
    # over [16, 1024, 256]; the statistic is contiguous along r but is 1/256 of the data.
    b = GraphBuilder(Level.PRIMS)
    dy = b.input("dy", TensorMeta((16, 1024, 256), torch.float32))
    x = b.input("x", TensorMeta((16, 1024, 256), torch.float32))
    ms = b.input("ms", TensorMeta((16, 1024), torch.float32))
    scale = b.call(prim("broadcast_in_dim"), b.call(prim("rsqrt"), ms), (16, 1024, 256), (0, 1))
    body = b.call(prim("mul"), b.call(prim("mul"), dy, x), scale)
    kernel = _kernel(b.build([b.call(prim("sum"), body, (1,))]))
    assert kernel.row_shape == (16, 256) and is_column_reduction(kernel, unanimous=True)


def _sum_of_products(dtype: torch.dtype):
    """``a * b + c * d`` of 16-bit tensors as eager computes it: each op rounded."""
    b = GraphBuilder(Level.PRIMS)
    a, x, c, y = (b.input(name, TensorMeta((64, 128), dtype)) for name in "axcy")

    def wide(v):
        return b.call(prim("convert_element_type"), v, torch.float32)

    def narrow(v):
        return b.call(prim("convert_element_type"), v, dtype)

    first = narrow(b.call(prim("mul"), wide(a), wide(x)))
    second = narrow(b.call(prim("mul"), wide(c), wide(y)))
    return b.build([narrow(b.call(prim("add"), wide(first), wide(second)))])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_kernel_that_rounds_as_eager_is_compiled_without_contraction(dtype, tmp_path):
    """With contraction, LLVM narrows a rounded product to a 16-bit multiply and fuses it
    with the add into one 16-bit FMA: the product is never rounded where eager rounds it.
    The backend compiles such kernels without contraction: no FMA in their PTX."""
    kernel = _kernel(_sum_of_products(dtype))
    config = candidate_configs(kernel, interpret=False)[0]
    suffix = "bf16" if dtype is torch.bfloat16 else "f16"
    contracted = _ptx(kernel, config, str(tmp_path), fp_fusion=True)
    assert re.search(rf"\bfma\.rn\.{suffix}", contracted)  # what the default would do
    ptx = _ptx(kernel, config, str(tmp_path))
    assert not re.search(r"\bfma\.", ptx)
    assert re.search(rf"\bmul\.rn\.{suffix}|\bmul\.f32", ptx)


def test_a_float32_kernel_keeps_contraction(tmp_path):
    b = GraphBuilder(Level.PRIMS)
    x, y, z = (b.input(name, TensorMeta((64, 128), torch.float32)) for name in "xyz")
    kernel = _kernel(b.build([b.call(prim("add"), b.call(prim("mul"), x, y), z)]))
    config = candidate_configs(kernel, interpret=False)[0]
    assert re.search(r"\bfma\.rn\.f32", _ptx(kernel, config, str(tmp_path)))


class _ConstantsJit:
    """A jit function's stand-in recording the constants of each launch."""

    __name__ = "triton_fused_mul"
    arg_names = ("a", "XBLOCK", "RBLOCK")

    def __init__(self) -> None:
        self.launches: list[dict[str, object]] = []

    def __getitem__(self, grid):
        return lambda *args, **constants: self.launches.append(constants)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_backend_launches_rounding_kernels_without_contraction(dtype, tmp_path, monkeypatch):
    from torchstrata.core import CompileOptions, InductorOptions
    from torchstrata.inductor.codegen.triton import tuning
    from torchstrata.inductor.codegen.triton.backend import TritonBackend

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "no GPU: built only")
    kernel = _kernel(_sum_of_products(torch.bfloat16)) if dtype is torch.bfloat16 else None
    if kernel is None:
        b = GraphBuilder(Level.PRIMS)
        x, y = (b.input(name, TensorMeta((64, 128), dtype)) for name in "xy")
        kernel = _kernel(b.build([b.call(prim("mul"), x, y)]))
    inductor = InductorOptions(cluster_rows=False, direct_launch=False)
    options = CompileOptions(cache_dir=str(tmp_path / "cache"), inductor=inductor)
    built = TritonBackend(False, inductor).build(kernel, options).launch.handle
    assert built.fp_fusion is (dtype is torch.float32)
    jit = _ConstantsJit()
    stand_in = tuning.TunedKernel(
        {built.configs[0].variant: jit}, built.configs[:1], 64, None, True,
        direct_launch=False, fp_fusion=built.fp_fusion,
    )  # fmt: skip
    stand_in.bind(built.configs[0])(torch.zeros(1))
    (constants,) = jit.launches
    assert constants.get("enable_fp_fusion", True) is built.fp_fusion


@pytest.mark.parametrize("numel", [1000, 4100, 1024])
def test_a_masked_pointwise_kernel_keeps_vector_loads_with_its_size_an_argument(numel, tmp_path):
    # the mask compares with the xnumel argument; its divisor by 4 or 8 is spelled in
    # the source, else Triton loads one float at a time
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((numel,), torch.float32))
    kernel = _kernel(b.build([b.call(prim("mul"), b.call(prim("exp"), x), x)]))
    ptx = _ptx(kernel, Config(1024, 1, 4, True), str(tmp_path))
    assert re.search(r"ld\.global(\.\w+)*\.v4\.b32", ptx)


@pytest.mark.parametrize("shape", [(124, 4095), (12, 13, 33)])
def test_flat_indices_give_vector_loads_at_odd_shapes(shape, tmp_path):
    # decision 0521: over per-dim variables (x0 = xindex // 4095, x1 = xindex % 4095)
    # Triton cannot see that x's elements are contiguous and loads one float at a time;
    # at ``xindex`` it loads four (element counts divisible by 4: the mask allows it)
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, torch.float32))
    w = b.input("w", TensorMeta(shape[1:], torch.float32))
    wide = b.call(prim("broadcast_in_dim"), w, shape, tuple(range(1, len(shape))))
    kernel = _kernel(b.build([b.call(prim("mul"), b.call(prim("exp"), x), wide)]))
    config = Config(1024, 1, 4, True)
    vector = r"ld\.global(\.\w+)*\.v4\.b32"
    flat = _ptx(kernel, config, str(tmp_path / "flat"))
    per_dim = _ptx(kernel, config, str(tmp_path / "per_dim"), flat_indices=False)
    assert re.search(vector, flat)
    assert not re.search(vector, per_dim)
