"""Integer division by zero in C++ kernels: detected by the kernel, raised by its caller.

Eager's CPU kernels raise ``RuntimeError: ZeroDivisionError`` for an integer
``torch.div(a, b, rounding_mode="trunc" | "floor")``, ``a // b``, ``torch.remainder``
(``a % b``) and ``torch.fmod`` (their Scalar and in-place forms too) where an element of
the divisor is zero, for every integer dtype. A zero Scalar divisor is refused when the
graph is traced (``torchstrata.autograd.kernel_checks``); a divisor tensor's values are
only known when the kernel runs, so the kernel checks them:

- It never divides by zero in C++ (undefined; ``SIGFPE`` on x86), nor the smallest
  int32 or int64 by -1 (``idiv`` traps on its overflow too): such a divisor is replaced by
  1 with bit masks, and a quotient by -1 is the dividend negated with wrap-around (INT_MIN
  stays INT_MIN, as eager's floor division gives; eager's ``rounding_mode="trunc"`` of
  int32/int64 crashes the process there). The remainder by -1 is 0, as eager's.
- Each division by a value that may be zero ORs "the divisor was zero" into one flag of
  the kernel (:data:`FLAG`), branch-free; the loops get ``reduction(|:...)`` clauses for
  it as for a gather's flag (:mod:`~torchstrata.inductor.codegen.cpp.checks`, which also returns
  the failed check's number), and :class:`DivisionCheck` makes the caller raise
  eager's error.

Only kernels that divide integers by a value that may be 0 or -1 use the helpers of
:data:`HELPERS` (emitted into those kernels only); a division by another constant keeps
the prelude's ``ts_div_int`` family, and a kernel without such divisions is generated as
before.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import torch

from torchstrata.inductor.ir.exprs import Constant, Expr, Op, walk
from torchstrata.inductor.ir.kernel import Kernel

#: The kernel's flag: nonzero once a divisor was zero.
FLAG = "zero_divisor"
#: The source comment of a kernel that checks its divisors, for a reader.
MARKER = "// torchstrata division check: integer divisors must not be zero"
#: prims of integer division -> the checked helper of :data:`HELPERS` that computes them.
CHECKED_HELPERS = {
    "div": "ts_div_checked",
    "remainder": "ts_rem_checked",
    "fmod": "ts_fmod_checked",
}
#: Divisors that the prelude's helpers cannot take: 0 (undefined) and -1 (INT_MIN / -1).
_UNSAFE_DIVISORS = (0, -1)

#: C++ helpers for integer divisions by a divisor that may be 0 or -1 (after the prelude):
#: that divisor is replaced by 1 and the quotient by -1 is the dividend negated in unsigned
#: arithmetic (it wraps). Masks and arithmetic, no selects: nothing branches (GCC turned
#: ``?:`` around the division into a branch that skips it). On one AMD EPYC core, 4M int32
#: elements: a truncating division 6.9 ms, as the prelude's ``ts_div_int`` (7.5 ms with
#: ``ts_where`` selects); a floor division (quotient and remainder, one ``idiv``) 10.2 ms
#: against 8.1 (the -1 and 0 tests, not the flag). Zero's quotients and remainders are
#: never seen: the caller raises.
HELPERS = r"""
template <typename T> static inline bool ts_minus_one(T b) { return T(-1) < T(0) && b == T(-1); }
template <typename T> static inline T ts_safe_divisor(T b) {
  const T unsafe = T((b == T(0)) | ts_minus_one(b)); return T((b & T(unsafe - T(1))) | unsafe);
}
template <typename T> static inline T ts_div_checked(T a, T b) {
  const uint64_t negate = uint64_t(0) - uint64_t(ts_minus_one(b));
  return T((uint64_t(T(a / ts_safe_divisor(b))) ^ negate) - negate);
}
template <typename T> static inline T ts_fmod_checked(T a, T b) { return T(a % ts_safe_divisor(b)); }
template <typename T> static inline T ts_rem_checked(T a, T b) {
  const T r = T(a % ts_safe_divisor(b)); return T(r + (b & T(-T((r != 0) & ((r < 0) != (b < 0))))));
}
"""


def integer_division(expr: Expr) -> bool:
    """Whether ``expr`` divides integers (prims ``div``, ``remainder``, ``fmod``)."""
    if not isinstance(expr, Op) or expr.name not in CHECKED_HELPERS:
        return False
    dtype = expr.args[0].dtype
    return not dtype.is_floating_point and not dtype.is_complex and dtype is not torch.bool


def needs_safe_divisor(expr: Expr) -> bool:
    """Whether ``expr`` is an integer division whose divisor may be 0 or -1 (anything but
    another constant): it is computed by a helper of :data:`HELPERS`."""
    if not integer_division(expr):
        return False
    assert isinstance(expr, Op)
    divisor = expr.args[1]
    return not isinstance(divisor, Constant) or divisor.value in _UNSAFE_DIVISORS


def may_divide_by_zero(expr: Expr) -> bool:
    """Whether ``expr`` is an integer division whose divisor may be zero (anything but a
    nonzero constant): its kernel checks that divisor."""
    if not integer_division(expr):
        return False
    assert isinstance(expr, Op)
    divisor = expr.args[1]
    return not isinstance(divisor, Constant) or divisor.value == 0


def _expressions(kernel: Kernel) -> Iterator[Expr]:
    roots = [spec.body for spec in kernel.reductions]
    roots += [store.value for store in (*kernel.row_stores, *kernel.full_stores)]
    for root in roots:
        yield from walk(root)


def uses_safe_divisors(kernel: Kernel) -> bool:
    """Whether ``kernel``'s source needs :data:`HELPERS`."""
    return any(needs_safe_divisor(expr) for expr in _expressions(kernel))


@attrs.frozen(order=True)
class DivisionCheck:
    """A kernel's integer divisors must not be zero; one check covers all its divisions."""

    @property
    def flag(self) -> str:
        """The C++ variable (``uint64_t``) that is nonzero once a divisor was zero."""
        return FLAG

    def error(self, index: int | None, kernel: str) -> RuntimeError:
        """Eager's error, word for word (``index`` is unused: no position is reported)."""
        return division_error()


def division_checks(kernel: Kernel) -> tuple[DivisionCheck, ...]:
    """The check of ``kernel``'s divisors: one when it divides integers by a value that
    may be zero, none otherwise."""
    return (DivisionCheck(),) if any(map(may_divide_by_zero, _expressions(kernel))) else ()


def division_update(divisor: str) -> str:
    """The statement recording whether ``divisor`` (a name or a literal) is zero:
    branch-free, so a SIMD loop stays vectorised."""
    return f"{FLAG} |= static_cast<uint64_t>({divisor} == 0);"


def division_error() -> RuntimeError:
    """What eager's CPU kernels raise for an integer divisor of zero."""
    return RuntimeError("ZeroDivisionError")
