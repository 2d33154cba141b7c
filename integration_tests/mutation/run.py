"""Mutation testing of the decomposition rules and the C++/Triton expression printers.

    python -m integration_tests.mutation.run --sample 300 --seed 0 --json out.json
    nox -s mutants -- --sample 300

Each mutant (see :mod:`.operators`) is tested in a forked child of one process that has
already imported torch, pytest and hypothesis: the child imports the mutated module from
its changed syntax tree (no file is written) and runs a small targeted test subset with
``-x``. A failing subset kills the mutant; one that passes lets it survive; one that runs
past its time limit (3x the unmutated subset's time, plus 20 s) counts as killed (a hang
is a detected change). Mutants on lines the unmutated subset never runs are reported as
``unreached`` survivors (GPU-only printer branches, say): they count in ``score``, not in
``score_on_reached_lines``. A token changed inside a comment of generated code is
equivalent: listed, never tested, not scored.

``--sample N`` tests a seeded random sample of N mutants (the same N and seed give the
same mutants), spread over the files in proportion to their mutant counts.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType, ModuleType
from typing import Any

import attrs

from integration_tests.mutation.operators import IN_A_COMMENT, Mutant, mutants, mutated_code

ROOT = Path(__file__).resolve().parents[2]
RULES = "packages/decomp/src/torchstrata/decomp/rules"
INDUCTOR = "packages/inductor/src/torchstrata/inductor"
PRINTERS = [
    f"{INDUCTOR}/{name}"
    for name in (
        "codegen/cpp/exprs.py",
        "codegen/triton/printer.py",
        "codegen/infix.py",
        "ir/exprs.py",
    )
]
DECOMP_TESTS = "packages/decomp/tests"
INDUCTOR_TESTS = "packages/inductor/tests"
#: Test files run for every mutant of a rules module, before the family's own files.
RULE_TESTS = [f"{DECOMP_TESTS}/test_rule_edge_values.py"]
#: Test files run for every mutant of a printer module (those that exist).
PRINTER_TESTS = [
    f"{INDUCTOR_TESTS}/test_printer_edge_values.py",
    f"{INDUCTOR_TESTS}/test_pointwise.py",
    f"{INDUCTOR_TESTS}/test_triton_printer.py",
]
PYTEST_OPTIONS = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly"]


def target_files() -> list[str]:
    """The mutated modules: every rules module and the four printer modules."""
    rules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / RULES).glob("*.py"))
    return [path for path in rules if not path.endswith("__init__.py")] + PRINTERS


def module_name(path: str) -> str:
    """``packages/x/src/torchstrata/x/a.py`` -> ``torchstrata.x.a``."""
    return path.split("/src/", 1)[1].removesuffix(".py").replace("/", ".")


def tests_for(path: str) -> list[str]:
    """The targeted test subset of one mutated module."""
    if path.startswith(INDUCTOR):
        return [t for t in PRINTER_TESTS if (ROOT / t).exists()]
    source = (ROOT / path).read_text()
    ops = set(re.findall(r'"aten\.(\w+)\.', source))
    ops |= set(re.findall(r'"aten\.(\w+?)\{', source))  # f"aten.reflection_pad{r}d..."
    family = []
    for test in sorted((ROOT / DECOMP_TESTS).glob("test_*.py")):
        text = test.read_text()
        if any(f'"{op}.' in text or f'"{op}"' in text or f'"{op}' in text for op in ops):
            family.append(str(test.relative_to(ROOT)))
    if not family:  # the op's name anywhere (a parametrized list), never the whole suite
        tests = sorted((ROOT / DECOMP_TESTS).glob("test_*.py"))
        family = [str(t.relative_to(ROOT)) for t in tests if any(op in t.read_text() for op in ops)]
    family = family or [DECOMP_TESTS]
    return [t for t in RULE_TESTS if (ROOT / t).exists()] + [
        t for t in family if t not in RULE_TESTS
    ]


class _MutatedModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves one module from a code object instead of its file."""

    def __init__(self, name: str, path: str, code: CodeType) -> None:
        self.name, self.path, self.code = name, path, code

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=self.path)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__file__ = self.path
        exec(self.code, module.__dict__)


def _quiet() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def _in_child(body: Callable[[], int], limit: float) -> tuple[str, float]:
    """Run ``body`` in a forked child; ('passed'|'failed'|'timeout', seconds)."""
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _quiet()
            code = body()
        finally:
            os._exit(code)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            elapsed = time.monotonic() - start
            return ("passed" if os.waitstatus_to_exitcode(status) == 0 else "failed"), elapsed
        if time.monotonic() - start > limit:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - start
        time.sleep(0.05)


def _run_tests(tests: list[str]) -> int:
    import pytest

    return int(pytest.main([*PYTEST_OPTIONS, *tests]))


