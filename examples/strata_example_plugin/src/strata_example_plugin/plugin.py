"""The hook implementations torchstrata finds through the ``example-counter`` entry point."""

from __future__ import annotations

from strata_example_plugin.count_ops import CountOps
from torchstrata.core import CompileOptions, GraphPass, hookimpl

#: The entry-point name, also the key of this plugin's ``stage_options``.
PLUGIN_NAME = "example-counter"


@hookimpl
def torchstrata_graph_passes(stage: str, options: CompileOptions) -> list[GraphPass]:
    """Contribute ``count-ops`` at ``post_decomp`` (or the stage the options name)."""
    settings = options.stage(PLUGIN_NAME)
    if stage != settings.get("stage", "post_decomp"):
        return []
    return [CountOps(stage, settings.get("counter_file"))]
