"""No stage imports another: each stage's sources import ``torchstrata.core`` and their
own package only, and core imports no stage. Stages talk through core's types and pluggy
hooks; an import of a sibling would tie their installs (and versions) together."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[1] / "packages"
STAGES = ("capture", "autograd", "decomp", "inductor", "runtime")
#: A dynamic import of a torchstrata module written in a string (``__import__('...')``
#: inside a generated guard source, ``importlib.import_module("...")``).
_IMPORT_IN_TEXT = re.compile(r"""(?:__import__|import_module)\(\s*['"](torchstrata(?:\.\w+)+)""")


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every module the file imports, statically or by name."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, match) for match in _IMPORT_IN_TEXT.findall(node.value)]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name in ("__import__", "import_module") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def sibling_imports(package: str, packages: Path = PACKAGES, part: str = "src") -> list[str]:
    """``path:line: module`` for each import of another stage in ``package``'s sources
    (``part="tests"``: in its tests)."""
    allowed = {"core", package}
    found = []
    for path in sorted((packages / package / part).rglob("*.py")):
        for line, module in _imported_modules(path):
            parts = module.split(".")
            if parts[0] == "torchstrata" and len(parts) > 1 and parts[1] not in allowed:
                found.append(f"{path.relative_to(packages)}:{line}: {module}")
    return found


@pytest.mark.parametrize("package", ("core", *STAGES))
def test_no_stage_imports_a_sibling(package):
    assert (PACKAGES / package / "src").is_dir()
    assert sibling_imports(package) == []


@pytest.mark.parametrize("package", ("core", *STAGES))
def test_no_package_test_imports_a_sibling(package):
    """A package's tests run with only the package and core installed (a selection of
    them in ``nox -s isolated``): a test that needs another stage belongs in
    integration_tests/, or skips without it (``pytest.importorskip``)."""
    assert (PACKAGES / package / "tests").is_dir()
    assert sibling_imports(package, part="tests") == []


def test_the_scan_finds_a_sibling_import(tmp_path):
    """The scan sees a lazy import inside a function and one written in a string."""
    source = tmp_path / "stage" / "src" / "torchstrata" / "stage"
    source.mkdir(parents=True)
    (source / "lazy.py").write_text(
        "def f():\n"
        "    from torchstrata.inductor.launch import triton_launch\n"
        "    return triton_launch\n"
        "SOURCE = \"__import__('torchstrata.capture.closures', fromlist=['_']).CELLS\"\n"
        "import torchstrata.core\n"
    )
    found = sibling_imports("stage", tmp_path)
    assert [entry.split(": ")[1] for entry in found] == [
        "torchstrata.inductor.launch",
        "torchstrata.capture.closures",
    ]
