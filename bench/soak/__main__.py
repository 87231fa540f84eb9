"""Entry point: ``python -m bench.soak [--duration S] ...``."""

from __future__ import annotations

from bench.soak.cli import main

raise SystemExit(main())
