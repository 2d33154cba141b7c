"""Session 16: every autotune candidate of K3's long rows with more cluster shapes offered
(clusters of 2 and 4 walking 16384-element tiles with 16 or 32 warps, as the one-program
row kernel that wins at 65536 does). Run from the source tree: python3 exp_s16_clusters.py."""
import os, sys
sys.argv = [sys.argv[0], "K3/N=65536;K3/N=262144"]
os.environ.setdefault("TUNE_TOP", "14")
from torchstrata.inductor import triton_tuning as tt
tt.CLUSTER_SHAPES = (
    (8, 8192, 16), (16, 8192, 8), (8, 8192, 8),
    (2, 16384, 32), (2, 16384, 16), (2, 32768, 32),
    (4, 16384, 32), (4, 16384, 16), (4, 8192, 16), (4, 8192, 32),
    (8, 16384, 32), (8, 16384, 16), (16, 16384, 16),
)
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune_report.py")).read())
