"""The built-in table and the extern policy."""

from __future__ import annotations

from torchstrata.decomp.rules import (
    ELEMENTWISE_RULES,
    NORMALIZATION_RULES,
    REDUCTION_RULES,
    VIEW_RULES,
)
from torchstrata.decomp.table import RuleTable

#: Every built-in rule.
DEFAULT_RULES: RuleTable = ELEMENTWISE_RULES + REDUCTION_RULES + NORMALIZATION_RULES + VIEW_RULES

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
