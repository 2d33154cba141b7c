"""A Triton kernel as a JSON record, and back (for the compiled-graph cache).

What :class:`~torchstrata.inductor.codegen.triton.tuning.TunedKernel` needs besides
the jit functions, without the kernel's IR: one canonical module source (and its entry
point) per code variant, the candidate launch configurations in order, the rows the
grid is computed from, and the scratch buffers of split, tail and cluster launches,
computed for every configuration offered (the IR's size functions are not kept). The
modules themselves come from the artifact store by their canonical source (written
again from the record if evicted); on a GPU Triton's binaries come from the verified
store and the tuned choice from the tuning cache, as for a kernel generated afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from torchstrata.inductor.codegen.triton.tuning import Config

#: ``(persistent, group, split, cluster)``: see ``Config.variant``.
Variant = tuple[bool, int, int, int]


@attrs.frozen
class TritonKernelRecord:
    """A Triton kernel ready to load: ``variants`` maps each code variant to its
    canonical module source and entry point; ``source``: the sources as generated
    (graph names kept, for reports), one per variant, joined by newlines;
    ``split_scratch``: ``{split: (float32 partials, int32 counters)}``; ``tail``: a tail's
    ``(float32 partials, int32 tickets)``; ``cluster_scratch``: ``{cluster size: float32
    partials}``; ``interpret``: generated for Triton's interpreter."""

    name: str
    source: str
    interpret: bool
    rows: int
    variants: Mapping[Variant, tuple[str, str]]
    configs: tuple[Config, ...]
    split_scratch: Mapping[int, tuple[int, int]] = attrs.field(factory=dict)
    tail: tuple[int, int] | None = None
    cluster_scratch: Mapping[int, int] = attrs.field(factory=dict)
    #: The size arguments its sources take beyond ``xnumel`` (a reduction's ``rnumel``, a
    #: horizontal kernel's parts' elements), by parameter name: decision 0250.
    sizes: Mapping[str, int] = attrs.field(factory=dict)
    #: A kernel of a symbolic lowering (decision 0450): the symbols its launcher passes
    #: last, and their values where it was lowered; its ``rows`` and ``sizes`` are then
    #: Python expressions over them (text, read back) or ints.
    symbols: tuple[str, ...] = ()
    hints: tuple[int, ...] = ()

    def split_sizes(self, split: int) -> tuple[int, int]:
        """The scratch of the split variant ``split`` (``TunedKernel``'s ``scratch``)."""
        return self.split_scratch[split]

    def cluster_size(self, size: int) -> int:
        """The scratch of the cluster variant ``size`` (``TunedKernel``'s
        ``cluster_scratch``)."""
        return self.cluster_scratch[size]


def make_record(
    name: str,
    rows: int,
    interpret: bool,
    configs: Sequence[Config],
    generated: Sequence[tuple[Variant, str, tuple[str, str]]],
    split_scratch: Callable[[int], tuple[int, int]],
    tail: tuple[int, int] | None,
    cluster_scratch: Callable[[int], int],
    sizes: Mapping[str, int] | None = None,
) -> TritonKernelRecord:
    """The record of a kernel generated as ``generated`` (``(variant, source, (canonical
    source, entry point))`` per variant) with the candidate ``configs``; the scratch
    functions are asked for every split and cluster size the configurations launch."""
    return TritonKernelRecord(
        name,
        "\n".join(source for _, source, _ in generated),
        interpret,
        rows,
        {variant: canonical for variant, _, canonical in generated},
        tuple(configs),
        {c.split: split_scratch(c.split) for c in configs if c.split > 1},
        tail,
        {c.cluster: cluster_scratch(c.cluster) for c in configs if c.cluster > 1},
        dict(sizes or {}),
    )


def to_json(record: TritonKernelRecord) -> dict[str, Any]:
    """``record`` as JSON types (for the package's ``kernels`` list); a symbolic
    record's sizes as the expressions they print (within ``core.size_printer`` of Python
    source, where they have ``//`` or ``%``)."""
    symbolic = {"symbols": list(record.symbols), "hints": list(record.hints)}
    return {
        **(symbolic if record.symbols else {}),
        "name": record.name,
        "source": record.source,
        "interpret": record.interpret,
        "rows": _size_json(record.rows),
        "variants": [[list(v), list(canonical)] for v, canonical in record.variants.items()],
        "configs": [attrs.asdict(config) for config in record.configs],
        "split_scratch": [[s, *sizes] for s, sizes in sorted(record.split_scratch.items())],
        "tail": None if record.tail is None else list(record.tail),
        "cluster_scratch": [[s, size] for s, size in sorted(record.cluster_scratch.items())],
        "sizes": {name: _size_json(size) for name, size in record.sizes.items()},
    }


