"""Graphs and AOT results as JSON records, for the compiled-graph cache.

A graph is its text form (``str(graph)``, read back by :func:`torchstrata.core.parse`);
an :class:`~torchstrata.core.AotResult` is its graphs' text and its plain fields, and the
tensor constants lifted out of its graph (``torch.tensor([1.0, 2.0])`` in the code: a
literal the key's graph text spells already) as ``torch.save`` bytes, up to
:data:`MAX_CONSTANT_BYTES` in all. A graph with an argument the text form cannot spell,
and constants larger than that or asked not to be stored (a lowering for many sizes), are
refused with :class:`NotCacheable`; a text that does not parse back to itself is
refused when it is read (:class:`BadRecord`: the entry is rebuilt), so a cache entry never
stands for less than what was compiled. Whether a text reads back is a question about the
text alone, so it is asked where the text is parsed anyway: a compile that writes an entry
formats its graphs once and parses nothing (a 24-layer GPT's graphs took about a second
to parse and format again; a symbolic entry writes entries for every size, most never read).
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from torchstrata.core import AotResult, Graph, parse

#: The most bytes of lifted constants an entry holds: literals of the code, small as a
#: rule; a larger one is compiled afresh rather than copied into every entry.
MAX_CONSTANT_BYTES = 1 << 20


class NotCacheable(ValueError):
    """The result cannot be written as plain data (it is compiled, not cached)."""


class BadRecord(ValueError):
    """A cache entry's document is not what this module writes (it is rebuilt)."""


def graph_text(graph: Graph) -> str:
    """``graph``'s text (:func:`read_graph` checks that it reads back as itself)."""
    try:
        return str(graph)
    except TypeError as error:  # an argument the text form cannot spell
        raise NotCacheable(f"the graph has no text form: {error}") from error


def read_graph(text: Any) -> Graph:
    """The graph of a text that :func:`graph_text` wrote, checked to print as that text
    again (an argument or name the parser reads otherwise than it was printed)."""
    if not isinstance(text, str):
        raise BadRecord(f"a graph record must be text, not {type(text).__name__}")
    try:
        graph = parse(text)
    except ValueError as error:
        raise BadRecord(f"a cached graph does not parse: {error}") from error
    if str(graph) != text:
        raise BadRecord("a cached graph does not read back as the same graph")
    return graph


#: The AotResult fields that are plain data (ints and nested tuples of ints or None).
_PLAIN_FIELDS = (
    "num_user_outputs",
    "mutated_inputs",
    "num_saved",
    "output_aliases",
    "output_views",
    "num_hidden_outputs",
    "tangent_outputs",
    "grad_inputs",
    "num_unit_grads",
    "offset_inputs",
)


def aot_record(aot: AotResult, constants: bool = True) -> dict[str, Any]:
    """``aot`` as JSON types (its graphs as text, its lifted constants as
    :func:`constant_record`; ``constants=False``: refused where it has any)."""
    if aot.constants and not constants:
        raise NotCacheable("the AOT result holds tensor constants")
    size = sum(tensor.numel() * tensor.element_size() for tensor in aot.constants)
    if size > MAX_CONSTANT_BYTES:
        raise NotCacheable(f"the AOT result holds {size} bytes of tensor constants")
    record: dict[str, Any] = {name: getattr(aot, name) for name in _PLAIN_FIELDS}
    record["forward"] = graph_text(aot.forward)
    record["backward"] = None if aot.backward is None else graph_text(aot.backward)
    if aot.constants:  # absent otherwise: entries written before constants were stored
        record["constants"] = [constant_record(tensor) for tensor in aot.constants]
    return record


def constant_record(tensor: torch.Tensor) -> dict[str, Any]:
    """One lifted constant as JSON types: dtype, shape, device and its ``torch.save``
    bytes (base64) of a contiguous CPU copy."""
    if not tensor.is_contiguous():
        raise NotCacheable("a lifted tensor constant that is not contiguous")
    buffer = io.BytesIO()
    torch.save(tensor.detach().to("cpu", copy=True), buffer)
    return {
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "shape": list(tensor.shape),
        "device": str(tensor.device),
        "data": base64.b64encode(buffer.getvalue()).decode("ascii"),
    }


def read_constant(record: Any) -> torch.Tensor:
    """The tensor that :func:`constant_record` wrote as ``record``, on its device; checked
    to have the recorded dtype and shape."""
    if not isinstance(record, Mapping) or set(record) != {"dtype", "shape", "device", "data"}:
        raise BadRecord("a constant record has other fields than this version writes")
    try:
        data = base64.b64decode(record["data"], validate=True)
        tensor = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except (binascii.Error, TypeError, ValueError, RuntimeError, EOFError) as error:
        raise BadRecord(f"a constant record does not load: {error}") from error
    if not isinstance(tensor, torch.Tensor):
        raise BadRecord(f"a constant record holds a {type(tensor).__name__}, not a tensor")
    if str(tensor.dtype).removeprefix("torch.") != record["dtype"] or list(tensor.shape) != list(
        record["shape"]
    ):
        raise BadRecord("a constant record's tensor is not of its recorded dtype and shape")
    try:
        return tensor.to(torch.device(record["device"]))
    except (RuntimeError, TypeError, ValueError) as error:
        raise BadRecord(f"a constant record's device is not available: {error}") from error


def _tuples(value: Any) -> Any:
    """JSON lists back into the tuples the AotResult fields hold."""
    if isinstance(value, list | tuple):
        return tuple(_tuples(item) for item in value)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise BadRecord(f"unexpected value {value!r} in an AOT record")


def read_aot(record: Any) -> AotResult:
    """The AOT result that :func:`aot_record` wrote as ``record``."""
    if not isinstance(record, Mapping) or set(record) - {"constants"} != {
        *_PLAIN_FIELDS,
        "forward",
        "backward",
    }:
        raise BadRecord("an AOT record has other fields than this version writes")
    fields = {name: _tuples(record[name]) for name in _PLAIN_FIELDS}
    backward = record["backward"]
    constants = record.get("constants", [])
    if not isinstance(constants, list) or ("constants" in record and not constants):
        raise BadRecord("an AOT record's constants are not a list of constant records")
    try:
        return AotResult(
            forward=read_graph(record["forward"]),
            backward=None if backward is None else read_graph(backward),
            constants=tuple(read_constant(item) for item in constants),
            **fields,
        )
    except (TypeError, attrs.exceptions.FrozenInstanceError) as error:
        raise BadRecord(f"an AOT record does not make an AotResult: {error}") from error
