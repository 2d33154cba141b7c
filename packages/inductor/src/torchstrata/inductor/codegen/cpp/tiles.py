"""Stores across the walked order through 8x8 register transposes (decision 0372).

A pointwise kernel walks its domain in its operands' order (a CPU kernel reading
channels-last values, see :mod:`~torchstrata.inductor.schedule.memory_order`); a value it
stores row-major then moves by a stride along the innermost (SIMD) loop: one scalar store
per element. Where that store is contiguous along the last outer variable instead, eight
consecutive rows are computed into a small array (``tile<i>``, contiguous stores) and the
array is written out by 8x8 transposes in registers: eight contiguous 8-element stores
per 64 elements. M4's ResNet block's last kernel (``[3136, 64]`` walked, stored
``[64, 3136]``): 0.27 ms with scalar stores, as torch.compile's ``transpose_mxn`` kernel
with it. The transpose is written with ``__builtin_shufflevector`` (GCC 12, Clang); older
compilers get a scalar loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import torch

from torchstrata.inductor.ir.indexing import Index, Var, linear_offset
from torchstrata.inductor.ir.kernel import Kernel, Store

#: Rows (and columns) of one transposed block.
TILE = 8
#: The longest innermost loop a tile holds (``TILE`` rows of it, 32 KB of float32).
MAX_TILE_ROW = 1024
#: The variable numbering the rows within a tile.
TILE_ROW = Var("xr", TILE)

_TRANSPOSE = r"""
static inline void ts_transpose8(const float* s, int64_t ls, float* d, int64_t ld) {
#if (defined(__GNUC__) && __GNUC__ >= 12) || defined(__clang__)
  typedef float v8 __attribute__((vector_size(32)));
  v8 r0, r1, r2, r3, r4, r5, r6, r7;
  __builtin_memcpy(&r0, s + 0 * ls, 32); __builtin_memcpy(&r1, s + 1 * ls, 32);
  __builtin_memcpy(&r2, s + 2 * ls, 32); __builtin_memcpy(&r3, s + 3 * ls, 32);
  __builtin_memcpy(&r4, s + 4 * ls, 32); __builtin_memcpy(&r5, s + 5 * ls, 32);
  __builtin_memcpy(&r6, s + 6 * ls, 32); __builtin_memcpy(&r7, s + 7 * ls, 32);
  const v8 t0 = __builtin_shufflevector(r0, r1, 0, 8, 1, 9, 4, 12, 5, 13);
  const v8 t1 = __builtin_shufflevector(r0, r1, 2, 10, 3, 11, 6, 14, 7, 15);
  const v8 t2 = __builtin_shufflevector(r2, r3, 0, 8, 1, 9, 4, 12, 5, 13);
  const v8 t3 = __builtin_shufflevector(r2, r3, 2, 10, 3, 11, 6, 14, 7, 15);
  const v8 t4 = __builtin_shufflevector(r4, r5, 0, 8, 1, 9, 4, 12, 5, 13);
  const v8 t5 = __builtin_shufflevector(r4, r5, 2, 10, 3, 11, 6, 14, 7, 15);
  const v8 t6 = __builtin_shufflevector(r6, r7, 0, 8, 1, 9, 4, 12, 5, 13);
  const v8 t7 = __builtin_shufflevector(r6, r7, 2, 10, 3, 11, 6, 14, 7, 15);
  const v8 u0 = __builtin_shufflevector(t0, t2, 0, 1, 8, 9, 4, 5, 12, 13);
  const v8 u1 = __builtin_shufflevector(t0, t2, 2, 3, 10, 11, 6, 7, 14, 15);
  const v8 u2 = __builtin_shufflevector(t1, t3, 0, 1, 8, 9, 4, 5, 12, 13);
  const v8 u3 = __builtin_shufflevector(t1, t3, 2, 3, 10, 11, 6, 7, 14, 15);
  const v8 u4 = __builtin_shufflevector(t4, t6, 0, 1, 8, 9, 4, 5, 12, 13);
  const v8 u5 = __builtin_shufflevector(t4, t6, 2, 3, 10, 11, 6, 7, 14, 15);
  const v8 u6 = __builtin_shufflevector(t5, t7, 0, 1, 8, 9, 4, 5, 12, 13);
  const v8 u7 = __builtin_shufflevector(t5, t7, 2, 3, 10, 11, 6, 7, 14, 15);
  const v8 o0 = __builtin_shufflevector(u0, u4, 0, 1, 2, 3, 8, 9, 10, 11);
  const v8 o1 = __builtin_shufflevector(u1, u5, 0, 1, 2, 3, 8, 9, 10, 11);
  const v8 o2 = __builtin_shufflevector(u2, u6, 0, 1, 2, 3, 8, 9, 10, 11);
  const v8 o3 = __builtin_shufflevector(u3, u7, 0, 1, 2, 3, 8, 9, 10, 11);
  const v8 o4 = __builtin_shufflevector(u0, u4, 4, 5, 6, 7, 12, 13, 14, 15);
  const v8 o5 = __builtin_shufflevector(u1, u5, 4, 5, 6, 7, 12, 13, 14, 15);
  const v8 o6 = __builtin_shufflevector(u2, u6, 4, 5, 6, 7, 12, 13, 14, 15);
  const v8 o7 = __builtin_shufflevector(u3, u7, 4, 5, 6, 7, 12, 13, 14, 15);
  __builtin_memcpy(d + 0 * ld, &o0, 32); __builtin_memcpy(d + 1 * ld, &o1, 32);
  __builtin_memcpy(d + 2 * ld, &o2, 32); __builtin_memcpy(d + 3 * ld, &o3, 32);
  __builtin_memcpy(d + 4 * ld, &o4, 32); __builtin_memcpy(d + 5 * ld, &o5, 32);
  __builtin_memcpy(d + 6 * ld, &o6, 32); __builtin_memcpy(d + 7 * ld, &o7, 32);
#else
  for (int64_t j = 0; j < 8; ++j)
    for (int64_t i = 0; i < 8; ++i) d[j * ld + i] = s[i * ls + j];
#endif
}
"""


def transpose_prelude(text: str) -> str:
    """The transpose helper, for a kernel body ``text`` that calls it."""
    return _TRANSPOSE if "ts_transpose8(" in text else ""


def _coefficient(index: Index, var: Var) -> int:
    return sum(coeff for atom, coeff in index.terms if atom == var)


def transposed_stores(kernel: Kernel, outer_vars: Sequence[Var], inner: Var) -> tuple[Store, ...]:
    """The float32 stores of pointwise ``kernel`` that move by a stride along ``inner``
    and by one element along the last outer variable, where tiles fit: the last outer
    variable and ``inner`` a multiple of :data:`TILE` long, ``inner`` at most
    :data:`MAX_TILE_ROW`, every index a sum of plain variables. Empty otherwise."""
    if kernel.red_shape or kernel.reductions or not outer_vars:
        return ()
    row = outer_vars[-1]
    if row.size % TILE or inner.size % TILE or inner.size > MAX_TILE_ROW:
        return ()
    found = []
    for store in kernel.row_stores:
        if not all(isinstance(atom, Var) for atom, _ in store.index.terms):
            return ()
        if store.dtype is not torch.float32 or _coefficient(store.index, row) != 1:
            continue
        if _coefficient(store.index, inner) not in (0, 1):
            found.append(store)
    return tuple(found)


def tile_store(store: Store, number: int, inner: Var) -> Store:
    """``store`` into row :data:`TILE_ROW` of tile ``number`` instead of its buffer."""
    index = linear_offset([Index.of(TILE_ROW), Index.of(inner)], (inner.size, 1))
    return attrs.evolve(store, buffer=f"tile{number}", index=index)


def tile_declarations(stores: Sequence[Store], inner: Var) -> list[str]:
    """The arrays holding :data:`TILE` rows of each transposed store."""
    return [f"alignas(64) float tile{i}[{TILE * inner.size}];" for i in range(len(stores))]


def tile_writes(stores: Sequence[Store], inner: Var, render: Callable[[Index], str]) -> list[str]:
    """The loop writing each tile to its buffer by 8x8 transposes, where the row
    variables hold the tile's first row (``render`` spells an index)."""
    lines = [
        f"for (int64_t {inner.name} = 0; {inner.name} < {inner.size}; {inner.name} += {TILE}) {{"
    ]
    for i, store in enumerate(stores):
        stride = _coefficient(store.index, inner)
        target = f"{store.buffer} + ({render(store.index)})"
        lines.append(f"  ts_transpose8(tile{i} + {inner.name}, {inner.size}, {target}, {stride});")
    lines.append("}")
    return lines
