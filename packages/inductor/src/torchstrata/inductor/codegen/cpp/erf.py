"""``erf`` of a float in generated C++: an inline rational function, so that ``omp simd``
loops (GELU forward and backward) vectorise it without calling libmvec (decision 0291).

libmvec's ``_ZGVeN16v_erff`` cost about 1.5x torch.compile's ``at::vec`` erf in a GELU
kernel of a GPT layer. :data:`ERF_PRELUDE` is Eigen's float ``erf`` (the one XLA also
emits): the operand clamped to ``[-4, 4]`` (``erf`` is 1 in float beyond), then
``x * P(x^2) / Q(x^2)``, degrees 6 and 4 in ``x^2``; the result clamped to ``[-1, 1]``
(unclamped it reaches 1 + 4e-7). Against ``erf`` in float64: at most 4.5e-7 absolute and
relative error (glibc's ``erff``: 6e-8); relative, because the odd numerator keeps ``x``
as a factor, unlike ``at::vec``'s Abramowitz-Stegun polynomial, whose relative error
near 0 is about 1e-3. The clamps are conditionals that keep a NaN operand (a comparison
with NaN is false), one ``vmaxps``/``vminps`` each: NaN stays NaN, +-inf give +-1, -0
gives -0. ``ts_min``/``ts_max`` (a NaN test, a compare and a blend each) gave the same bits
on all 2**32 floats and cost fp16 GELU at [3001, 4133] 5.1 ms against 3.7 (decision
0518). ``double`` keeps ``std::erf``.
"""

from __future__ import annotations

#: The name kernels call; defined after the prelude in the kernels that call it.
ERF_FUNCTION = "ts_erf_f32"

ERF_PRELUDE = r"""
// erf of a float, inline so that omp simd loops vectorise it (codegen/cpp/erf.py):
// Eigen's rational function x P(x^2) / Q(x^2) on [-4, 4], clamped to [-1, 1].
static inline float ts_erf_f32(float v) {
  const float low = v < -4.0f ? -4.0f : v;
  const float x = low > 4.0f ? 4.0f : low;
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  const float y = x * p / q;
  const float y_low = y < -1.0f ? -1.0f : y;
  return y_low > 1.0f ? 1.0f : y_low;
}
"""


def erf_call(argument: str, ctype: str) -> str:
    """``erf(argument)`` computed in ``ctype``: :data:`ERF_FUNCTION` for floats, the
    library's ``std::erf`` (vectorised by libmvec) for doubles."""
    return f"{ERF_FUNCTION}({argument})" if ctype == "float" else f"std::erf({argument})"


def erf_prelude(body: str) -> str:
    """What a kernel whose function is ``body`` adds after the prelude: :data:`ERF_PRELUDE`
    where it calls :data:`ERF_FUNCTION`, else nothing."""
    return ERF_PRELUDE if f"{ERF_FUNCTION}(" in body else ""
