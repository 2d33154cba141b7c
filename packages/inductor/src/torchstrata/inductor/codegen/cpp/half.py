"""float16 conversions of generated C++ kernels: F16C's instructions where the build
targets them, integer arithmetic elsewhere, bit for bit the same (decision 0235).

GCC 12 vectorises no ``_Float16`` conversion, and F16C's ``vcvtph2ps``/``vcvtps2ph`` are
vector intrinsics that the per-element code of an ``omp simd`` loop cannot call. So the
conversions are functions declared ``simd`` whose vector variants :data:`HALF_PRELUDE`
defines itself, under the names of the x86 vector function ABI (``_ZGV<isa>N<lanes>v_``):
a SIMD loop calls one per vector of lanes, each a conversion instruction and a pack or
unpack. Their scalar versions (a loop's remainder) are assembly: a C++ definition of a
function declared ``simd`` makes GCC derive vector variants of its own, which would clash.

The fast path is compiled where GCC (not Clang, whose builtins differ) targets x86-64 with
F16C and AVX2 (``-march=native`` on this host); ``TS_PORTABLE_HALF`` defined before the
prelude turns it off (the tests compile both). The integer versions are decision 0196's.

bf16's conversions are integer arithmetic in the prelude (``exprs.PRELUDE``); only its
block narrowing (:data:`BF16_BLOCKS`, decision 0526) uses AVX512_BF16 where the build has it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: The functions kernels call: load, intermediate rounding, store of a value that is an
#: fp16 value already, store of any float, store of the float that an fp16 rounding
#: (``convert_element_type``) rounds (which is the narrowing, spelled for each path).
HALF_FUNCTIONS = (
    "ts_f16_to_f32",
    "ts_round_f16",
    "ts_f16_bits",
    "ts_f32_to_f16",
    "ts_store_f16",
    "ts_f16_widen_block",
    "ts_f16_narrow_block",
)

_PORTABLE = r"""
// fp16 by integer arithmetic on the bit patterns (decision 0196). Widening: exponent and
// mantissa shifted into place and rebiased; an exponent of 31 becomes 255 (inf, or NaN
// quieted); subnormals as 2**-14 * (1 + m/1024) - 2**-14, exact. No float operation here
// takes or gives a float subnormal: without FTZ/DAZ each one costs a microcode assist
// (softmax's fp16 output, many of them subnormal, took twice as long when stored through
// a multiply by 2**-112).
static inline float ts_f16_to_f32_int(uint16_t h) {
  const uint32_t em = static_cast<uint32_t>(h & 0x7fffu) << 13;
  uint32_t o = em + 0x38000000u;
  o = ts_where<uint32_t>(em >= 0x0f800000u, em | 0x7f800000u | ts_where<uint32_t>(em > 0x0f800000u, 0x00400000u, 0u), o);
  const float tiny = ts_bits_f32(o + 0x00800000u) - ts_bits_f32(0x38800000u);
  o = ts_where<uint32_t>(em < 0x00800000u, ts_f32_bits(tiny), o);
  return ts_bits_f32(o | (static_cast<uint32_t>(h & 0x8000u) << 16));
}
// |f| >= 65536: inf, or NaN with its top mantissa bits; below 2**-14: the float add of 0.5
// rounds to the subnormal's last place (nearest even); otherwise rebias and round on bit 13.
static inline uint16_t ts_f32_to_f16_int(float f) {
  const uint32_t u = ts_f32_bits(f);
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t big = ts_where<uint32_t>(a > 0x7f800000u, 0x7e00u | ((a >> 13) & 0x3ffu), 0x7c00u);
  const uint32_t tiny = ts_f32_bits(ts_bits_f32(a) + 0.5f) - 0x3f000000u;
  const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  uint32_t o = ts_where<uint32_t>(a < 0x38800000u, tiny, normal);
  o = ts_where<uint32_t>(a >= 0x47800000u, big, o);
  return static_cast<uint16_t>(o | ((u >> 16) & 0x8000u));
}
// Rounding in 32-bit lanes: adding c = 2**(exponent + 13), no less than 2**-1, rounds to
// fp16's place (nearest even), and subtracting c is exact.
static inline float ts_round_f16_int(float f) {
  const uint32_t u = ts_f32_bits(f);
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t e = a & 0x7f800000u;
  const float c = ts_bits_f32((e > 0x38800000u ? e : 0x38800000u) + 0x06800000u);
  uint32_t o = ts_f32_bits((ts_bits_f32(a) + c) - c);
  o = ts_where<uint32_t>(a >= 0x477ff000u, 0x7f800000u, o);
  o = ts_where<uint32_t>(a > 0x7f800000u, (a | 0x00400000u) & 0xffffe000u, o);
  return ts_bits_f32(o | (u & 0x80000000u));
}
// The bits of a float that is an fp16 value already: rebiased, or below 2**-14 the float
// add of 0.5 (exact here).
static inline uint16_t ts_f16_bits_int(float r) {
  const uint32_t u = ts_f32_bits(r);
  const uint32_t a = u & 0x7fffffffu;
  uint32_t o = ts_where<uint32_t>(a < 0x38800000u, ts_f32_bits(ts_bits_f32(a) + 0.5f) - 0x3f000000u, (a - 0x38000000u) >> 13);
  o = ts_where<uint32_t>(a >= 0x47800000u, 0x7c00u | ((a >> 13) & 0x3ffu), o);
  return static_cast<uint16_t>(o | ((u >> 16) & 0x8000u));
}
"""

_F16C = r"""
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__F16C__) && defined(__AVX2__) && !defined(TS_PORTABLE_HALF)
#define TS_F16C 1
// fp16 by F16C (see codegen/cpp/half.py): declared simd, so SIMD loops call the vector
// variants below; rounding is to nearest even (immediate 0), NaN kept and quieted, as
// the integer versions. `const`: no side effects, so calls vectorise and CSE.
extern "C" {
__attribute__((simd("notinbranch"), const, visibility("hidden"))) float ts_f16c_widen(uint32_t h);
__attribute__((simd("notinbranch"), const, visibility("hidden"))) uint32_t ts_f16c_narrow(float f);
__attribute__((simd("notinbranch"), const, visibility("hidden"))) float ts_f16c_round(float f);
}
typedef float ts_v4sf __attribute__((vector_size(16)));
typedef float ts_v8sf __attribute__((vector_size(32)));
typedef uint32_t ts_v4su __attribute__((vector_size(16)));
typedef uint32_t ts_v8su __attribute__((vector_size(32)));
typedef uint16_t ts_v4hu __attribute__((vector_size(8)));
typedef uint16_t ts_v8hu __attribute__((vector_size(16)));
typedef short ts_v8hi __attribute__((vector_size(16)));
#define TS_F16C_VARIANT extern "C" __attribute__((visibility("hidden")))
// SSE ('b': 4 lanes in xmm) and AVX ('c': floats in ymm, 32-bit integers as two xmm, a
// 32-bit integer result in one xmm of 4 lanes), AVX2 ('d': 8 lanes in ymm).
TS_F16C_VARIANT ts_v4sf _ZGVbN4v_ts_f16c_widen(ts_v4su h) {
  const ts_v4hu n = __builtin_convertvector(h, ts_v4hu);
  return __builtin_ia32_vcvtph2ps((ts_v8hi)__builtin_shufflevector(n, n, 0, 1, 2, 3, 0, 1, 2, 3));
}
TS_F16C_VARIANT ts_v4su _ZGVbN4v_ts_f16c_narrow(ts_v4sf f) {
  const ts_v8hu n = (ts_v8hu)__builtin_ia32_vcvtps2ph(f, 0);
  return __builtin_convertvector(__builtin_shufflevector(n, n, 0, 1, 2, 3), ts_v4su);
}
TS_F16C_VARIANT ts_v4sf _ZGVbN4v_ts_f16c_round(ts_v4sf f) {
  return __builtin_ia32_vcvtph2ps(__builtin_ia32_vcvtps2ph(f, 0));
}
TS_F16C_VARIANT ts_v8sf _ZGVcN8v_ts_f16c_widen(ts_v4su low, ts_v4su high) {
  const ts_v4hu l = __builtin_convertvector(low, ts_v4hu), h = __builtin_convertvector(high, ts_v4hu);
  return __builtin_ia32_vcvtph2ps256((ts_v8hi)__builtin_shufflevector(l, h, 0, 1, 2, 3, 4, 5, 6, 7));
}
TS_F16C_VARIANT ts_v4su _ZGVcN4v_ts_f16c_narrow(ts_v4sf f) { return _ZGVbN4v_ts_f16c_narrow(f); }
TS_F16C_VARIANT ts_v8sf _ZGVcN8v_ts_f16c_round(ts_v8sf f) {
  return __builtin_ia32_vcvtph2ps256(__builtin_ia32_vcvtps2ph256(f, 0));
}
TS_F16C_VARIANT ts_v8sf _ZGVdN8v_ts_f16c_widen(ts_v8su h) {
  return __builtin_ia32_vcvtph2ps256((ts_v8hi)__builtin_convertvector(h, ts_v8hu));
}
TS_F16C_VARIANT ts_v8su _ZGVdN8v_ts_f16c_narrow(ts_v8sf f) {
  return __builtin_convertvector((ts_v8hu)__builtin_ia32_vcvtps2ph256(f, 0), ts_v8su);
}
TS_F16C_VARIANT ts_v8sf _ZGVdN8v_ts_f16c_round(ts_v8sf f) {
  return __builtin_ia32_vcvtph2ps256(__builtin_ia32_vcvtps2ph256(f, 0));
}
#ifdef __AVX512F__
typedef float ts_v16sf __attribute__((vector_size(64)));
typedef uint32_t ts_v16su __attribute__((vector_size(64)));
typedef uint16_t ts_v16hu __attribute__((vector_size(32)));
typedef short ts_v16hi __attribute__((vector_size(32)));
// AVX-512 ('e': 16 lanes in zmm). Mask all ones; 4 is _MM_FROUND_CUR_DIRECTION (exact).
TS_F16C_VARIANT ts_v16sf _ZGVeN16v_ts_f16c_widen(ts_v16su h) {
  return __builtin_ia32_vcvtph2ps512_mask((ts_v16hi)__builtin_convertvector(h, ts_v16hu), ts_v16sf{}, 0xffff, 4);
}
TS_F16C_VARIANT ts_v16su _ZGVeN16v_ts_f16c_narrow(ts_v16sf f) {
  return __builtin_convertvector((ts_v16hu)__builtin_ia32_vcvtps2ph512_mask(f, 0, ts_v16hi{}, 0xffff), ts_v16su);
}
TS_F16C_VARIANT ts_v16sf _ZGVeN16v_ts_f16c_round(ts_v16sf f) {
  return __builtin_ia32_vcvtph2ps512_mask(__builtin_ia32_vcvtps2ph512_mask(f, 0, ts_v16hi{}, 0xffff), ts_v16sf{}, 0xffff, 4);
}
#endif
// The scalar versions: System V arguments in edi / xmm0, results in xmm0 / eax.
__asm__(
  ".pushsection .text\n"
  ".p2align 4\nts_f16c_widen:\n\tvmovd %edi, %xmm0\n\tvcvtph2ps %xmm0, %xmm0\n\tret\n"
  ".p2align 4\nts_f16c_narrow:\n\tvcvtps2ph $0, %xmm0, %xmm0\n\tvmovd %xmm0, %eax\n\tmovzwl %ax, %eax\n\tret\n"
  ".p2align 4\nts_f16c_round:\n\tvcvtps2ph $0, %xmm0, %xmm0\n\tvcvtph2ps %xmm0, %xmm0\n\tret\n"
  ".popsection\n");
