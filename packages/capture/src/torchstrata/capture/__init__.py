"""torchstrata.capture: Python bytecode (3.11 and 3.12) to torch-level graphs and guards."""

from torchstrata.capture.api import capture
from torchstrata.capture.frame import SUPPORTED_OPCODES
from torchstrata.capture.program import OutputSpec, frame_locals

__all__ = ["SUPPORTED_OPCODES", "OutputSpec", "capture", "frame_locals"]
