"""Benchmarking a kernel's candidates runs on copies of the buffers it writes
(``triton_tuning.tuning_copies``): a kernel that updates a buffer in place would apply its
update at every benchmark launch. The GPU check, a batch norm's running statistics after a
tuned first call, is ``integration_tests/test_tuning_in_place.py``."""

from __future__ import annotations

import torch

from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.kernel import Kernel
from torchstrata.inductor.lowering import lower_graph
from torchstrata.inductor.plan import plan_graph
from torchstrata.inductor.triton_printer import supports
from torchstrata.inductor.triton_tuning import tuning_copies


def test_written_storages_are_copied_with_their_aliasing():
    base = torch.arange(12.0)
    read = torch.arange(4.0)
    head, tail = base[3:9], base[6:].view(2, 3)  # overlapping views of one written storage
    args = [read, head, tail, 3]
    copies = tuning_copies(args, written=(2,))
    assert copies[0] is read and copies[3] == 3
    for original, copy in zip(args[1:3], copies[1:3], strict=True):
        assert copy.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
        assert (copy.size(), copy.stride()) == (original.size(), original.stride())
        assert copy.storage_offset() == original.storage_offset()
        assert torch.equal(copy, original)
    assert copies[1].untyped_storage().data_ptr() == copies[2].untyped_storage().data_ptr()
    copies[2].fill_(-1)  # a benchmark launch writing the copy
    assert torch.equal(base, torch.arange(12.0))  # the original is untouched
    assert torch.equal(copies[1], torch.tensor([3.0, 4.0, 5.0, -1.0, -1.0, -1.0]))


def test_without_positions_every_tensor_is_copied():
    x, y = torch.ones(3), torch.zeros(3)
    copies = tuning_copies([x, y], written=None)
    assert all(c.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
               for a, c in zip([x, y], copies, strict=True))  # fmt: skip


def test_written_args_are_the_stored_buffers():
    builder = GraphBuilder(Level.PRIMS)
    x = builder.input("x", TensorMeta((4, 8), torch.float32))
    y = builder.input("y", TensorMeta((4, 8), torch.float32))
    total = builder.call(prim("sum"), builder.call(prim("mul"), x, y), [1])
    graph = builder.build([builder.call(prim("exp"), total), builder.call(prim("add"), x, y)])
    lowered = lower_graph(graph, lambda name, dtype: supports(name, dtype, interpret=False))
    kernels = [step for step in plan_graph(graph, lowered).steps if isinstance(step, Kernel)]
    assert kernels
    for kernel in kernels:
        stored = {s.buffer for s in (*kernel.row_stores, *kernel.full_stores)}
        names = [kernel.args[i].name for i in kernel.written_args]
        assert set(names) == stored and not {"x", "y"} & set(names)
