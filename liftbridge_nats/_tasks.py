"""Stopping a background task without losing the stopper's own cancellation.

``task.cancel()`` then ``await task`` under ``suppress(CancelledError)`` also swallows a
cancellation aimed at the awaiting task: a loop that stops something in its body then
goes on forever, and so does whoever waits for that loop to end (a ``close()``).
"""

from __future__ import annotations

import asyncio


async def cancel_and_wait(task: asyncio.Future[None]) -> None:
    """Cancel ``task`` and wait until it has ended. Its own cancellation ends the
    wait quietly; a cancellation of the caller is raised (and whatever else the task
    raised, as ``await task`` would)."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
