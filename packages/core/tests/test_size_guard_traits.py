"""A symbolic entry's guards (decision 0295): each symbolic tensor's own guard checks its
exact type, dtype, device, ``requires_grad`` and lazy bits (a :class:`TensorTraits`), as a
static tensor guard does; the size check's remembered answers are keyed by sizes and
strides alone, so an answer about another dtype is never remembered for a layout."""

from __future__ import annotations

import torch

from torchstrata.core import (
    GUARD_NAMESPACE,
    Guard,
    GuardKind,
    SizeCheck,
    SymbolicSizes,
    TensorTraits,
    guard_condition,
    input_meta,
    size_guards,
    symbolic_scope,
)


def _guards(x: torch.Tensor) -> tuple[Guard, ...]:
    sizes = SymbolicSizes({"L['x']": [0]})
    with symbolic_scope(sizes):
        meta = input_meta("L['x']", x)
    return size_guards((Guard(GuardKind.TENSOR_MATCH, "L['x']", meta),), sizes)


def _holds(guard: Guard, value: object) -> bool:
    constants: dict[str, object] = {}

    def constant(obj: object) -> str:
        constants[f"_c{len(constants)}"] = obj
        return f"_c{len(constants) - 1}"

    condition = guard_condition(guard, "v", constant)
    return bool(eval(condition, {**GUARD_NAMESPACE, **constants, "v": value}))


def test_a_symbolic_tensor_guard_checks_all_but_sizes_and_strides():
    tensor_guard, size_guard = _guards(torch.randn(6, 8))
    assert tensor_guard.expected == TensorTraits(torch.float32, torch.device("cpu"), False)
    assert str(tensor_guard.expected) == "torch.float32 on cpu, any sizes"
    assert _holds(tensor_guard, torch.randn(9, 8))  # another size: the size check's
    assert _holds(tensor_guard, torch.randn(8, 6).t())  # another stride: the same
    for other in (
        torch.randn(6, 8, dtype=torch.float64),
        torch.randn(6, 8, requires_grad=True),
        torch._neg_view(torch.randn(6, 8)),
        torch.randn(6, 8).as_subclass(type("Tagged", (torch.Tensor,), {})),
        "not a tensor",
    ):
        assert not _holds(tensor_guard, other)
    check = next(cell.cell_contents for _, cell in size_guard.cells)
    assert isinstance(check, SizeCheck)
    assert check.key_expression(["t"]) == "(t.shape, t.stride(), )"


def test_an_answer_on_dtype_is_never_remembered_for_a_layout():
    _, size_guard = _guards(torch.randn(6, 8))
    check = next(
        c.cell_contents for _, c in size_guard.cells if isinstance(c.cell_contents, SizeCheck)
    )
    assert not check.decide(torch.randn(7, 8, dtype=torch.float64))
    assert check.last_failure == "L['x'].dtype is torch.float64, expected torch.float32"
    assert not check.known  # the key (sizes and strides) would hide the dtype
    assert check.decide(torch.randn(7, 8))
    assert list(check.known.values()) == [True]
    assert not check.decide(torch.randn(8, 7).t())  # a stride the trace did not make
    assert "stride()" in check.last_failure and len(check.known) == 2


def test_traits_name_what_differs():
    traits = TensorTraits(torch.float32, "cpu")
    assert traits.mismatch("L['x']", torch.randn(3)) == ""
    assert traits.mismatch("L['x']", torch.randn(3, dtype=torch.float16)) == (
        "L['x'].dtype is torch.float16, expected torch.float32"
    )
    assert traits.mismatch("L['x']", torch.randn(3, requires_grad=True)) == (
        "L['x'].requires_grad is True, expected False"
    )