static inline float ts_f16_to_f32(uint16_t h) { return ts_f16c_widen(h); }
static inline uint16_t ts_f32_to_f16(float f) { return static_cast<uint16_t>(ts_f16c_narrow(f)); }
static inline float ts_round_f16(float f) { return ts_f16c_round(f); }
static inline uint16_t ts_f16_bits(float r) { return static_cast<uint16_t>(ts_f16c_narrow(r)); }
static inline uint16_t ts_store_f16(float f) { return static_cast<uint16_t>(ts_f16c_narrow(f)); }
#else
static inline float ts_f16_to_f32(uint16_t h) { return ts_f16_to_f32_int(h); }
static inline uint16_t ts_f32_to_f16(float f) { return ts_f32_to_f16_int(f); }
static inline float ts_round_f16(float f) { return ts_round_f16_int(f); }
static inline uint16_t ts_f16_bits(float r) { return ts_f16_bits_int(r); }
// Rounding, then the bits (the narrowing costs more; the rounding is shared with other
// uses of the rounded value)
static inline uint16_t ts_store_f16(float f) { return ts_f16_bits_int(ts_round_f16_int(f)); }
#endif
"""

_BLOCKS = r"""
// A block of fp16 values widened into a float array (decision 0265): the row sums' lane
// loops read it instead of calling a vector conversion per vector of lanes, around which
// the lanes' accumulators were spilled (the vector ABI saves no register). F16C: one
// conversion instruction per 16 (AVX-512) or 8 values, inline; else the integer widening.
static inline void ts_f16_widen_block(const uint16_t* __restrict__ s, float* __restrict__ d, int64_t n) {
#ifdef TS_F16C
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) {
    ts_v16hi h; __builtin_memcpy(&h, s + i, 32);
    const ts_v16sf f = __builtin_ia32_vcvtph2ps512_mask(h, ts_v16sf{}, 0xffff, 4);
    __builtin_memcpy(d + i, &f, 64);
  }
