"""Hands publish commands to a nats-py client, skipping its per-message coroutine.

``await nc.publish(...)`` costs about as much as everything else the publisher does for
a message: two nested coroutines, a subject check, a protocol line built by an f-string,
and a flush request. What it does in the end is small: append the ``PUB`` command to
the client's outgoing buffer and, if no flush is queued yet, queue one for the client's
flusher task, which writes the whole buffer in one go. :class:`NatsWriter` does exactly
that, synchronously, so a burst of publishes costs one buffer append each and one flush.

This leans on nats-py internals (``_pending``, ``_pending_data_size``, ``_flush_queue``,
the flusher task), so it is used only when every one of them is present with the
expected type (checked once, against the nats-py 2.x line that pyproject pins) and only
while the connection is up and not draining. In every other case, and for commands
that would overflow the client's pending buffer, the caller falls back to the public
``nc.publish``; both paths append to the same buffer, so message order is preserved.
A command goes in as three buffers (protocol line, payload, CRLF) that the flusher
writes out joined with everything else.
Integration tests run the publisher both ways.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["NatsWriter"]

_SUBJECT_CACHE_LIMIT = 4096
_CRLF = b"\r\n"


def _supports_direct_writes(nc: Any) -> bool:
    try:
        return (
            isinstance(getattr(type(nc), "CONNECTED", None), int)
            and isinstance(nc._status, int)
            and isinstance(nc._pending, list)
            and isinstance(nc._pending_data_size, int)
            and isinstance(nc._max_pending_size, int)
            and isinstance(nc._flush_queue, asyncio.Queue)
            and isinstance(nc.stats, dict)
            and "out_msgs" in nc.stats
            and "out_bytes" in nc.stats
            and hasattr(nc, "_flusher_task")
        )
    except AttributeError:
        return False


class NatsWriter:
    """Appends ``PUB`` commands to a nats-py client's outgoing buffer.

    :meth:`write` returns False when the command was not taken (direct writes are off
    or not possible right now); the caller then uses ``await nc.publish(...)``.
    """

    __slots__ = ("_connected", "_loop", "_nc", "_subjects", "enabled")

    def __init__(self, nc: Any, loop: asyncio.AbstractEventLoop, *, enabled: bool = True) -> None:
        self._nc = nc
        self._loop = loop
        self._subjects: dict[str, bytes] = {}
        self.enabled = enabled and _supports_direct_writes(nc)
        # Connected and not draining, in one comparison (what is_connected and
        # is_draining_pubs look at).
        self._connected = getattr(type(nc), "CONNECTED", None)
        """Whether direct writes are used at all."""

    def write(self, subject: str, reply: str, payload: bytes) -> bool:
        """Queue one message for the client's flusher; False if the caller must send it."""
        if not self.enabled:
            return False
        nc = self._nc
        if nc._status != self._connected:
            return False
        flusher = nc._flusher_task
        if flusher is None or flusher.done():
            return False
        size = len(payload)
        head = self._subjects.get(subject)
        if head is None:
            head = self._head(subject)
        if reply:
            line = b"PUB %b %b %d\r\n" % (head, reply.encode(), size)
        else:
            line = b"PUB %b %d\r\n" % (head, size)
        pending_size = nc._pending_data_size + len(line) + size + 2
        if pending_size > nc._max_pending_size > 0:
            return False  # nc.publish makes the caller wait for the flusher to catch up
        # Three buffers instead of one joined command: the flusher joins the whole
        # buffer anyway, so the payload is copied once instead of twice.
        nc._pending.extend((line, payload, _CRLF))
        nc._pending_data_size = pending_size
        stats = nc.stats
        stats["out_msgs"] += 1
        stats["out_bytes"] += size
        queue = nc._flush_queue
        if queue.empty():
            # What nc.publish does through _flush_pending: wake the flusher once.
            queue.put_nowait(self._loop.create_future())
        return True

    def _head(self, subject: str) -> bytes:
        if len(self._subjects) >= _SUBJECT_CACHE_LIMIT:
            self._subjects.clear()
        head = self._subjects[subject] = subject.encode()
        return head
