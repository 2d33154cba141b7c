"""fp16 loads and stores of elementwise SIMD loops moved out of the loop, a block at a time
(decision 0516).

An ``omp simd`` loop whose body converts fp16 calls a vector variant of the conversion per
vector of lanes (decision 0235); the vector function ABI saves no register, so the loop's
live vectors are spilled around every call. Each such loop that loads or stores fp16 in
contiguous runs becomes a loop over blocks of :data:`HALF_BLOCK` elements: before a
block's lane loop, each contiguous fp16 load is widened into a float array (F16C, inline:
``ts_f16_widen_block``); the lane loop computes in floats and writes each contiguous fp16
store's value into a float array; after it, the array is narrowed into the buffer
(``ts_f16_narrow_block``). Same values bit for bit: the narrowing rounds to nearest even
as ``ts_store_f16`` does, and storing a value that is an fp16 value already
(``ts_f16_bits``) is exact either way. Row-invariant loads (a norm's weight, read at the
lane index alone) are widened per block too, which is what the norms' last phase needed.

bf16 stores are narrowed a block at a time too (decision 0526), but only where the build
has AVX512_BF16 (``TS_AVX512BF16``, see ``half.BF16_BLOCKS``): such a loop is emitted twice,
blocked under ``#ifdef TS_AVX512BF16`` and as before under ``#else``, so the source does
not depend on the machine. A stored value that ``ts_round_bf16`` rounded goes into the
array unrounded (the narrowing rounds it the same way).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from torchstrata.inductor.codegen.cpp.half import block_start

#: Elements per block: four vectors of 16 floats per array (of 16, 32, 64 and 256, 64 was
#: the best compromise on a Zen 5 over a cast chain, layernorm and x*sigmoid(x)*y, 0516).
HALF_BLOCK = 64

_PRAGMA = "#pragma omp simd"
#: A lane loop's header as :func:`~torchstrata.inductor.codegen.cpp.exprs.loop_header` and
#: the loop splitting spell it: ``for (int64_t x1 = <begin>; x1 < <end>; ++x1) {``.
_HEADER = re.compile(r"for \(int64_t (\w+) = ([^;]+); \1 < ([^;]+); \+\+\1\) \{")
_LOAD = re.compile(r"ts_f16_to_f32\((buf_\w+)\[([^\[\]]+)\]\)")
_STORE = re.compile(
    r"(buf_\w+)\[([^\[\]]+)\] = (ts_store_f16|ts_f16_bits|ts_f32_to_bf16|ts_bf16_bits)\((.*)\);"
)
_BF16_STORES = ("ts_f32_to_bf16", "ts_bf16_bits")
#: A bf16 rounding's line: ``const float tmp6 = ts_round_bf16(static_cast<float>(tmp5));``.
_BF16_ROUNDING = re.compile(r"const float (\w+) = ts_round_bf16\(static_cast<float>\((.*)\)\);")
_DEFINED = re.compile(r"\bconst\s+[\w:<>]+\s+(\w+)\s*=")


def _blocked(header: re.Match[str], body: list[str], indent: str, bf16: bool) -> list[str] | None:
    """The loop of ``header`` over ``body`` blocked, or None where nothing moves out; its
    bf16 stores too where ``bf16``."""
    var, begin, end = header.group(1), header.group(2), header.group(3)
    block, count = f"{var}_b", f"{var}_n"
    local = [name for line in body for name in _DEFINED.findall(line)]
    before: list[str] = []
    after: list[str] = []
    arrays: dict[tuple[str, str], str] = {}

    def widen(match: re.Match[str]) -> str:
        buffer, index = match.group(1), match.group(2)
        start = block_start(index, var, block, local)
        if start is None:
            return match.group(0)
        if (buffer, index) not in arrays:
            arrays[buffer, index] = name = f"wide{len(arrays)}_{var}"
            before.append(f"alignas(64) float {name}[{HALF_BLOCK}];")
            before.append(f"ts_f16_widen_block(&{buffer}[{start}], {name}, {count});")
        return f"{arrays[buffer, index]}[{var} - {block}]"

    rounded = {m[1]: m[2] for line in body if (m := _BF16_ROUNDING.fullmatch(line))}
    rewritten = []
    for line in body:
        stored = _STORE.fullmatch(line.strip())
        is_bf16 = stored is not None and stored[3] in _BF16_STORES
        start = None
        if stored and (bf16 or not is_bf16):
            start = block_start(stored[2], var, block, local)
        if stored and start is not None:
            name = f"narrow{len(after)}_{var}"
            before.append(f"alignas(64) float {name}[{HALF_BLOCK}];")
            narrow = "ts_bf16_narrow_block" if is_bf16 else "ts_f16_narrow_block"
            after.append(f"{narrow}({name}, &{stored.group(1)}[{start}], {count});")
            value = stored.group(4)
            if is_bf16 and value in rounded:  # the narrowing rounds it alike
                value = rounded[value]
            if not value.startswith("static_cast<float>("):
                value = f"static_cast<float>({value})"
            line = f"{name}[{var} - {block}] = {value};"
        rewritten.append(_LOAD.sub(widen, line))
    if not before:
        return None

    def block_body(size: str) -> list[str]:
        return [
            f"  const int64_t {count} = {size};",
            *(f"  {line}" for line in before),
            f"  {_PRAGMA}",
            f"  for (int64_t {var} = {block}; {var} < {block} + {count}; ++{var}) {{",
            *(f"    {line}" for line in rewritten),
            "  }",
            *(f"  {line}" for line in after),
        ]

    # whole blocks (a constant count measured faster), then the rest; with literal bounds,
    # only the parts that run (GCC reports no dead loop vectorised). Braces: the loops that
    # split ranges of one variable make sibling loops with the same names.
    whole = rest = True
    if begin.isdigit() and end.isdigit():
        whole, rest = int(end) - int(begin) >= HALF_BLOCK, (int(end) - int(begin)) % HALF_BLOCK > 0
    lines = ["{", f"  int64_t {block} = {begin};"]
    if whole:
        lines += [f"  for (; {block} + {HALF_BLOCK} <= {end}; {block} += {HALF_BLOCK}) {{"]
        lines += [*("  " + line for line in block_body(str(HALF_BLOCK))), "  }"]
    if rest:
        lines += [f"  if ({block} < {end}) {{"]
        lines += [*("  " + line for line in block_body(f"{end} - {block}")), "  }"]
    return [indent + line for line in [*lines, "}"]]


def block_half_loops(lines: Sequence[str]) -> list[str]:
    """``lines`` (a kernel function's statements) with every plain ``omp simd`` loop whose
    body is straight-line code that loads or stores fp16 contiguously blocked (see the
    module docstring); other lines unchanged."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        header = _HEADER.fullmatch(lines[i + 1].strip()) if i + 1 < len(lines) else None
        if line.strip() != _PRAGMA or header is None:
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        close = next(
            (j for j in range(i + 2, len(lines)) if "{" in lines[j] or "}" in lines[j]), None
        )
        if close is None or lines[close] != f"{indent}}}":  # a nested block: left alone
            out.append(line)
            i += 1
            continue
        body = [text.strip() for text in lines[i + 2 : close]]
        plain = _blocked(header, body, indent, bf16=False)
        plain = plain if plain is not None else list(lines[i : close + 1])
        with_bf16 = _blocked(header, body, indent, bf16=True)
        if with_bf16 is not None and with_bf16 != plain:  # bf16 stores blocked: 0526
            out += [f"{indent}#ifdef TS_AVX512BF16", *with_bf16, f"{indent}#else", *plain]
            out.append(f"{indent}#endif")
        else:
            out += plain
        i = close + 1
    return out
