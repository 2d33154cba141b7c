"""torchstrata.decomp: ATen graphs to prims graphs, through tables of rules."""

from torchstrata.decomp.context import (
    DecompContext,
    broadcast_shapes,
    canonical_dim,
    canonical_dims,
)
from torchstrata.decomp.defaults import DEFAULT_RULES, EXTERN_BY_POLICY, is_extern_by_policy
from torchstrata.decomp.driver import DecompStats, decompose, decompose_with_stats
from torchstrata.decomp.plugin import collect_rules
from torchstrata.decomp.promotion import (
    LOW_PRECISION,
    Promotion,
    computation_dtype,
    promoted_dtypes,
    result_type,
)
from torchstrata.decomp.table import (
    DuplicateRuleError,
    NotDecomposable,
    Rule,
    RuleTable,
    merge_tables,
    override,
)

__all__ = [
    "DEFAULT_RULES",
    "EXTERN_BY_POLICY",
    "LOW_PRECISION",
    "DecompContext",
    "DecompStats",
    "DuplicateRuleError",
    "NotDecomposable",
    "Promotion",
    "Rule",
    "RuleTable",
    "broadcast_shapes",
    "canonical_dim",
    "canonical_dims",
    "collect_rules",
    "computation_dtype",
    "decompose",
    "decompose_with_stats",
    "is_extern_by_policy",
    "merge_tables",
    "override",
    "promoted_dtypes",
    "result_type",
]
