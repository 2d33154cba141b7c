"""Developer and CI sessions for the torchstrata monorepo.

    nox -l                          list sessions
    nox                             lint, typecheck, tests (both torch versions)
    nox -s tests                    the test matrix: torch 2.13.0 and 2.14.1
    nox -s "tests(torch='2.13.0')"  one cell of the matrix; `-- -k name -x` goes to pytest
    nox -s isolated                 each package installed alone with its declared deps
    nox -s isolated -- decomp       one package (or several); `-- --all-tests` all its tests
    nox -s lint typecheck
    nox -s demo                     python examples/demo.py
    nox -s bench -- --device cpu    python -m bench
    nox -s mutants -- --sample 120  mutation testing of the decomp rules and expression printers
    nox -s tests-py313              core and capture tests under CPython 3.13 (not in CI)

Every session builds a fresh virtualenv (pass `-r` locally to reuse one). The stage
packages are installed as real (non-editable) wheels, built from their local paths once
per nox run, so the entry points the tests rely on are the ones a user would get.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path

import nox
from nox.command import CommandFailed

nox.needs_version = ">=2025.2.9"  # `env={"VAR": None}` unsets a variable
nox.options.default_venv_backend = "venv"
nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.error_on_external_run = True

ROOT = Path(__file__).parent
PYTHON = "3.11"
DEFAULT_TORCH = "2.13.0"
TORCH_VERSIONS = ["2.13.0", "2.14.1"]
STAGES = ["capture", "autograd", "decomp", "inductor", "runtime"]
PACKAGES = ["core", *STAGES]
# The torchstrata-* packages each one declares. They are installed from their local
# wheels in the same pip call, so pip never looks for torchstrata-core on an index;
# everything else (attrs, pluggy, triton, ...) comes from the package's own metadata.
LOCAL_DEPS = {"core": [], **{stage: ["core"] for stage in STAGES}}
# expecttest: torch.testing._internal (OpInfo); pytest-xdist: the suite in parallel processes
TEST_TOOLS = ["pytest", "pytest-xdist", "hypothesis", "expecttest"]
# pytest processes per test session (`-n`): the CI machine has 2 cores, and the suite
# (compiles, C++ builds, the Triton interpreter) keeps both busy: 2.6 min against ~5 in one
# process. TORCHSTRATA_TEST_WORKERS=0 runs it in one process (pdb, -x, output ordering).
TEST_WORKERS = os.environ.get("TORCHSTRATA_TEST_WORKERS", "2")
LINT_PATHS = ["packages", "integration_tests", "examples", "bench", "noxfile.py"]
# Tests opt in to the Triton interpreter themselves; an outer TRITON_INTERPRET=1
# would silently change what every other test exercises.
# PYTHONDONTWRITEBYTECODE=1 (set on the CI machine) with pip's --no-compile left no .pyc
# anywhere: every pytest worker and every subprocess a test starts compiled torch, sympy,
# the stages and the test modules from source again (import torch + torchstrata.runtime:
# 2.9 CPU-s with .pyc files, 6.6 without). Unset, each module is compiled once per session
# into the session's fresh virtualenv (and the test directories' __pycache__, which
# Python checks against the source): runtime's tests, -n 0, from an empty cache both
# times, 62 -> 41 CPU-s.
TEST_ENV: dict[str, str | None] = {"TRITON_INTERPRET": None, "PYTHONDONTWRITEBYTECODE": None}


# CI sets this: a session's virtualenv (torch alone is 1-6 GB) is deleted when the
# session ends, so a run needs the disk of its largest session, not of all ten.
DROP_VENVS = os.environ.get("TORCHSTRATA_NOX_DROP_VENVS") == "1"


def _drops_venv(func: Callable[..., None]) -> Callable[..., None]:
    """Delete the session's virtualenv after it ran (pass or fail) when DROP_VENVS is set."""

    @functools.wraps(func)
    def run(session: nox.Session, **kwargs: str) -> None:
        try:
            func(session, **kwargs)
        finally:
            location = getattr(session.virtualenv, "location", None)
            if DROP_VENVS and location and Path(location).is_dir():
                shutil.rmtree(location, ignore_errors=True)
                session.log(f"dropped virtualenv {location}")

    return run


