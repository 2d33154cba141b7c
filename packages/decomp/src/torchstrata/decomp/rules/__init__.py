"""The built-in rule tables, one module per family."""

from torchstrata.decomp.rules.activations import RULES as ACTIVATION_RULES
from torchstrata.decomp.rules.batch_norm import RULES as BATCH_NORM_RULES
from torchstrata.decomp.rules.creation import RULES as CREATION_RULES
from torchstrata.decomp.rules.elementwise import RULES as ELEMENTWISE_RULES
from torchstrata.decomp.rules.indexing import RULES as INDEXING_RULES
from torchstrata.decomp.rules.losses import RULES as LOSS_RULES
from torchstrata.decomp.rules.math import RULES as MATH_RULES
from torchstrata.decomp.rules.norm_backward import RULES as NORM_BACKWARD_RULES
from torchstrata.decomp.rules.normalization import RULES as NORMALIZATION_RULES
from torchstrata.decomp.rules.norms import RULES as NORM_RULES
from torchstrata.decomp.rules.padding import RULES as PADDING_RULES
from torchstrata.decomp.rules.pooling import RULES as POOLING_RULES
from torchstrata.decomp.rules.pooling_backward import RULES as POOLING_BACKWARD_RULES
from torchstrata.decomp.rules.reductions import RULES as REDUCTION_RULES
from torchstrata.decomp.rules.scatter_views import RULES as SCATTER_VIEW_RULES
from torchstrata.decomp.rules.selection import RULES as SELECTION_RULES
from torchstrata.decomp.rules.shapes import RULES as SHAPE_RULES
from torchstrata.decomp.rules.softmax_backward import RULES as SOFTMAX_BACKWARD_RULES
from torchstrata.decomp.rules.views import RULES as VIEW_RULES

__all__ = [
    "ACTIVATION_RULES",
    "BATCH_NORM_RULES",
    "CREATION_RULES",
    "ELEMENTWISE_RULES",
    "INDEXING_RULES",
    "LOSS_RULES",
    "MATH_RULES",
    "NORMALIZATION_RULES",
    "NORM_BACKWARD_RULES",
    "NORM_RULES",
    "PADDING_RULES",
    "POOLING_BACKWARD_RULES",
    "POOLING_RULES",
    "REDUCTION_RULES",
    "SCATTER_VIEW_RULES",
    "SELECTION_RULES",
    "SHAPE_RULES",
    "SOFTMAX_BACKWARD_RULES",
    "VIEW_RULES",
]
