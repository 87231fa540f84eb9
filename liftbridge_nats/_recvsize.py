"""How much one read from a socket takes at most: less than asyncio's default.

asyncio's selector transports read with ``sock.recv(max_size)`` for a protocol that is
not buffered (nats-py's streams, the read pool's HTTP/2 connections), and ``max_size``
is 256 KiB. CPython allocates those 256 KiB before each read, and glibc's malloc serves
a block that large with ``mmap`` (its threshold is 128 KiB). A read that brings a few
acks then costs an ``mmap``, an ``mremap`` that shrinks the block to what came, a
``munmap`` when it is freed, and page faults in between. A block under the threshold
comes from the heap and is reused.
"""

from __future__ import annotations

import contextlib

__all__ = ["READ_SIZE", "cap_read_size"]

READ_SIZE = 64 * 1024


def cap_read_size(transport: object) -> None:
    """Make ``transport`` read at most :data:`READ_SIZE` bytes at a time when it is
    asyncio's selector socket transport; any other (TLS, uvloop) reads its own way."""
    size = getattr(transport, "max_size", None)
    if isinstance(size, int) and size > READ_SIZE:
        with contextlib.suppress(AttributeError, TypeError):
            transport.max_size = READ_SIZE  # type: ignore[attr-defined]