#endif
  for (; i + 8 <= n; i += 8) {
    ts_v8hi h; __builtin_memcpy(&h, s + i, 16);
    const ts_v8sf f = __builtin_ia32_vcvtph2ps256(h);
    __builtin_memcpy(d + i, &f, 32);
  }
  for (; i < n; ++i) d[i] = ts_f16_to_f32(s[i]);
#else
  for (int64_t i = 0; i < n; ++i) d[i] = ts_f16_to_f32(s[i]);  // vectorised at -O3
#endif
}
// A block of floats narrowed into fp16 values (decision 0516): an elementwise loop's
// fp16 store, after the loop's lanes wrote the block's floats. Rounding to nearest even,
// as ts_store_f16.
static inline void ts_f16_narrow_block(const float* __restrict__ s, uint16_t* __restrict__ d, int64_t n) {
#ifdef TS_F16C
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) {
    ts_v16sf f; __builtin_memcpy(&f, s + i, 64);
    const ts_v16hi h = __builtin_ia32_vcvtps2ph512_mask(f, 0, ts_v16hi{}, 0xffff);
    __builtin_memcpy(d + i, &h, 32);
  }
#endif
  for (; i + 8 <= n; i += 8) {
    ts_v8sf f; __builtin_memcpy(&f, s + i, 32);
    const ts_v8hi h = __builtin_ia32_vcvtps2ph256(f, 0);
    __builtin_memcpy(d + i, &h, 16);
  }
  for (; i < n; ++i) d[i] = ts_store_f16(s[i]);
