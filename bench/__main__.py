"""Entry point for ``python -m bench``."""

from bench.cli import main

raise SystemExit(main())
