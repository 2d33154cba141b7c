"""Row tiles: a pointwise kernel with per-row work generated as a row kernel.

A flat pointwise kernel computes every value once per element. Where some of its values
depend only on the leading coordinates (cross-entropy's backward: each row's target, max,
log-sum and scale, loaded and combined per element of a 32000-wide row), that work and
the index arithmetic that finds the row (a division and a modulo) are repeated for
every element, and a memory-bound kernel becomes bound by its instructions. Walked as a
row kernel without reductions (``row_shape[:-1]`` rows of ``row_shape[-1]`` elements),
the row's values are computed once per row tile, outside the loop over the row, and
each element pays only for what depends on its column.

On the H200 (``bench/results/2026-12-01-h200-row-tiles.txt``), cross-entropy's
backward over [8192, 32000] bf16 logits took 343 us flat and takes 272 us as rows (91% of
a copy's bandwidth); the training step went from 486 to 406 us. ``InductorOptions(row_tiles=False)``
keeps such kernels flat.
"""

from __future__ import annotations

import attrs

from torchstrata.inductor.codegen.triton.size_buckets import next_power_of_2
from torchstrata.inductor.codegen.triton.tuning import LOOPED_MIN
from torchstrata.inductor.ir.exprs import Expr, IndirectLoad, Load, map_indices, walk
from torchstrata.inductor.ir.indexing import Index, Var
from torchstrata.inductor.ir.kernel import Kernel, Store, row_vars
from torchstrata.inductor.ir.ranges import substitute

#: Rows shorter than this stay flat: the per-row work is shared by too few elements to
#: matter, and a tile would waste lanes on the masked tail of each row.
ROW_TILE_MIN = 2048


def as_row_kernel(kernel: Kernel) -> Kernel | None:
    """``kernel`` walked as rows of its last dim (see the module docstring), or None when
    it is not a plain pointwise kernel over rows of at least ``ROW_TILE_MIN`` elements
    (that fill their tiles) that loads some value per row (the Triton backend asks only
    with ``InductorOptions.row_tiles``)."""
    if kernel.red_shape or kernel.reductions or kernel.parts or kernel.tail or kernel.partials:
        return None
    if len(kernel.row_shape) < 2 or not _fills_tiles(kernel.row_shape[-1]):
        return None
    lead = row_vars(kernel.row_shape)
    last = lead[-1].name
    if not _loads_per_row(kernel, last) or any(
        last not in store.index.variables() for store in kernel.row_stores
    ):
        return None
    column = Index.of(Var("r0", kernel.row_shape[-1]))

    def rename(index: Index) -> Index:
        return substitute(index, last, column)

    done: dict[Expr, Expr] = {}
    stores = tuple(
        Store(s.buffer, rename(s.index), map_indices(s.value, rename, done), s.dtype)
        for s in kernel.row_stores
    )
    return attrs.evolve(
        kernel,
        row_shape=kernel.row_shape[:-1],
        red_shape=kernel.row_shape[-1:],
        row_stores=(),
        full_stores=stores,
    )


def _fills_tiles(length: int) -> bool:
    """Rows of ``length`` are long enough, and fill their tiles. Rows up to the tuner's
    ``LOOPED_MIN`` are held in one tile of the next power of two (longer ones are also
    looped over in smaller tiles): they qualify only when at most an eighth of that tile
    is masked off (4000 of 4096, not 2049)."""
    if length < ROW_TILE_MIN:
        return False
    return length > LOOPED_MIN or next_power_of_2(length) - length <= length // 8


def _loads_per_row(kernel: Kernel, last: str) -> bool:
    """Some load's position depends on the leading coordinates but not on ``last``."""
    for store in kernel.row_stores:
        for node in walk(store.value):
            if isinstance(node, Load | IndirectLoad):
                names = node.index.variables()
                if names and last not in names:
                    return True
    return False
