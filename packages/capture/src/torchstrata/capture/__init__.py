"""torchstrata.capture: Python bytecode (3.11, 3.12, 3.13) to torch-level graphs and guards."""

from torchstrata.capture.api import capture
from torchstrata.capture.breakpoints import graph_break
from torchstrata.capture.concrete import RUNNABLE_OPCODES
from torchstrata.capture.frame import SUPPORTED_OPCODES
from torchstrata.capture.guard_check import guard_failure
from torchstrata.capture.program import CaptureProgram, frame_locals

__all__ = [
    "RUNNABLE_OPCODES",
    "SUPPORTED_OPCODES",
    "CaptureProgram",
    "capture",
    "frame_locals",
    "graph_break",
    "guard_failure",
]
