"""An identity guard (``ID_MATCH``) compares ``id()``s: an object freed after the compile
gives its address to the next object of its size, which would pass the guard. Here a
global instance is rebound to an instance of another class at the same address: the
graph traced for ``isinstance(obj, First)`` kept running (x + 1 where eager gave x - 1).
The compiled entry keeps every object its guards identify alive, so no other object can
take its address while the guard is checked.
"""

from __future__ import annotations

import gc
import weakref

import torch

import torchstrata.runtime as rt


class First:
    pass


class Second:
    pass


obj: object = First()


def _branches_on_class(x: torch.Tensor) -> torch.Tensor:
    if isinstance(obj, First):
        return x + 1
    return x - 1


def test_an_identified_object_freed_by_the_program_cannot_lend_its_address():
    global obj
    compiled = rt.compile(_branches_on_class)
    x = torch.zeros(2)
    torch.testing.assert_close(compiled(x), _branches_on_class(x))
    first = weakref.ref(obj)
    address = id(obj)
    obj = None
    gc.collect()
    assert first() is not None, "the compiled entry must keep the identified object alive"
    # Without that, one of these takes the freed address (pymalloc reuses it at once).
    candidates = [Second() for _ in range(10_000)]
    obj = next((c for c in candidates if id(c) == address), candidates[0])
    try:
        torch.testing.assert_close(compiled(x), _branches_on_class(x))
    finally:
        obj = First()
