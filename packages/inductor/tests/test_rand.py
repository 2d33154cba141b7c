"""``prims.rand`` generated in the kernel (the hash of ``core.prims_indexing.rand``):
bit for bit the reference's numbers on every backend, for any shape, offset, seed and
dtype, fused with its users (dropout's mask) instead of run as ATen ops."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, interpret, prim

CPU = torch.device("cpu")


def _rand_graph(shape, dtype=torch.float32, offset=0, tensor_seed=True):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(tuple(shape), torch.float32))
    seed = b.input("seed", TensorMeta((), torch.int64)) if tensor_seed else 1234567
    noise = b.call(prim("rand"), list(shape), seed, offset, dtype, CPU)
    return b.build(
        [noise, b.call(prim("add"), x, b.call(prim("convert_element_type"), noise, torch.float32))]
    )


def _inputs(shape, seed):
    return [torch.randn(shape), torch.tensor(seed, dtype=torch.int64)]


@pytest.mark.parametrize("shape", [(33, 17), (3, 1, 7), (5,), (), (0, 4)])
def test_rand_matches_the_reference_bit_for_bit(ind, codegen, shape):
    graph = _rand_graph(shape)
    compiled = ind.compile(graph, codegen)
    assert compiled.eager_ops == ()
    for seed in (0, 987654321, -5, 2**40 + 3):
        args = _inputs(shape, seed)
        for got, want in zip(compiled(*args), interpret(graph, *args), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_rand_in_each_float_dtype(ind, codegen, dtype):
    ind.check(_rand_graph((9, 11), dtype), codegen, inputs=_inputs((9, 11), 42), rtol=0, atol=0)


def test_rand_past_the_low_word_and_with_a_literal_seed(ind, codegen):
    """An offset near 2**32 makes the counter's high word change inside the tensor."""
    graph = _rand_graph((6, 10), offset=2**32 - 25, tensor_seed=False)
    compiled = ind.check(graph, codegen, inputs=[torch.randn(6, 10)], rtol=0, atol=0)
    assert compiled.eager_ops == ()


def test_dropout_mask_is_drawn_inside_the_kernel_that_uses_it(ind, codegen):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((64, 48), torch.float32))
    seed = b.input("seed", TensorMeta((), torch.int64))
    keep = b.call(prim("ge"), b.call(prim("rand"), [64, 48], seed, 0, torch.float32, CPU), 0.25)
    kept = b.call(prim("mul"), b.call(prim("convert_element_type"), keep, torch.float32), 4 / 3)
    graph = b.build([b.call(prim("mul"), x, kept), keep])
    compiled = ind.check(graph, codegen, inputs=_inputs((64, 48), 7), rtol=0, atol=0)
    assert len(compiled.kernels) == 1 and "prims.rand" in compiled.kernels[0].ops
    mask = compiled(*_inputs((64, 48), 7))[1]
    assert 0.2 < 1 - mask.float().mean().item() < 0.3  # about a quarter dropped


def test_rand_kernel_compiles_for_sm90(tmp_path):
    """The Triton helper goes through Triton's compiler to PTX for an H200 (no GPU needed):
    the uint32 hash is 32-bit multiplies and shifts, no 64-bit multiply."""
    pytest.importorskip("triton")
    from torchstrata.inductor.codegen.triton.printer import supports
    from torchstrata.inductor.codegen.triton.ptx import kernel_ptx
    from torchstrata.inductor.codegen.triton.tuning import candidate_configs
    from torchstrata.inductor.schedule.lowering import lower_graph
    from torchstrata.inductor.schedule.plan import plan_graph

    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4096, 1024), torch.bfloat16))
    seed = b.input("seed", TensorMeta((), torch.int64))
    noise = b.call(prim("rand"), [4096, 1024], seed, 0, torch.float32, CPU)
    keep = b.call(prim("convert_element_type"), b.call(prim("ge"), noise, 0.1), torch.bfloat16)
    graph = b.build([b.call(prim("mul"), x, keep)])
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=False))
    (kernel,) = plan_graph(graph, lowered).steps
    config = candidate_configs(kernel, interpret=False, split_rows=True)[0]
    ptx = kernel_ptx(kernel, config, cache_dir=str(tmp_path))
    assert ".entry" in ptx and "shr.u32" in ptx  # logical shifts of 32-bit words
    assert "mul.lo.s32" in ptx and "mul.lo.s64" not in ptx  # the hash's multiplies: 32-bit
