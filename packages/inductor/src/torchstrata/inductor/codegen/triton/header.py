"""The text every generated Triton module starts with: its imports and the helper
functions its kernels call (combine functions, bf16 rounding, the random-number hash,
Welford's combine, NaN-propagating extrema)."""

from __future__ import annotations

HEADER = """import triton
import triton.language as tl
from triton.language.standard import _elementwise_max, _elementwise_min, _sum_combine
{libdevice}

{extrema}

@triton.jit
def _ts_sum(a, b):
    return a + b


@triton.jit
def _ts_prod(a, b):
    return a * b


@triton.jit
def _ts_round_bf16(v):
    # float32 -> the nearest bfloat16 value (ties to even), still float32; the interpreter's
    # own conversion truncates.
    bits = v.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(v != v, v, bits.to(tl.float32, bitcast=True))


@triton.jit
def _ts_mix32(x):
    # lowbias32 on uint32 (prims.rand's hash, core.prims_indexing.rand)
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


@triton.jit
def _ts_rand_bits(seed, c, bits):
    # the top `bits` of prims.rand's hash of (seed, counter c), as int64
    high = _ts_mix32(((c >> 32) + 0x9E3779B9).to(tl.uint32))
    h = _ts_mix32(_ts_mix32(seed.to(tl.uint32)) ^ c.to(tl.uint32) ^ high)
    return h.to(tl.int64) >> (32 - bits)  # zero-extended: a logical shift


@triton.jit
def _ts_welford_combine(k_a, mean_a, m2_a, n_a, k_b, mean_b, m2_b, n_b):
    # two lanes' (shift, mean - shift, centred second moment, count) as one (Chan et al.)
    n = n_a + n_b
    delta = (k_b - k_a) + (mean_b - mean_a)
    frac = tl.where(n == 0, 0.0, n_b / tl.where(n == 0, 1.0, n))
    return k_a, mean_a + delta * frac, m2_a + m2_b + delta * delta * n_a * frac, n


@triton.jit
def _ts_nan_if_any(values, reduced, AXIS: tl.constexpr, KEEP: tl.constexpr):
    nans = tl.reduce(tl.where(values != values, 1, 0), AXIS, _sum_combine, keep_dims=KEEP)
    return tl.where(nans > 0, float("nan"), reduced)

"""

# NaN-propagating max/min: one max.NaN/min.NaN instruction on a GPU; a select under the
# interpreter (which has no such instruction to emulate).
_GPU_EXTREMA = """@triton.jit
def _ts_max(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _ts_min(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
"""
_INTERPRETER_EXTREMA = """@triton.jit
def _ts_max(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def _ts_min(a, b):
    return tl.where((a < b) | (a != a), a, b)
"""


def module_header(interpret: bool) -> str:
    """The imports and helpers of a generated module; ``interpret``: for Triton's
    interpreter (no libdevice; extrema that propagate NaN by ``where``)."""
    return HEADER.format(
        libdevice="" if interpret else "from triton.language.extra import libdevice",
        extrema=_INTERPRETER_EXTREMA if interpret else _GPU_EXTREMA,
    )
