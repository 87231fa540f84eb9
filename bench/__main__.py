"""Entry point: ``python -m bench [--quick] [--uvloop] ...``."""

from __future__ import annotations

from bench.cli import main

raise SystemExit(main())
