"""torchstrata-example-plugin: the ``count-ops`` pass, registered as ``example-counter``."""

from strata_example_plugin.count_ops import RUNS, CountOps

__all__ = ["RUNS", "CountOps"]
