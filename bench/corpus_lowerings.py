"""How the dynamic corpus's sizes are lowered by a codegen (issue 33, 0381/0382).

Each corpus program (``integration_tests/dynamic_corpus/programs.py``) is compiled with
``codegen="cpp"`` (``--codegen triton``: Triton's interpreter on CPU tensors) and called at each of its sizes as the corpus test calls it, every
result compared with eager's. After each program, ``size_lowering_stats()`` says how its
new sizes were served: ``symbolic`` (a lowering made once for many sizes), ``reused``,
``per_size`` and ``fallback: <reason>``. The report: one line per program, the totals,
the programs with a symbolic lowering, and each fallback reason with the programs that
gave it::

    python -m bench.corpus_lowerings
    python -m bench.corpus_lowerings --only slice_half pad_time
    python -m bench.corpus_lowerings --hash-sites
    python -m bench.corpus_lowerings --codegen triton --lowerings 4

``--dynamo`` compiles each program with ``torch.compile(fn, backend="torchstrata")``
instead (Dynamo's policy for the program's ``dynamic``; decision 0455), and
``--per-size`` turns the compile option ``symbolic_lowering`` off (every size of a
symbolic graph lowered on its own: the Dynamo backend before 0455)::

    python -m bench.corpus_lowerings --dynamo
    python -m bench.corpus_lowerings --dynamo --per-size

``--hash-sites`` also lists the lines that hashed a ``SizeValue`` (a dict or set key, a
lookup) and how often: the sites where a size looked up among ints would miss without
recording a condition (decision 0405). ``--lowerings N`` sets the compile option
``symbolic_lowerings`` (lowerings for many sizes per entry, decision 0435); the report
ends with the CPU time the corpus took (the process's and its C++ compilers').
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import warnings
from collections import Counter
from typing import Any

import torch

from bench.cold import CACHE_VARIABLES


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return False
        try:
            torch.testing.assert_close(got, want, equal_nan=True)
        except AssertionError:
            return False
        return True
    if isinstance(want, list | tuple):
        return (
            type(got) is type(want)
            and len(got) == len(want)
            and all(_same(a, b) for a, b in zip(got, want, strict=True))
        )
    return bool(type(got) is type(want) and got == want)


def run_program(
    program: Any,
    codegen: str = "cpp",
    lowerings: int | None = None,
    dynamo: bool = False,
    per_size: bool = False,
) -> tuple[dict[str, int], list[int]]:
    """``program`` compiled by ``codegen`` (with at most ``lowerings`` symbolic lowerings
    per entry; None: the default; through ``torch.compile`` with ``dynamo``; every size
    on its own with ``per_size``) and called at each of its sizes: its lowering counts
    and the sizes whose result differed from eager's."""
    import torchstrata.runtime as rt
    from integration_tests.dynamic_corpus.harness import eager_copies

    rt.reset_size_lowering_stats()
    options: dict[str, Any] = {} if lowerings is None else {"symbolic_lowerings": lowerings}
    options |= {"symbolic_lowering": False} if per_size else {}
    if dynamo:
        torch.compiler.reset()
        compiled = torch.compile(
            program.fn,
            backend="torchstrata",
            dynamic=program.dynamic,
            options={"codegen": codegen, **options},
        )
    else:
        compiled = rt.compile(program.fn, codegen=codegen, dynamic=program.dynamic, options=options)
    torch.manual_seed(0)
    wrong = []
    # the lowerings made here, not ones an earlier run stored (decision 0450)
    with rt.graph_cache_suspended():
        for size in program.sizes:
            args = program.make_args(size)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = program.fn(*eager_copies(args))  # a program may write its inputs
                got = compiled(*args)
            if not _same(got, want):
                wrong.append(size)
    return rt.size_lowering_stats(), wrong


def _hash_census() -> Counter[str]:
    """Count, by calling line, each hash of a ``SizeValue`` from now on."""
    from torchstrata.core import size_values

    sites: Counter[str] = Counter()
    plain = size_values.SizeValue.__hash__

    def counted(self: Any) -> int:
        frame = sys._getframe(1)
        while frame.f_back is not None and frame.f_code.co_filename.startswith("<attrs"):
            frame = frame.f_back  # an attrs class's __hash__: the line that hashed it
        sites[f"{frame.f_code.co_filename.split('/torchstrata/')[-1]}:{frame.f_lineno}"] += 1
        return plain(self)

    size_values.SizeValue.__hash__ = counted  # type: ignore[method-assign]
    return sites


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (the C++ compilers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv: list[str] | None = None) -> None:
    """Run the corpus and print the report (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="program names (default: all)")
    parser.add_argument("--hash-sites", action="store_true", help="count SizeValue hashes")
    parser.add_argument("--codegen", default="cpp", help="cpp (default) or triton")
    parser.add_argument("--lowerings", type=int, help="symbolic lowerings per entry")
    parser.add_argument("--dynamo", action="store_true", help="torch.compile(backend=...)")
    parser.add_argument("--per-size", action="store_true", help="symbolic_lowering off")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    started = _cpu_seconds()
    with tempfile.TemporaryDirectory(prefix="corpus-lowerings-") as scratch:
        for variable in CACHE_VARIABLES:
            os.environ[variable] = os.path.join(scratch, variable.lower())
        sites = _hash_census() if args.hash_sites else Counter()
        from integration_tests.dynamic_corpus.programs import PROGRAMS

        totals: Counter[str] = Counter()
        reasons: dict[str, list[str]] = {}
        symbolic, wrong_programs = [], []
        for program in PROGRAMS:
            if args.only and program.name not in args.only:
                continue
            stats, wrong = run_program(
                program, args.codegen, args.lowerings, args.dynamo, args.per_size
            )
            print(
                f"{program.name:32s} {dict(sorted(stats.items()))}"
                + (f" WRONG {wrong}" if wrong else ""),
                flush=True,
            )
            totals.update({k: v for k, v in stats.items() if not k.startswith("fallback")})
            for key in stats:
                if key.startswith("fallback: "):
                    reasons.setdefault(key[len("fallback: ") :], []).append(program.name)
            if stats.get("symbolic"):
                symbolic.append(program.name)
            if wrong:
                wrong_programs.append(program.name)
        count = len(args.only) if args.only else len(PROGRAMS)
        print(f"\ntotals: {dict(sorted(totals.items()))}")
        print(f"programs with a symbolic lowering: {len(symbolic)} of {count}")
        print(f"programs with a result unlike eager's: {len(wrong_programs)} {wrong_programs}")
        print("\nfallback reasons:")
        for reason, names in sorted(reasons.items(), key=lambda item: -len(item[1])):
            print(f"  {len(names):3d}  {reason}\n        {' '.join(names)}")
        print(f"\nCPU time (process and its compilers): {_cpu_seconds() - started:.1f} s")
        if args.hash_sites:
            print("\nSizeValue hashes by line:")
            for site, n in sites.most_common():
                print(f"  {n:7d}  {site}")


if __name__ == "__main__":
    main()
