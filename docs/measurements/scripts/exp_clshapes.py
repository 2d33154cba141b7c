"""Session 11: more cluster shapes for long softmax rows than the tuner offers
(triton_tuning.CLUSTER_SHAPES patched, then tune_report.py's listing of every candidate)."""
import os
import runpy
import sys

from torchstrata.inductor import triton_tuning as tt

tt.CLUSTER_SHAPES = (
    (16, 4096, 4), (16, 8192, 4), (16, 8192, 8), (16, 16384, 8), (16, 16384, 16),
    (8, 8192, 8), (8, 8192, 16), (8, 16384, 16), (8, 16384, 32), (8, 32768, 32),
    (4, 8192, 16), (4, 16384, 16), (4, 16384, 32), (4, 32768, 32),
    (2, 16384, 16), (2, 16384, 32), (2, 32768, 32),
)
os.environ.setdefault("TUNE_TOP", "14")
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune_report.py"),
               run_name="__main__")
