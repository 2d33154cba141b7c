"""How a corpus module registers its programs: ``PROGRAMS, case = registry()``.

``@case(make, expect)`` adds the function (or callable object) below it, with the
``make(n)`` of its inputs and what capture is expected to do with it (``"clean"``: one
graph; ``"break"``: a graph break; ``"skip"``: not registered) to ``PROGRAMS``, which
``test_corpus.py`` collects from every module of this directory (the loader puts this
directory on ``sys.path``).
"""

from collections.abc import Callable
from typing import Any


def registry(default: str = "clean") -> tuple[list[tuple[str, Any, Any, str]], Callable[..., Any]]:
    """A module's program list and its ``case`` decorator (``expect`` defaulting to
    ``default``)."""
    programs: list[tuple[str, Any, Any, str]] = []

    def case(make: Any, expect: str = default) -> Callable[[Any], Any]:
        def register(fn: Any) -> Any:
            if expect != "skip":
                programs.append((getattr(fn, "__name__", type(fn).__name__), fn, make, expect))
            return fn

        return register

    return programs, case
