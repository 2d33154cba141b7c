"""torchstrata.autograd: torch-level graphs to functional ATen forward and backward graphs."""

from torchstrata.autograd.aot import aot, aot_forward, aot_from_trace
from torchstrata.autograd.partition import Partition, choose_saved, is_recomputable, partition
from torchstrata.autograd.recorder import AotTraceError, AtenRecorder
from torchstrata.autograd.saved import (
    SavedActivationReport,
    compiled_saved_bytes,
    eager_saved_bytes,
    saved_activation_report,
)
from torchstrata.autograd.symbolic import aot_symbolic, concretize_aot, concretize_trace
from torchstrata.autograd.trace import JointTrace, OutputAlias, trace_graph, trace_symbolic

__all__ = [
    "AotTraceError",
    "AtenRecorder",
    "JointTrace",
    "OutputAlias",
    "Partition",
    "SavedActivationReport",
    "aot",
    "aot_forward",
    "aot_from_trace",
    "aot_symbolic",
    "choose_saved",
    "compiled_saved_bytes",
    "concretize_aot",
    "concretize_trace",
    "eager_saved_bytes",
    "is_recomputable",
    "partition",
    "saved_activation_report",
    "trace_graph",
    "trace_symbolic",
]
