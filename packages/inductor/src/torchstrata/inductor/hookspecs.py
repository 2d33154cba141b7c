"""The inductor's own hookspecs, added to the plugin manager through core's historic
``torchstrata_addhooks`` (see :mod:`torchstrata.inductor.plugin`).

A package adds a code generator by implementing :func:`torchstrata_inductor_backends` in a
plugin of the ``torchstrata`` entry-point group; users select it by name with
``CompileOptions(codegen=name)``. The built-in C++, Triton and eager backends are
registered the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from torchstrata.core import hookspec

if TYPE_CHECKING:  # hookspecs document types only
    from torchstrata.inductor.codegen.registry import BackendSpec


@hookspec
def torchstrata_inductor_backends() -> Sequence[BackendSpec] | None:
    """The code generators this plugin provides.

    :return: one :class:`~torchstrata.inductor.codegen.registry.BackendSpec` per backend
        (or None for none);
        two plugins may not register the same name. Not firstresult: every plugin's
        backends are collected.
    """
