"""torchstrata.autograd: torch-level graphs to functional ATen graphs (inference for now)."""

from torchstrata.autograd.forward import TRAINING_NOT_SUPPORTED, aot_forward
from torchstrata.autograd.recorder import AotTraceError, AtenRecorder

__all__ = ["TRAINING_NOT_SUPPORTED", "AotTraceError", "AtenRecorder", "aot_forward"]
