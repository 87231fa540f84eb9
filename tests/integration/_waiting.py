"""Polling a condition with a deadline, for tests that wait on a cluster's weather."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def wait_for(check: Callable[[], bool], what: str, within: float = 20.0) -> None:
    """Return once ``check()`` is true; fail naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
