"""A blocking API for code that does not run asyncio (scripts, Django/Flask views, Celery).

Design in one breath: every object here wraps its async twin from ``liftbridge_nats``,
whose methods and keyword arguments it keeps, and runs it on one asyncio loop per
process, in a daemon thread (``_portal``, on anyio's blocking portal; asyncio because
nats-py is asyncio-only). Calls block the calling thread until done; many threads may
share one object. ``Publisher.publish_async`` hands messages to the loop in batches, one
wake-up per batch rather than one per message. A blocking call made from a thread that
runs an event loop raises :class:`EventLoopRunningError` at once, naming the async call
to await instead.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import EventLoopRunningError, PortalClosedError
from ._portal import close_shared
from ._publisher import Publisher


def _claim(value: type) -> None:
    """Show a class of a private module as ``liftbridge_nats.sync.X``, as the root
    package does for its own names."""
    if value.__module__.startswith(__name__ + "._"):
        value.__module__ = __name__


for _value in (EventLoopRunningError, PortalClosedError, Publisher):
    _claim(_value)
del _value

# The gRPC side is imported on first use, as in liftbridge_nats itself: a process that
# only publishes never loads grpc.
_GRPC_SIDE = {
    "Client": "._client",
    "Consumer": "._consumer",
    "Subscription": "._subscription",
}

if TYPE_CHECKING:
    from ._client import Client
    from ._consumer import Consumer
    from ._subscription import Subscription

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        module = _GRPC_SIDE.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        _claim(value)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_GRPC_SIDE))


__all__ = [
    "Client",
    "Consumer",
    "EventLoopRunningError",
    "PortalClosedError",
    "Publisher",
    "Subscription",
    "close_shared",
]
