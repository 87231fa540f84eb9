"""``python -m liftbridge_nats.cli``: the same as the ``liftbridge-nats`` command."""

from __future__ import annotations

import sys

from liftbridge_nats.cli import main

sys.exit(main())