def _package_path(name: str) -> str:
    return str(ROOT / "packages" / name)


def _example_packages() -> list[str]:
    """Plugin packages under examples/ (any subdirectory with a pyproject.toml)."""
    return sorted(str(p.parent) for p in ROOT.glob("examples/*/pyproject.toml"))


#: pip options for every install: no byte-compiling at install time (torch and triton hold
#: thousands of modules; Python compiles the few a session imports, once, where it may write
#: them: see ``TEST_ENV``). A fresh torch 2.13.0 + triton install on the 2-core CI machine:
#: 63 s -> 24 s.
PIP_OPTIONS = ("--no-compile",)


#: Where :func:`_wheels` put each local project's wheel, by project path (one nox run).
_WHEELS: dict[str, str] = {}


def _wheels(session: nox.Session, *paths: str) -> list[str]:
    """The wheels of these local project paths, built once per nox run for all sessions.

    pip builds a project path in a fresh build environment (hatchling installed into it)
    every time it installs it: CI installed the eight local projects 35 times (8 in
    typecheck and in each tests session, 11 in isolated), ~4 s each on 2 cores. They are
    built here once, with the same build isolation, into a temporary folder that this nox
    run deletes when it exits; every session installs the wheels, as a user would."""
    if not _WHEELS:
        folder = tempfile.mkdtemp(prefix="torchstrata-wheels-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        projects = [_package_path(name) for name in PACKAGES] + _example_packages()
        session.run(
            "python", "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", folder,
            *projects,
        )  # fmt: skip
        for project in projects:
            with open(Path(project) / "pyproject.toml", "rb") as file:
                name = tomllib.load(file)["project"]["name"]
            stem = re.sub(r"[-_.]+", "_", name).lower()
            (wheel,) = Path(folder).glob(f"{stem}-*.whl")
            _WHEELS[project] = str(wheel)
    return [_WHEELS[path] for path in paths]


def _install_everything(session: nox.Session, torch: str, *extra: str) -> None:
    """Install torch, triton, all six packages and the example plugins in one resolve."""
    session.install(
        *PIP_OPTIONS,
        f"torch=={torch}",
        "triton",
        *extra,
        *_wheels(session, *(_package_path(name) for name in PACKAGES), *_example_packages()),
    )


def _workers() -> list[str]:
    """pytest-xdist's options for ``TEST_WORKERS`` processes (none for 0)."""
    return [] if TEST_WORKERS == "0" else ["-n", TEST_WORKERS]


def _existing(paths: list[str]) -> list[str]:
    return [p for p in paths if (ROOT / p).exists()]


@nox.session(python=PYTHON)
@nox.parametrize("torch", TORCH_VERSIONS)
@_drops_venv
def tests(session: nox.Session, torch: str) -> None:
    """Unit tests of every package plus integration_tests/, against one torch version."""
    _install_everything(session, torch, *TEST_TOOLS)
    # With TEST_ENV this also writes torch's bytecode before the workers start (two workers
    # would both compile the same modules at once).
    session.run("python", "-c", "import torch; print('torch', torch.__version__)", env=TEST_ENV)
    test_dirs = _existing([f"packages/{name}/tests" for name in PACKAGES] + ["integration_tests"])
    session.run("pytest", *_workers(), "--durations=15", *test_dirs, *session.posargs, env=TEST_ENV)


@nox.session(name="tests-py313", python="3.13")
@_drops_venv
def tests_py313(session: nox.Session) -> None:
    """The core and capture tests under CPython 3.13, whose bytecode capture interprets
    beside 3.11's and 3.12's. Outside the default sessions: a second torch install (the
    3.13 wheel, ~530 MB) does not fit CI's time budget. `-- -k corpus` goes to pytest."""
    session.install(
        *PIP_OPTIONS, f"torch=={DEFAULT_TORCH}", *TEST_TOOLS, _package_path("core"),
        _package_path("capture"),
    )  # fmt: skip
    session.run("python", "-c", "import sys, torch; print(sys.version, torch.__version__)")
    session.run(
        "pytest", *_workers(), "packages/core/tests", "packages/capture/tests",
        *session.posargs, env=TEST_ENV,
    )  # fmt: skip


def _installed(session: nox.Session) -> set[str]:
    """The distributions in the session's virtualenv, as ``name==version`` lines."""
    freeze = session.run("pip", "list", "--format=freeze", silent=True, log=False)
    return {line.strip() for line in str(freeze).splitlines() if "==" in line}


#: The tests of each package that ``isolated`` runs with only the package and its declared
#: dependencies installed (decision 0270): its plugin and entry points, and its main
#: function end to end. Every other test of the package runs in the ``tests`` sessions, with
#: everything installed; what only an install alone can show is covered here, by importing
#: every module of the package, and by integration_tests/test_stage_boundaries.py (no
#: package's sources or tests import a sibling stage).
ISOLATED_TESTS = {
    "core": ["test_plugins_passes.py", "test_pytest_plugin.py", "test_verify_interpret.py"],
    "capture": ["test_plugin.py", "test_graphs.py"],
    "autograd": ["test_plugin.py", "test_forward.py"],
    "decomp": ["test_entry_point_plugins.py", "test_driver.py"],
    "inductor": ["test_backend_registry.py", "test_package.py", "test_pointwise.py"],
    "runtime": ["test_compile.py", "test_fallback.py", "test_dynamo_backend.py"],
}
#: ``python -c`` source that imports every module of the package named by its argument
#: (``__main__`` modules run a command when imported: left out).
IMPORT_EVERY_MODULE = """
import importlib, pkgutil, sys
root = importlib.import_module(sys.argv[1])
found = pkgutil.walk_packages(root.__path__, root.__name__ + ".")
names = [m.name for m in found if not m.name.endswith(".__main__")]
for name in names:
    importlib.import_module(name)
print(f"imported {sys.argv[1]} and its {len(names)} modules")
"""
#: ``isolated``'s option for running every test of each package, not the selection.
ALL_TESTS = "--all-tests"


def _isolated_selection(posargs: list[str]) -> tuple[list[str], list[str]]:
    """Split ``isolated``'s posargs into package names and pytest options (and
    ``ALL_TESTS``)."""
    names = [arg for arg in posargs if arg in PACKAGES]
    unknown = [arg for arg in posargs if not arg.startswith("-") and arg not in PACKAGES]
    if unknown:
        raise ValueError(f"isolated: unknown package(s) {unknown}; choose from {PACKAGES}")
    return names or list(PACKAGES), [arg for arg in posargs if arg not in names]


def _isolated_tests(package: str, every: bool) -> list[str]:
    """The test paths ``isolated`` runs for ``package`` (all of its tests with ``every``)."""
    tests = ROOT / "packages" / package / "tests"
    if every:
        return [str(tests.relative_to(ROOT))]
    paths = [tests / name for name in ISOLATED_TESTS[package]]
    missing = [str(path.relative_to(ROOT)) for path in paths if not path.is_file()]
    if missing:
        raise ValueError(f"isolated: ISOLATED_TESTS names files that are gone: {missing}")
    return [str(path.relative_to(ROOT)) for path in paths]


@nox.session(python=PYTHON)
@_drops_venv
def isolated(session: nox.Session) -> None:
    """Install each package alone with only its declared dependencies, import every one
    of its modules and run its :data:`ISOLATED_TESTS`.

    This is the proof that each stage is separately installable: a stage that imports a
    sibling, or a library, it does not declare fails here. torch and the test tools are
    installed once; each package is then installed on top (pip resolves its declared
    dependencies), tested, and everything it brought is uninstalled again, so the next
    package starts from the same base. One torch install instead of six saves about five
    minutes of CI.

    `nox -s isolated -- decomp inductor` tests those packages only; `-- --all-tests` runs
    all of their tests; other options starting with `-` go to pytest.
    """
    packages, pytest_options = _isolated_selection(list(session.posargs))
    every = ALL_TESTS in pytest_options
    pytest_options = [option for option in pytest_options if option != ALL_TESTS]
    session.install(*PIP_OPTIONS, f"torch=={DEFAULT_TORCH}", *TEST_TOOLS)
    base = _installed(session)
    failed = []
    for package in packages:
        local = [_package_path(dep) for dep in [*LOCAL_DEPS[package], package]]
        session.install(*PIP_OPTIONS, *_wheels(session, *local))
        added = _installed(session) - base
        session.log(f"isolated {package}: on top of the base, {sorted(added)}")
        try:
            session.run(
                "python", "-c", IMPORT_EVERY_MODULE, f"torchstrata.{package}", env=TEST_ENV
            )  # fmt: skip
            # The selection in one process: two workers would import torch twice for a
            # few tests each (autograd's and decomp's: 12 s against 6 s); all the tests
            # in two.
            workers = _workers() if every else []
            session.run(
                "pytest", *workers, *_isolated_tests(package, every), *pytest_options,
                env=TEST_ENV,
            )  # fmt: skip
        except CommandFailed:
            failed.append(package)
        _restore(session, base, added)
    if failed:
        session.error(f"isolated: the tests of {failed} failed")


def _restore(session: nox.Session, base: set[str], added: set[str]) -> None:
    """Uninstall what a package brought and reinstall any base version it replaced."""
    names = sorted(line.split("==")[0] for line in added)
    if names:
        session.run("pip", "uninstall", "--yes", "--quiet", *names)
    replaced = sorted(base - _installed(session))
    if replaced:
        session.install(*PIP_OPTIONS, "--no-deps", *replaced)
    if _installed(session) != base:
        session.error(f"isolated: could not get back to the base ({sorted(added)} installed)")


@nox.session(python=PYTHON)
@_drops_venv
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check; `-- --fix` is passed to ruff check."""
    session.install("ruff")
    paths = _existing(LINT_PATHS)
    session.run("ruff", "check", *session.posargs, *paths)
    session.run("ruff", "format", "--check", *paths)


@nox.session(python=PYTHON)
@_drops_venv
def typecheck(session: nox.Session) -> None:
    """mypy over packages/*/src, with the packages' real dependencies installed."""
    _install_everything(session, DEFAULT_TORCH, "mypy", "pytest")
    sources = sorted(
        str(p.relative_to(ROOT)) for p in ROOT.glob("packages/*/src/torchstrata/*") if p.is_dir()
    )
    session.run("mypy", *session.posargs, *sources)


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """Run examples/demo.py with everything installed; posargs go to the script."""
    _install_everything(session, DEFAULT_TORCH)
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Run the benchmark suite: `nox -s bench -- --device cpu`."""
    _install_everything(session, DEFAULT_TORCH, "rich")
    session.run("python", "-m", "bench", *session.posargs)


@nox.session(python=PYTHON)
def opinfo(session: nox.Session) -> None:
    """The OpInfo sweep through capture, aot, decomp and the reference interpreter; prints
    the table (samples captured / declined / errors; decomposed / extern / mismatched).

    `nox -s opinfo -- --ops add,cat --max-samples 3 --jobs 2` (posargs go to the script).
    """
    _install_everything(session, DEFAULT_TORCH, "expecttest")
    session.run("python", "-m", "integration_tests.opinfo.sweep", *session.posargs, env=TEST_ENV)


@nox.session(python=PYTHON)
def mutants(session: nox.Session) -> None:
    """Mutation testing of the decomposition rules and the C++/Triton expression printers.

    Each mutant (an operator, constant, prim name or generated-code token changed; see
    integration_tests/mutation/operators.py) runs a targeted test subset in a forked child
    (a few seconds each); the score and every surviving mutant are printed.
    `nox -s mutants -- --sample 120 --seed 0 --json out.json` tests a seeded sample (the
    whole set is about 2,500 mutants); `--files activations` one module; `--list` lists.
    Results: bench/results/mutants-*.json.
    """
    _install_everything(session, DEFAULT_TORCH, *TEST_TOOLS)
    session.run("python", "-m", "integration_tests.mutation.run", *session.posargs, env=TEST_ENV)
