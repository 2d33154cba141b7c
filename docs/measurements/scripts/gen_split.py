"""Write our split-row softmax sources (rows of 262144 and 65536, bf16) for exp_split.py.

Run here (CPU) from the repository root: python docs/measurements/scripts/gen_split.py
"""

import sys

sys.path.insert(0, "docs/measurements/scripts")
sys.path.insert(0, "packages/inductor/tests")
from gen_k3 import kernel_for  # noqa: E402

from torchstrata.inductor.triton_split import generate_split_triton  # noqa: E402

for n, rows in ((262144, 256), (65536, 1024)):
    for chunk in (8192, 16384):
        split = n // chunk
        source = generate_split_triton(kernel_for(rows, n), split, chunk)
        open(f".gpu/split_{n}_{chunk}.py", "w").write(source)
