"""K3 long rows: every autotuning candidate's time with more grouped-online tile shapes than
GROUPED_SHAPES (larger tiles, more warps, with and without Triton's pipelining)."""
import sys
from torchstrata.inductor import triton_tuning as tt
tt.GROUPED_SHAPES = tt.GROUPED_SHAPES + (
    (1, 16384, 16, 1), (1, 16384, 32, 1), (1, 32768, 16, 1), (1, 32768, 32, 1), (1, 8192, 16, 1), (1, 8192, 4, 1))
sys.argv = [sys.argv[0], "K3/N=65536;K3/N=262144;K7 F.ce [4096,128256]"]
exec(open(__file__.replace("exp_k3g.py", "tune_report.py")).read())
