"""The errors only the blocking API raises; both belong to the LiftbridgeError family."""

from __future__ import annotations

from .._errors import ClientClosedError, LocalError

__all__ = ["EventLoopRunningError", "PortalClosedError"]


class EventLoopRunningError(LocalError, RuntimeError):
    """A blocking call was made from a thread that runs an event loop.

    Blocking there would stall every task of that loop (and deadlock, on the SDK's own
    loop). Await the async API the message names instead, or run the blocking call in a
    worker thread (``await asyncio.to_thread(...)``).
    """


class PortalClosedError(ClientClosedError):
    """The background event loop of the blocking API ended (``close_shared()``,
    interpreter exit, or an error on the loop) while this call waited, or before it
    started.

    Nothing more can be done through the objects that used it; outside interpreter exit,
    new objects start a new loop.
    """
