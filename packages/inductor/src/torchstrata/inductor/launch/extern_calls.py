"""Extern ATen calls through torch's own Python bindings.

Calling an ``OpOverload`` (``torch.ops.aten.addmm.default(b, x, w)``) boxes every argument
into the dispatcher's stack before the kernel runs; ``torch.addmm(b, x, w)`` reaches the
same overload's kernel through torch's generated bindings, which unbox as they parse. On
the CI machine a small addmm took 13.1 us one way and 9.7 the other, an in-place
``index_copy_`` 4.9 and 2.6: a decode step's launcher makes ~45 such calls.

The bindings are not always the same call. ``Tensor.index_put_`` refuses the ``None``
entries that ``aten.index_put_`` takes in its index list; the flash and cuDNN attention
bindings return their ``SymInt`` outputs (``max_q``, ``max_k``) as tensors where the
overloads return ints; and a binding with several signatures picks one by the
arguments' types. So only the overloads in
:data:`DIRECT_CALLS` are sent through a binding, each checked against its ``OpOverload``
(the same overload dispatched, the same values) in ``test_extern_calls.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

#: ``aten`` default overloads called through ``torch.<name>``.
FUNCTIONS = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "convolution",
        "embedding",
        "index_copy",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    }
)
#: ``aten`` default overloads of in-place ops called through ``torch.Tensor.<name>``.
METHODS = frozenset({"index_copy_"})
#: Every overload name that :func:`direct_call` sends through a binding.
DIRECT_CALLS = frozenset(f"aten.{name}.default" for name in FUNCTIONS | METHODS)


def direct_call(op: Any, kwargs: Any = ()) -> Callable[..., Any]:
    """The binding that calls ``op`` (an ``OpOverload``) with the same arguments, or
    ``op`` itself. ``kwargs``: the names the call passes by keyword; a binding names the
    first argument ``input`` where the schema says ``self``, so such a call keeps ``op``."""
    if not isinstance(op, torch._ops.OpOverload) or "self" in kwargs:
        return op
    if op.namespace != "aten" or op._overloadname != "default":
        return op
    name = op._schema.name.removeprefix("aten::")
    if name in FUNCTIONS:
        function = getattr(torch._C._VariableFunctions, name, None)
    elif name in METHODS:
        function = getattr(torch._C.TensorBase, name, None)
    else:
        function = None
    return op if function is None else function
