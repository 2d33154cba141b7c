"""The built-in rule tables, one module per family."""

from torchstrata.decomp.rules.elementwise import RULES as ELEMENTWISE_RULES
from torchstrata.decomp.rules.normalization import RULES as NORMALIZATION_RULES
from torchstrata.decomp.rules.reductions import RULES as REDUCTION_RULES
from torchstrata.decomp.rules.views import RULES as VIEW_RULES

__all__ = ["ELEMENTWISE_RULES", "NORMALIZATION_RULES", "REDUCTION_RULES", "VIEW_RULES"]
