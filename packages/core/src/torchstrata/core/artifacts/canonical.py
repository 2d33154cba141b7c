"""Generated source with its graph-specific names replaced, so repeated layers share one entry.

Sixteen identical transformer layers give sixteen kernels that differ only in the names
their generator took from graph nodes (``buf_mm`` in one, ``buf_mm_3`` in the next,
``acc_softmax_2_amax``, ...) and in the kernel's own name. Renaming those identifiers
by order of first appearance makes the sixteen sources one text: one cache key, one
build, one load.

The renaming is an alpha-renaming, so it cannot change what the code computes: every
identifier token that starts with one of the generator's prefixes is renamed (to the
prefix and a number), none is skipped, and distinct tokens get distinct numbers, so no
two names merge and no renamed name can meet an unrenamed one (which would not carry
the prefix). Attribute names (after ``.``) and qualified names (after ``::``) are left
alone: they name library members, not generated values.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence

#: An identifier token's start: not inside a word, not an attribute, not qualified.
_TOKEN_START = r"(?<![\w.])(?<!::)"


@functools.lru_cache(maxsize=64)
def _renamed_tokens(prefixes: tuple[str, ...], entry: str) -> re.Pattern[str]:
    """The tokens :func:`canonical_source` may rename: those starting with one of
    ``prefixes`` and ``entry`` (the regular expression engine skips every other token
    without calling back: most of a C++ kernel's text is its shared prelude)."""
    starts = "|".join(re.escape(p) for p in sorted({*prefixes, entry}, key=len, reverse=True))
    return re.compile(rf"{_TOKEN_START}(?:{starts})\w*")


def canonical_source(
    source: str, entry: str, canonical_entry: str, prefixes: Sequence[str]
) -> tuple[str, str]:
    """``source`` with every identifier starting with one of ``prefixes`` renamed
    ``<prefix>v<n>`` and ``entry`` (the kernel's name) renamed
    ``<canonical_entry>_<hash>``, the hash of the renamed text: kernels that are the same
    but for those names get the same text, and different kernels different entry names
    (which profilers show).

    Returns the new text and the entry point's name in it (``entry``, and the source
    unchanged, when ``canonical_entry`` already occurs in it).
    """
    if re.search(rf"\b{re.escape(canonical_entry)}\w*", source):
        return source, entry
    ordered = sorted(prefixes, key=len, reverse=True)
    renamed: dict[str, str] = {entry: canonical_entry}

    def rename(match: re.Match[str]) -> str:
        token = match.group(0)
        known = renamed.get(token)
        if known is not None:
            return known
        for prefix in ordered:
            if token.startswith(prefix):
                known = renamed[token] = f"{prefix}v{len(renamed)}"
                return known
        return token

    text = _renamed_tokens(tuple(prefixes), entry).sub(rename, source)
    # ``canonical_entry`` (no token of the source starts with it) is the entry alone.
    symbol = f"{canonical_entry}_{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    return re.sub(rf"\b{re.escape(canonical_entry)}\b", symbol, text), symbol
