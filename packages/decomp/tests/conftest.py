"""Shared helpers (the ``dh`` fixture): build one-op ATen graphs, decompose, compare."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from torchstrata.core import (
    Graph,
    GraphBuilder,
    InterpreterError,
    Level,
    OpKind,
    TensorMeta,
    aten,
    interpret,
    random_inputs,
    verify,
)
from torchstrata.decomp import decompose_with_stats


class DecompHelpers:
    """Graph-building and checking helpers handed to tests by the ``dh`` fixture."""

    @staticmethod
    def T(
        *shape: int, dtype: torch.dtype = torch.float32, strides: tuple[int, ...] | None = None
    ) -> TensorMeta:
        """A graph-input placeholder for :func:`one_op`."""
        return TensorMeta(shape, dtype, strides=strides)

    @staticmethod
    def transposed(rows: int, cols: int, dtype: torch.dtype = torch.float32) -> TensorMeta:
        """A non-contiguous [rows, cols] input (the transpose of a contiguous [cols, rows])."""
        return TensorMeta((rows, cols), dtype, strides=(1, rows))

    @staticmethod
    def one_op(op: str, *args: Any, outputs: int | None = None, **kwargs: Any) -> Graph:
        """An ATen graph calling ``op`` once; every ``TensorMeta`` argument becomes an input.

        ``outputs=n`` reads the first ``n`` results of a multi-output op.
        """
        builder = GraphBuilder(Level.ATEN)
        names = iter("xyzwuv")

        def place(value: Any) -> Any:
            if isinstance(value, TensorMeta):
                return builder.input(next(names), value)
            if isinstance(value, list):
                return [place(v) for v in value]
            return value

        node = builder.call(
            aten(op), *[place(a) for a in args], **{k: place(v) for k, v in kwargs.items()}
        )
        results = [builder.getitem(node, i) for i in range(outputs)] if outputs else [node]
        return builder.build(results)

    @staticmethod
    def check(
        graph: Graph,
        *,
        seeds: tuple[int, ...] = (0, 1),
        prepare: Callable[[list[torch.Tensor]], None] | None = None,
        allow_extern: bool = False,
    ) -> Graph:
        """Decompose ``graph``, verify it, and compare it to the ATen graph on random inputs."""
        prims, stats = decompose_with_stats(graph)
        verify(prims)
        if not allow_extern:
            assert not stats.extern, f"kept extern: {dict(stats.extern)}\n{prims}"
            assert all(op.kind in (OpKind.PRIMS, OpKind.BUILTIN) for op in prims.ops()), str(prims)
        for seed in seeds:
            inputs = random_inputs(graph, seed=seed)
            if prepare is not None:
                prepare(inputs)
            expected = interpret(graph, *inputs)
            actual = interpret(prims, *inputs)
            reference = DecompHelpers.float64_reference(graph, inputs)
            for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
                ref = reference[index] if reference is not None else None
                DecompHelpers.assert_close(got, want, ref, str(prims))
        return prims

    @staticmethod
    def assert_close(
        actual: torch.Tensor, expected: torch.Tensor, reference: torch.Tensor | None, what: str
    ) -> None:
        """Same dtype and shape; values close to eager's, or (float16/bfloat16 with a float64
        ``reference``) elements that differ from eager at most 3x as wrong as eager's."""
        assert actual.dtype == expected.dtype, f"{actual.dtype} != {expected.dtype}\n{what}"
        assert actual.shape == expected.shape, f"{actual.shape} != {expected.shape}\n{what}"
        if reference is None or expected.dtype not in (torch.float16, torch.bfloat16):
            torch.testing.assert_close(
                actual, expected, equal_nan=True, msg=lambda m: f"{m}\n{what}"
            )
            return
        same = (actual == expected) | (actual.isnan() & expected.isnan())
        if bool(same.all()):
            return
        # Element by element: one element far off fails however accurate the others are.
        ours = _errors(actual, reference)
        eagers = _errors(expected, reference)
        ulp = torch.finfo(expected.dtype).eps * reference.double().abs().nan_to_num(posinf=0.0)
        bad = ~same & (ours > 3 * eagers + ulp + 1e-5)
        if bool(bad.any()):
            at = tuple(int(i) for i in torch.nonzero(bad)[0])
            raise AssertionError(
                f"{int(bad.sum())} elements further from float64 than eager; first at {at}: "
                f"{actual[at].item()!r}, eager {expected[at].item()!r}, "
                f"float64 {reference[at].item()!r}\n{what}"
            )

    @staticmethod
    def float64_reference(graph: Graph, inputs: list[torch.Tensor]) -> list[torch.Tensor] | None:
        """The ATen graph run with low-precision float inputs in float64 (None if it fails)."""
        if not any(t.dtype in (torch.float16, torch.bfloat16) for t in inputs):
            return None
        wide = [t.double() if t.dtype in (torch.float16, torch.bfloat16) else t for t in inputs]
        try:
            return list(interpret(graph, *wide))
        except InterpreterError:
            return None

    @staticmethod
    def nonzero(inputs: list[torch.Tensor]) -> None:
        """Replace zeros in every input but the first (integer divisors) by one."""
        for tensor in inputs[1:]:
            tensor.masked_fill_(tensor == 0, 1)


def _errors(value: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``|value - reference|`` per element in float64: 0 where both are NaN or equal,
    infinite where only one is NaN."""
    value, reference = value.double(), reference.double()
    same = (value == reference) | (value.isnan() & reference.isnan())
    return torch.where(same, 0.0, (value - reference).abs().nan_to_num(nan=float("inf")))


@pytest.fixture
def dh() -> type[DecompHelpers]:
    """The decomp test helpers."""
    return DecompHelpers