def _size_json(size: Any) -> int | str:
    return size if type(size) is int else str(size)


def _symbolic_sizes(data: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The symbols and hints of a symbolic record (empty for another), checked: its
    rows and sizes evaluate to ints >= 0 at the hints."""
    if "symbols" not in data:
        return (), ()
    symbols, hints = data["symbols"], data["hints"]
    if not (isinstance(symbols, list) and all(map(str.isidentifier, symbols))):
        raise ValueError("a Triton kernel record's symbols must be names")
    values = _ints(hints, len(symbols), "hints")
    sizes = [data["rows"], *data["sizes"].values()]
    if not all(type(size) is int or isinstance(size, str) for size in sizes):
        raise ValueError("a symbolic Triton kernel record's sizes are ints or expressions")
    evaluate = eval(  # text of the store's record, as its launcher's source is
        compile(
            f"lambda {', '.join(symbols)}: ({''.join(f'({s}),' for s in sizes)})", "<sizes>", "eval"
        ),
        {"__builtins__": {}},
    )
    _ints(list(evaluate(*values)), len(sizes), "sizes at the hints")
    return tuple(symbols), values


def _ints(values: Any, count: int, what: str) -> tuple[int, ...]:
    if (
        not isinstance(values, list)
        or len(values) != count
        or not all(type(value) is int and value >= 0 for value in values)
    ):
        raise ValueError(f"a Triton kernel record's {what} must be {count} ints >= 0")
    return tuple(values)


def _variant(value: Any) -> Variant:
    if not isinstance(value, list) or len(value) != 4 or type(value[0]) is not bool:
        raise ValueError("a Triton kernel record's variant is [persistent, group, split, cluster]")
    group, split, cluster = _ints(value[1:], 3, "variant")
    return value[0], group, split, cluster


def _config(data: Any) -> Config:
    if not isinstance(data, dict) or not set(data) <= set(attrs.fields_dict(Config)):
        raise ValueError(f"not a launch configuration: {data!r}")
    fields = {key: value for key, value in data.items() if key != "persistent"}
    if type(data.get("persistent")) is not bool or not all(
        type(value) is int and value >= 0 for value in fields.values()
    ):
        raise ValueError(f"a launch configuration of ints and a bool persistent: {data!r}")
    return Config(**data)


def from_json(data: Mapping[str, Any]) -> TritonKernelRecord:
    """The record that :func:`to_json` wrote; ``ValueError`` (naming what is wrong) for
    one that does not describe a loadable kernel."""
    try:
        name, source, interpret = data["name"], data["source"], data["interpret"]
        symbols, hints = _symbolic_sizes(data)
        rows = data["rows"] if symbols else _ints([data["rows"]], 1, "rows")[0]
        variants = {}
        for variant, canonical in data["variants"]:
            text, symbol = canonical
            if not (isinstance(text, str) and isinstance(symbol, str) and symbol in text):
                raise ValueError("a Triton kernel record's module must name its entry point")
            variants[_variant(variant)] = (text, symbol)
        configs = tuple(_config(config) for config in data["configs"])
        split = {}
        for entry in data["split_scratch"]:
            count, floats, counters = _ints(entry, 3, "split scratch")
            split[count] = (floats, counters)
        tail = None
        if data["tail"] is not None:
            floats, tickets = _ints(data["tail"], 2, "tail")
            tail = (floats, tickets)
        cluster = {}
        for entry in data["cluster_scratch"]:
            size, floats = _ints(entry, 2, "cluster scratch")
            cluster[size] = floats
        sizes = data.get("sizes", {})
        if not isinstance(sizes, dict) or not all(isinstance(n, str) for n in sizes):
            raise ValueError("a Triton kernel record's sizes map parameter names to ints")
        if not symbols:
            _ints(list(sizes.values()), len(sizes), "sizes")
    except (KeyError, TypeError, SyntaxError, NameError, ZeroDivisionError) as error:
        raise ValueError(f"not a Triton kernel record: {type(error).__name__}: {error}") from None
    if not (isinstance(name, str) and isinstance(source, str) and type(interpret) is bool):
        raise ValueError("a Triton kernel record needs a str name and source, a bool interpret")
    if not configs:
        raise ValueError("a Triton kernel record needs at least one launch configuration")
    for config in configs:
        if config.variant not in variants:
            raise ValueError(f"no module for the launch configuration {config}")
        if (config.split > 1 and config.split not in split) or (
            config.cluster > 1 and config.cluster not in cluster
        ):
            raise ValueError(f"no scratch sizes for the launch configuration {config}")
    return TritonKernelRecord(
        name,
        source,
        interpret,
        rows,
        variants,
        configs,
        split,
        tail,
        cluster,
        sizes,
        symbols,
        hints,
    )
