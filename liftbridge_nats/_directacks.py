"""Hands ack messages from nats-py's protocol parser straight to the ack listener.

nats-py delivers a message to a subscription in four steps: its parser calls the
client's ``_process_msg`` coroutine, which builds a ``Msg`` object (and awaits a header
parsing coroutine), puts it in the subscription's queue, and the subscription's own
task takes it out and calls the callback. For an ack that is about as much work as
everything else the publisher does for a message, and the listener needs none of it:
it needs the payload bytes.

:class:`DirectAcks` installs, per connection, one dispatcher in place of the client's
``_process_msg`` (an attribute of that client object only; the class is untouched).
The dispatcher looks the message's subscription id up in a small table: a plain
message (no NATS headers) for a registered id goes to its handler at once; everything
else, including NATS status messages such as "no responders", goes to the original
method unchanged. The table and the dispatcher are shared by every publisher on the
connection, and the original method is put back when the last one leaves.

Like :mod:`._natswriter` this leans on nats-py internals (``_process_msg``, ``stats``),
checked once against the nats-py 2.x line that pyproject pins. When they are not what
is expected the listener keeps using its ordinary subscription, which still receives
everything (``Publisher(direct_acks=False)`` chooses that too); integration tests run
the publisher both ways.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["DirectAcks", "is_installed"]

_log = logging.getLogger("liftbridge_nats.acks")

# The attribute of a nats-py client that holds its routing table (set by us).
_TABLE_ATTR = "_liftbridge_nats_direct_acks"

Handler = Callable[[bytes], None]
ProcessMsg = Callable[[int, bytes, bytes, bytes, Any], Awaitable[None]]


def _supports_direct_acks(nc: Any) -> bool:
    process = getattr(nc, "_process_msg", None)
    stats = getattr(nc, "stats", None)
    if process is None or not isinstance(stats, dict):
        return False
    if "in_msgs" not in stats or "in_bytes" not in stats:
        return False
    if not inspect.iscoroutinefunction(process):
        # Already ours (another publisher on this connection) or something unknown.
        return isinstance(getattr(nc, _TABLE_ATTR, None), _RouteTable)
    try:
        params = list(inspect.signature(process).parameters)
    except (TypeError, ValueError):
        return False
    return params == ["sid", "subject", "reply", "data", "headers"]


class _RouteTable:
    """The dispatcher installed on one client, and the handlers it serves."""

    __slots__ = ("handlers", "original", "shadowed")

    def __init__(self, original: ProcessMsg, shadowed: ProcessMsg | None) -> None:
        self.original = original
        # An instance attribute that was there before us (to put back), if any.
        self.shadowed = shadowed
        self.handlers: dict[int, Handler] = {}


def _make_dispatcher(nc: Any, table: _RouteTable) -> ProcessMsg:
    handlers = table.handlers
    original = table.original
    stats = nc.stats

    async def process_msg(
        sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any
    ) -> None:
        handler = handlers.get(sid)
        if handler is None or headers is not None:
            await original(sid, subject, reply, data, headers)
            return
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        try:
            handler(data)
        except Exception:  # never break the client's read loop on our account
            _log.exception("liftbridge-nats: an ack handler failed")

    return process_msg


class DirectAcks:
    """One subscription's registration in its client's dispatcher.

    :meth:`attach` returns False (and changes nothing) when the client does not look
    like the nats-py this was written for; the subscription then keeps receiving its
    messages the ordinary way.
    """

    __slots__ = ("_nc", "_sid")

    def __init__(self, nc: Any) -> None:
        self._nc = nc
        self._sid: int | None = None

    @property
    def attached(self) -> bool:
        """True while messages of the subscription bypass its queue."""
        return self._sid is not None

    def attach(self, sid: int, handler: Handler) -> bool:
        """Send plain messages of subscription ``sid`` to ``handler`` from now on."""
        nc = self._nc
        if self._sid is not None or not isinstance(sid, int) or not _supports_direct_acks(nc):
            return False
        table = getattr(nc, _TABLE_ATTR, None)
        if not isinstance(table, _RouteTable):
            table = _RouteTable(nc._process_msg, vars(nc).get("_process_msg"))
            setattr(nc, _TABLE_ATTR, table)
            nc._process_msg = _make_dispatcher(nc, table)
        table.handlers[sid] = handler
        self._sid = sid
        return True

    def detach(self) -> None:
        """Stop bypassing; the last registration of a client restores its method."""
        sid, self._sid = self._sid, None
        if sid is None:
            return
        nc = self._nc
        table = getattr(nc, _TABLE_ATTR, None)
        if not isinstance(table, _RouteTable):
            return
        table.handlers.pop(sid, None)
        if not table.handlers:
            # The client's own method again, as if we had never been there.
            if table.shadowed is not None:
                nc._process_msg = table.shadowed
            elif "_process_msg" in vars(nc):
                del nc._process_msg
            delattr(nc, _TABLE_ATTR)


def is_installed(nc: Any) -> bool:
    """True while a dispatcher of ours sits on ``nc`` (for tests)."""
    return isinstance(getattr(nc, _TABLE_ATTR, None), _RouteTable)