def _baseline(path: str, source: str, tests: list[str]) -> tuple[float, set[int]]:
    """Run the unmutated subset: its seconds and the lines of ``path`` it reached. The
    module is served from ``source`` as the mutants are (the same file name to trace,
    wherever the package is installed)."""
    lines_file = Path(tempfile.gettempdir()) / f"torchstrata-mutation-lines-{os.getpid()}.json"
    filename = str(ROOT / path)
    finder = _MutatedModule(module_name(path), filename, compile(source, filename, "exec"))

    def traced() -> int:
        reached: set[int] = set()

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                reached.add(frame.f_lineno)
            return local

        def tracer(frame: FrameType, event: str, arg: Any) -> Any:
            if frame.f_code.co_filename == filename:
                reached.add(frame.f_lineno)
                return local
            return None

        sys.meta_path.insert(0, finder)
        sys.settrace(tracer)
        code = _run_tests(tests)
        sys.settrace(None)
        lines_file.write_text(json.dumps(sorted(reached)))
        return code

    outcome, seconds = _in_child(traced, limit=1800)
    if outcome != "passed":
        raise SystemExit(f"the unmutated tests of {path} do not pass: {tests}")
    reached = set(json.loads(lines_file.read_text()))
    lines_file.unlink()
    return seconds, reached


def _test_mutant(mutant: Mutant, source: str, tests: list[str], limit: float) -> tuple[str, float]:
    code = compile(mutated_code(mutant, source), str(ROOT / mutant.path), "exec")
    finder = _MutatedModule(module_name(mutant.path), str(ROOT / mutant.path), code)

    def body() -> int:
        sys.meta_path.insert(0, finder)
        return _run_tests(tests)

    outcome, seconds = _in_child(body, limit)
    return {"failed": "killed", "timeout": "killed (timeout)"}.get(outcome, "survived"), seconds


def sample(every: dict[str, list[Mutant]], size: int | None, seed: int) -> list[Mutant]:
    """``size`` mutants drawn per file in proportion to its count (all when None)."""
    chosen: list[Mutant] = []
    total = sum(len(found) for found in every.values())
    rng = random.Random(seed)
    for found in every.values():
        if size is None or size >= total:
            chosen += found
            continue
        share = max(1, round(size * len(found) / total)) if found else 0
        chosen += sorted(rng.sample(found, min(share, len(found))), key=lambda m: m.index)
    return chosen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=None, help="mutants to test (all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--files",
        default="",
        help="only mutants of paths containing one of these (comma-separated)",
    )
    parser.add_argument("--json", default="", help="write every result here")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument(
        "--skip-tests", default="", help="comma-separated test file names left out (a baseline)"
    )
    args = parser.parse_args(argv)
    import hypothesis  # noqa: F401 - imported once, before the forks
    import pytest  # noqa: F401
    import torch  # noqa: F401

    files = target_files()
    sources = {path: (ROOT / path).read_text() for path in files}  # read once
    every = {path: mutants(path, sources[path]) for path in files}
    # sampled over every file, then filtered: `--files x` tests the mutants of x that the
    # whole run with the same sample and seed would test
    wanted = [name for name in args.files.split(",") if name]
    chosen = [
        m
        for m in sample(every, args.sample, args.seed)
        if not wanted or any(name in m.path for name in wanted)
    ]
    if args.list:
        for m in chosen:
            print(f"{m.path}:{m.line}: #{m.index} {m.description}")
        return
    results = []
    by_file: dict[str, list[Mutant]] = {}
    for m in chosen:
        by_file.setdefault(m.path, []).append(m)
    skipped = {name for name in args.skip_tests.split(",") if name}
    plan = {  # fixed before any test runs
        path: [t for t in tests_for(path) if Path(t).name not in skipped] for path in by_file
    }
    for path, group in by_file.items():
        tests = plan[path]
        seconds, reached = _baseline(path, sources[path], tests)
        limit = 3 * seconds + 20
        print(f"{path}: {len(group)} mutants, tests {tests} ({seconds:.1f} s)", flush=True)
        for m in group:
            if m.description.endswith(IN_A_COMMENT):
                results.append({**attrs.asdict(m), "status": "equivalent", "reached": False})
                print(f"  {'equivalent':16s}   -    line {m.line}: {m.description}", flush=True)
                continue
            status, took = _test_mutant(m, sources[path], tests, limit)
            results.append({**attrs.asdict(m), "status": status, "reached": m.line in reached})
            print(f"  {status:16s} {took:5.1f}s  line {m.line}: {m.description}", flush=True)
    killed = sum(r["status"].startswith("killed") for r in results)
    tested = [r for r in results if r["status"] != "equivalent"]
    survivors = [r for r in tested if r["status"] == "survived"]
    summary = {
        "mutants_total": sum(len(found) for found in every.values()),
        "tested": len(tested),
        "equivalent_in_comments": len(results) - len(tested),
        "killed": killed,
        "score": round(killed / len(tested), 4) if tested else None,
        "unreached_survivors": sum(not r["reached"] for r in survivors),
        "score_on_reached_lines": round(
            killed / max(1, len(tested) - sum(not r["reached"] for r in survivors)), 4
        ),
        "survivors": [f"{r['path']}:{r['line']}: {r['description']}" for r in survivors],
        "seed": args.seed,
        "sample": args.sample,
        "command": "python -m integration_tests.mutation.run " + " ".join(sys.argv[1:]),
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "mutants": results}, indent=1))


if __name__ == "__main__":
    main()
