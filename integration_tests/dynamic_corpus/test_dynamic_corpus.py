"""Every corpus program (:mod:`.programs`) at every one of its sizes: each call equal to
eager's, no warning, and exactly the entries the dynamic-shapes policy should make
(decision 0200; the counts in :func:`.harness.expected_entries`); and each program's
symbolic graph printed, parsed back to the same text, and verified (decision 0211)."""

from __future__ import annotations

import inspect

import pytest
import torch

from torchstrata.capture import capture
from torchstrata.core import SymbolicSizes, parse, symbolic_scope, verify

from .harness import (
    EDGE_SIZES,
    Program,
    call_all,
    compile_program,
    expected_entries,
    policy_entries,
    static_reasons,
)
from .programs import PROGRAMS


def test_the_corpus_is_forty_programs_over_eight_sizes_with_zero_and_one():
    assert len({program.name for program in PROGRAMS}) == len(PROGRAMS) >= 40
    assert all(len(program.sizes) >= 8 for program in PROGRAMS)
    edges = [p for p in PROGRAMS if {0, 1} <= set(p.sizes)]
    assert len(edges) >= 50  # the others' eager raises at 0 or 1 (see programs.py)
    assert all(any(size % 2 for size in program.sizes) for program in PROGRAMS)


def test_the_policy_model():
    # size 1 static; symbolic from 16 (a second size); 0 static; the rest symbolic
    assert policy_entries(EDGE_SIZES, None) == 3
    # a first size >= 2 is compiled static before the second makes it symbolic
    assert policy_entries((16, 17, 0, 1, 5), None) == 4
    assert policy_entries((16, 17, 0, 1, 5), True) == 3
    assert policy_entries((3, 4, 3), False) == 2


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_corpus_program(program: Program, caplog: pytest.LogCaptureFixture):
    compiled = compile_program(program)
    call_all(compiled, program, caplog)
    compiled = getattr(compiled, "compiled_forward", compiled)  # a module's forward
    entries = len(compiled.cache)
    why = "\n".join([*compiled.recompile_reasons, *static_reasons(caplog)])
    assert entries == expected_entries(program), f"{entries} entries:\n{why}"
    assert len(compiled.recompile_reasons) == entries - 1
    # a symbolic capture never failed; only an entry whose every symbol was specialised
    # (a size decided on) may be static
    unexpected = [
        r for r in static_reasons(caplog) if not r.endswith("no dimension stayed symbolic")
    ]
    assert not unexpected, why
    if not (program.per_size or program.extra_entries):
        assert not static_reasons(caplog), why


#: Programs whose C++ kernels differ most from the sixteen's (test_dynamic_shapes.py builds
#: three of those): a mask from arange, a growing cache, pad, an int32 cumsum. Every program
#: passes under codegen="cpp" too, but 57 programs times 8 C++ builds take minutes.
CPP = ("causal_attention", "kv_cache_attention", "pad_time", "int32_where_cumsum")


@pytest.mark.parametrize("program", [p for p in PROGRAMS if p.name in CPP], ids=lambda p: p.name)
def test_corpus_program_cpp(program: Program, caplog: pytest.LogCaptureFixture):
    compiled = compile_program(program, codegen="cpp")
    call_all(compiled, program, caplog)
    assert len(compiled.cache) == expected_entries(program)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_corpus_graph_text_round_trips_and_verifies(program: Program):
    # the dimensions that change with the program's size symbolic (decision 0211)
    fn = program.fn.forward if isinstance(program.fn, torch.nn.Module) else program.fn
    torch.manual_seed(0)
    args, other = program.make_args(17), program.make_args(9)
    names = inspect.signature(fn).parameters
    dims = {
        f"L[{name!r}]": [d for d in range(a.dim()) if a.shape[d] != b.shape[d]]
        for name, a, b in zip(names, args, other, strict=False)
    }
    sizes = SymbolicSizes(dims)
    with symbolic_scope(sizes):
        graph = capture(fn, args, {}).graphs[0]
        guards = sizes.guard_exprs()
        verify(graph)
    assert sizes.guard_exprs() == guards  # verifying decided nothing on a size
    text = str(graph)
    assert ("symbol s" in text) is not program.per_size  # range(n) specialises n
    parsed = parse(text)
    assert str(parsed) == text
    verify(parsed)
