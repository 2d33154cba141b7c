"""FetchedValues: guard sources rewritten to read the values fetched before them."""

from __future__ import annotations

import ast

from hypothesis import given, settings
from hypothesis import strategies as st

from torchstrata.core import FetchedValues
from torchstrata.core.guard_sources import _read_texts, chain_ends, normalised


def _fetched(*sources: str) -> FetchedValues:
    fetched = FetchedValues()
    for index, source in enumerate(sources):
        fetched.add(source, f"_v{index}")
    return fetched


def test_nothing_fetched_leaves_a_source_as_written():
    assert FetchedValues().expression("L['self'] . weight") == "L['self'] . weight"


def test_the_longest_fetched_subexpression_is_read_from_its_variable():
    fetched = _fetched("L['self']", "L['self']._modules['0']")
    assert fetched.expression("L['self']._modules['0'].weight") == "_v1.weight"
    assert fetched.expression("L['self'].training") == "_v0.training"
    assert fetched.get("L['self']") == "_v0" and "L['self']" in fetched


def test_inside_calls_and_each_operand_of_an_or():
    fetched = _fetched("L['m'].__dict__")
    hooks = "L['m'].__dict__['_forward_hooks'] or L['m'].__dict__['_backward_hooks'] or None"
    assert fetched.expression(hooks) == "_v0['_forward_hooks'] or _v0['_backward_hooks'] or None"
    assert fetched.expression("len(L['m'].__dict__['shape'])") == "len(_v0['shape'])"


def test_sources_match_by_expression_not_by_text():
    """Spacing and quotes do not matter; text inside a string key is never a match."""
    fetched = _fetched('L["x"]')
    assert fetched.expression("L['x'] [0]") == "_v0[0]"
    assert fetched.expression("G[\"L['x']\"]") == "G[\"L['x']\"]"
    assert fetched.expression("L['xy']") == "L['xy']"


def test_a_read_two_sources_make_is_fetched_once_before_the_first():
    sources = ["L['m']._parameters['weight']", "L['m']._parameters['bias']", "L['é'].x", "L['é'].y"]
    fetched = FetchedValues(sources)
    assert fetched.reads_before(sources[0]) == ["L['m']", "L['m']._parameters"]
    fetched.add("L['m']", "_v0")
    fetched.add("L['m']._parameters", "_v1")
    assert fetched.reads_before(sources[1]) == []
    assert fetched.expression(sources[1]) == "_v1['bias']"
    assert fetched.reads_before(sources[2]) == ["L['é']"]  # offsets count UTF-8 bytes


def test_reads_that_may_not_happen_are_not_fetched_up_front():
    """An ``or`` operand after the first, a conditional's branches and a lambda body may
    never be evaluated: fetching them first could fail a guard that holds."""
    sources = [
        "L['a'] or L['b'].c",
        "L['b'].c.d",
        "L['x'].y if L['t'] else L['x'].y",
        "tuple(map(lambda v: v.w, L['s']))",
        "L['s'].w",
    ]
    fetched = FetchedValues(sources)
    assert all(fetched.reads_before(source) == [] for source in sources[:2])
    assert fetched.reads_before(sources[2]) == []
    fetched.add("L['s']", "_v0")
    assert fetched.expression(sources[3]) == "tuple(map(lambda v: v.w, _v0))"


# Read chains take a path without ast (chain_ends); in parentheses, the same source takes
# the ast path: both must give the same texts.
_names = st.sampled_from(["L", "G", "x", "_self", "A", "None", "if", "match", "m_1", "_"])
_segments = st.lists(
    st.one_of(
        st.sampled_from(["_modules", "weight", "__dict__", "class", "True", "L"]).map(
            lambda name: f".{name}"
        ),
        st.sampled_from(["self", "0", "17", "_forward_hooks", "L", "x y"]).map(
            lambda key: f"[{key!r}]"
        ),
        st.sampled_from(["0", "3", "12", "01", "-1"]).map(lambda index: f"[{index}]"),
    ),
    max_size=5,
)


def _spaced(source: str) -> str:
    """``source`` in parentheses: the same expression, not a chain."""
    return f"( {source} )"


def _parses(source: str) -> bool:
    try:
        ast.parse(source, mode="eval")
    except SyntaxError:
        return False
    return True


@given(_names, _segments)
@settings(max_examples=400, deadline=None)
def test_read_chains_without_ast_agree_with_the_parse(name: str, segments: list[str]) -> None:
    source = name + "".join(segments)
    if not _parses(source):
        assert chain_ends(source) is None
        return
    spaced = _spaced(source)
    assert chain_ends(spaced) is None
    assert normalised(source) == normalised(spaced) == ast.unparse(ast.parse(source, mode="eval"))
    assert _read_texts(source) == _read_texts(spaced)
    prefixes = [source[:end] for end in chain_ends(source) or ()]
    for fetched_prefixes in (prefixes[:1], prefixes[1:2], prefixes[-2:-1], prefixes):
        fetched = _fetched(*fetched_prefixes, "G['unrelated']")
        assert fetched.expression(source) == fetched.expression(spaced)
