"""torchstrata benchmark suite: eager vs torch.compile vs torchstrata, side by side.

Run it as ``python -m bench --help``; see ``bench/README.md`` for the columns.
"""