#else
  for (int64_t i = 0; i < n; ++i) d[i] = ts_store_f16(s[i]);  // vectorised at -O3
#endif
}
"""

_BF16_BLOCKS = r"""
// A block of floats narrowed into bf16 values (decision 0526): an elementwise loop's bf16
// store, after the loop's lanes wrote the block's floats; bit for bit ts_f32_to_bf16
// (checked on all 2**32 floats). AVX512_BF16's vcvtneps2bf16 rounds to nearest even and
// quiets NaN as that does, but flushes a subnormal input to zero: those lanes
// (vfpclassps) go in with exponent field 1, a normal float with the same low 16 bits, and
// come out with that bit (0x80) taken off again. Kernels loop over these blocks only where
// TS_AVX512BF16 is defined: with the integer narrowing, the blocks measured slower.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && !defined(TS_PORTABLE_HALF)
#define TS_AVX512BF16 1
typedef float ts_bf_v16sf __attribute__((vector_size(64)));
typedef int ts_bf_v16si __attribute__((vector_size(64)));
typedef short ts_bf_v16hi __attribute__((vector_size(32)));
#endif
static inline void ts_bf16_narrow_block(const float* __restrict__ s, uint16_t* __restrict__ d, int64_t n) {
  int64_t i = 0;
#ifdef TS_AVX512BF16
  for (; i + 16 <= n; i += 16) {
    ts_bf_v16sf f; __builtin_memcpy(&f, s + i, 64);
    const unsigned short sub = __builtin_ia32_fpclassps512_mask(f, 0x20, 0xffff);
    const ts_bf_v16si v = __builtin_ia32_paddd512_mask((ts_bf_v16si)f, ts_bf_v16si{} + 0x00800000, (ts_bf_v16si)f, sub);
    const auto c = __builtin_ia32_cvtneps2bf16_v16sf((ts_bf_v16sf)v);  // GCC 12: 16 shorts, 13: __bf16
    ts_bf_v16hi h; __builtin_memcpy(&h, &c, 32);
    h = __builtin_ia32_psubw256_mask(h, ts_bf_v16hi{} + 0x80, h, sub);
    __builtin_memcpy(d + i, &h, 32);
  }
#endif
  for (; i < n; ++i) d[i] = ts_f32_to_bf16(s[i]);
}
"""

#: What a kernel that converts fp16 adds after the prelude (whose ``ts_where`` and
#: ``ts_bits_f32``/``ts_f32_bits`` it uses).
HALF_PRELUDE = _PORTABLE + _F16C
#: What a kernel that widens blocks of fp16 loads adds after :data:`HALF_PRELUDE`.
HALF_BLOCKS = _BLOCKS

#: What a kernel that narrows blocks of bf16 stores adds after the prelude (whose
#: ``ts_f32_to_bf16`` it uses): ``ts_bf16_narrow_block`` and ``TS_AVX512BF16``.
BF16_BLOCKS = _BF16_BLOCKS

#: An fp16 load as the expression printer spells it: ``ts_f16_to_f32(buf_x[<index>])``.
_F16_LOAD = re.compile(r"ts_f16_to_f32\((buf_\w+)\[([^\[\]]+)\]\)")
#: A name that a line of a loop's body defines (``const int64_t r1 = ...;``).
_DEFINED = re.compile(r"\bconst\s+[\w:<>]+\s+(\w+)\s*=")
#: What an index may mention besides the loop variable: names defined before the loop.
_INVARIANT_TERM = re.compile(r"[\w\s*()-]+")


def _top_level_terms(index: str) -> list[str] | None:
    """``index`` split at its top-level `` + ``, or None when parentheses do not match."""
    terms, depth, start = [], 0, 0
    for i, char in enumerate(index):
        depth += (char == "(") - (char == ")")
        if depth < 0:
            return None
        if depth == 0 and index.startswith(" + ", i):
            terms.append(index[start:i].strip())
            start = i + 3
    terms.append(index[start:].strip())
    return terms if depth == 0 else None


def block_start(index: str, var: str, block: str, local: Sequence[str] = ()) -> str | None:
    """``index`` at the block's first element (``var`` replaced by ``block``) when ``index``
    is ``var`` plus terms that do not change within the loop (so that the loop's
    elements are one contiguous run of the buffer), else None. A term may not mention a
    value (``tmp<n>``), a lane index or a name in ``local`` (those the body defines)."""
    terms = _top_level_terms(index)
    if terms is None or terms.count(var) != 1:
        return None
    names = "|".join(re.escape(name) for name in (var, *local))
    mention = re.compile(rf"\b({names}|tmp\d+|\w+_lanes?)\b")
    for term in terms:
        if term != var and (mention.search(term) or not _INVARIANT_TERM.fullmatch(term)):
            return None
    return " + ".join(block if term == var else term for term in terms)


def widened_blocks(
    body: Sequence[str], var: str, block: str, count: int
) -> tuple[list[str], list[str]]:
    """The lines that widen, before a block of ``count`` elements of ``var`` from ``block``,
    each contiguous fp16 load of ``body`` into a float array, and ``body`` reading the
    arrays instead (decision 0265). No such load: no lines, ``body`` unchanged."""
    arrays: dict[tuple[str, str], str] = {}
    before: list[str] = []
    local = [name for line in body for name in _DEFINED.findall(line)]

    def replace(match: re.Match[str]) -> str:
        buffer, index = match.group(1), match.group(2)
        start = block_start(index, var, block, local)
        if start is None:
            return match.group(0)
        key = (buffer, index)
        if key not in arrays:
            arrays[key] = name = f"wide{len(arrays)}_{var}"
            before.extend(
                [
                    f"alignas(64) float {name}[{count}];",
                    f"ts_f16_widen_block(&{buffer}[{start}], {name}, {count});",
                ]
            )
        return f"{arrays[key]}[{var} - {block}]"

    rewritten = [_F16_LOAD.sub(replace, line) for line in body]
    for name in arrays.values():
        before, rewritten = _into_row_cache(before, rewritten, name, var, block)
    return before, rewritten


#: A body line that stores a value into a row cache at the loop's position (``codegen.
#: row_cache``): ``row_cache0[r0] = tmp1;``.
_CACHE_STORE = re.compile(r"(row_cache\d+)\[(\w+)\] = (tmp\d+);")


def _into_row_cache(
    before: list[str], body: list[str], name: str, var: str, block: str
) -> tuple[list[str], list[str]]:
    """Where ``body`` stores the widened array ``name``'s value (or a float cast of it)
    into a row cache at position ``var``, the block is widened into the cache itself:
    the array, its copy and the store go (decision 0519: one store and one load fewer per
    element in a norm's or softmax's first phase, whose cache later phases read)."""
    element = f"{name}[{var} - {block}]"
    values = {line.split()[2] for line in body if line.endswith(f" = {element};")}
    for line in body:  # `const float tmp1 = static_cast<float>(tmp0);` is the same value
        for value in list(values):
            if line.startswith("const float ") and line.endswith(
                f" = static_cast<float>({value});"
            ):
                values.add(line.split()[2])
    stores = [
        match
        for line in body
        if (match := _CACHE_STORE.fullmatch(line)) and match[2] == var and match[3] in values
    ]
    if not stores:
        return before, body
    cache = stores[0][1]
    target = f"&{cache}[{block}]"
    before = [
        line.replace(f", {name}, ", f", {target}, ")
        for line in before
        if not line.startswith(f"alignas(64) float {name}[")
    ]
    body = [line.replace(element, f"{cache}[{var}]") for line in body if line != stores[0].group(0)]
    return before, body


def uses_half(body: str) -> bool:
    """Whether a kernel's ``body`` (its C++ function) converts fp16."""
    return any(f"{name}(" in body for name in HALF_FUNCTIONS)


def half_prelude(body: str) -> str:
    """What a kernel whose function is ``body`` adds after the prelude for 16-bit floats:
    :data:`HALF_PRELUDE` where it converts fp16, and :data:`HALF_BLOCKS` where it widens
    or narrows fp16 blocks; :data:`BF16_BLOCKS` where it narrows bf16 blocks."""
    bf16 = BF16_BLOCKS if "ts_bf16_narrow_block(" in body else ""
    if not uses_half(body):
        return bf16
    blocks = "ts_f16_widen_block(" in body or "ts_f16_narrow_block(" in body
    return HALF_PRELUDE + (HALF_BLOCKS if blocks else "") + bf16
