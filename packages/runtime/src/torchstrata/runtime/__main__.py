"""``python -m torchstrata.runtime``: the command-line tools (see :mod:`.cache_cli`)."""

import sys

from torchstrata.runtime.cache_cli import main

if __name__ == "__main__":
    sys.exit(main())
