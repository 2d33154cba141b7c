"""The built-in table and the extern policy."""

from __future__ import annotations

from torchstrata.decomp.rules import (
    ACTIVATION_RULES,
    BATCH_NORM_RULES,
    CREATION_RULES,
    ELEMENTWISE_RULES,
    INDEXING_RULES,
    LOSS_RULES,
    MATH_RULES,
    NORM_BACKWARD_RULES,
    NORM_RULES,
    NORMALIZATION_RULES,
    PADDING_RULES,
    POOLING_BACKWARD_RULES,
    POOLING_RULES,
    REDUCTION_RULES,
    SCATTER_VIEW_RULES,
    SELECTION_RULES,
    SHAPE_RULES,
    SOFTMAX_BACKWARD_RULES,
    VIEW_RULES,
)
from torchstrata.decomp.table import RuleTable, merge_tables

#: Every built-in rule.
DEFAULT_RULES: RuleTable = merge_tables(
    [
        ELEMENTWISE_RULES,
        MATH_RULES,
        ACTIVATION_RULES,
        REDUCTION_RULES,
        SELECTION_RULES,
        NORM_RULES,
        NORMALIZATION_RULES,
        SOFTMAX_BACKWARD_RULES,
        NORM_BACKWARD_RULES,
        BATCH_NORM_RULES,
        LOSS_RULES,
        INDEXING_RULES,
        SHAPE_RULES,
        PADDING_RULES,
        POOLING_RULES,
        POOLING_BACKWARD_RULES,
        SCATTER_VIEW_RULES,
        VIEW_RULES,
        CREATION_RULES,
    ]
)

#: ATen ops deliberately left to vendor libraries (no built-in rule; kept as extern
#: ATen nodes). Matched on the op packet, so every overload counts.
EXTERN_BY_POLICY = frozenset(
    {
        "aten.mm",
        "aten.addmm",
        "aten.bmm",
        "aten.baddbmm",
        "aten.matmul",
        "aten.linear",
        "aten.convolution",
        "aten._convolution",
        "aten.scaled_dot_product_attention",
        "aten._scaled_dot_product_flash_attention",
        "aten._scaled_dot_product_efficient_attention",
        "aten._scaled_dot_product_cudnn_attention",
        "aten._scaled_dot_product_flash_attention_for_cpu",
    }
)


def is_extern_by_policy(overload: str) -> bool:
    """True for ``aten.mm.default`` and the other matmul/convolution/attention ops."""
    return overload.rsplit(".", 1)[0] in EXTERN_BY_POLICY
