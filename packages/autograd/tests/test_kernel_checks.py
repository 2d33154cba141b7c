"""The trace asks ATen's kernels the checks that meta and fake kernels skip."""

from __future__ import annotations

import pytest
import torch

from torchstrata.autograd import kernel_checks
from torchstrata.autograd.kernel_checks import check_like_eager_kernels

aten = torch.ops.aten
CPU = torch.device("cpu")
#: A trace on meta tensors that stand for no device
META = torch.device("meta")


def test_dtype_errors_are_asked_for_cpu_traces_only() -> None:
    mask = torch.ones(3, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        check_like_eager_kernels(aten.clamp.default, (mask, True), {}, device=CPU)
    check_like_eager_kernels(aten.clamp.default, (mask, True), {}, device=META)


def test_the_dtype_answer_is_kept_per_op_and_dtypes(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    probe = kernel_checks._probe_error

    def counting(*args, **kwargs):
        asked.append(args[0])
        return probe(*args, **kwargs)

    monkeypatch.setattr(kernel_checks, "_probe_error", counting)
    monkeypatch.setattr(kernel_checks, "_DTYPE_ANSWERS", {})
    x = torch.ones(4, 5, dtype=torch.float16)
    for _ in range(3):
        check_like_eager_kernels(aten.relu.default, (x,), {}, device=CPU)
    check_like_eager_kernels(aten.relu.default, (x.float(),), {}, device=CPU)
    assert asked == [aten.relu.default, aten.relu.default]


@pytest.mark.parametrize(
    ("func", "args", "kwargs", "message"),
    [
        (aten.fill_.Scalar, (torch.ones(5, dtype=torch.bfloat16), 1e39), {}, "without overflow"),
        (aten.clamp.default, (torch.ones(5, dtype=torch.float16), None, 7e4), {}, "overflow"),
        (aten.full.default, ([64, 64], 300), {"dtype": torch.uint8}, "without overflow"),
        (aten.pow.Tensor_Scalar, (torch.ones(5, dtype=torch.int32), -2), {}, "negative integer"),
        (
            aten.div.Tensor_mode,
            (torch.ones(5, dtype=torch.int8), 0),
            {"rounding_mode": "floor"},
            "ZeroDivision",
        ),
    ],
)
def test_scalars_the_cpu_kernel_refuses_raise(func, args, kwargs, message) -> None:
    with pytest.raises(RuntimeError, match=message):
        check_like_eager_kernels(func, args, kwargs, device=META)


@pytest.mark.parametrize(
    ("func", "args"),
    [
        (aten.fill_.Scalar, (torch.ones(1, dtype=torch.bfloat16), 1e39)),  # one element: unchecked
        (aten.add.Tensor, (torch.ones(5, dtype=torch.bfloat16), 1e39)),
        (aten.clamp.default, (torch.ones(5, dtype=torch.float16), None, 6e4)),
        (aten.pow.Tensor_Scalar, (torch.ones(5, dtype=torch.float32), -2)),
        (aten.div.Tensor_mode, (torch.ones(5, dtype=torch.int8), 3)),
    ],
)
def test_scalars_the_cpu_kernel_takes_pass(func, args) -> None:
    check_like_eager_kernels(func, args, {}, device=CPU)


def test_random_ops_are_never_repeated() -> None:
    # A probe of a random op would draw from the user's generator.
    state = torch.get_rng_state()
    x = torch.ones(4, dtype=torch.float16)
    check_like_eager_kernels(aten.bernoulli.p, (x, 0.5), {}, device=CPU)
    check_like_eager_kernels(aten.normal.float_float, (0.0, 1e39, [4]), {}, device=CPU)
    assert torch.equal(torch.get_rng_state(), state)


def test_a_factorys_size_is_cut_before_the_probe() -> None:
    # full((1 << 20, 1 << 20), 300, uint8) would allocate a terabyte; the probe makes
    # a 2 x 2 tensor and still raises eager's error.
    with pytest.raises(RuntimeError, match="without overflow"):
        check_like_eager_kernels(
            aten.full.default, ([1 << 20, 1 << 20], 300), {"dtype": torch.uint8}, device=CPU
        )


def test_a_meta_trace_asks_the_cpu_kernel_the_value_questions_only() -> None:
    mask = torch.ones(3, dtype=torch.bool)
    check_like_eager_kernels(aten.clamp.default, (mask, True), {}, device=META)
    with pytest.raises(RuntimeError, match="without overflow"):
        check_like_eager_kernels(
            aten.fill_.Scalar, (torch.ones(5, dtype=torch.float16), 1e39), {}, device=META
        )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_value_questions_are_asked_of_the_traces_device() -> None:
    # The CPU's scalar_tensor converts 1e39 to float16 unchecked; CUDA's may refuse it.
    # Whatever each device's kernel does, the check does the same for that device.
    for device in (CPU, torch.device("cuda")):
        kwargs = {"dtype": torch.float16, "device": device}
        try:
            aten.scalar_tensor.default(1e39, **kwargs)
        except RuntimeError as error:
            with pytest.raises(RuntimeError, match="without overflow"):
                check_like_eager_kernels(aten.scalar_tensor.default, (1e39,), kwargs, device=device)
            assert "without overflow" in str(error)
        else:
            check_like_eager_kernels(aten.scalar_tensor.default, (1e39,), kwargs, device=device)
