"""How much one read from a socket takes at most: less than asyncio's default, and, on
the read side's connections, as much as the broker keeps sending.

asyncio's selector transports read with ``sock.recv(max_size)`` for a protocol that is
not buffered (nats-py's streams, the read pool's HTTP/2 connections), and ``max_size``
is 256 KiB. CPython allocates those 256 KiB before each read, and glibc's malloc serves
a block that large with ``mmap`` (its threshold is 128 KiB). A read that brings a few
acks then costs an ``mmap``, an ``mremap`` that shrinks the block to what came, a
``munmap`` when it is freed, and page faults in between. A block under the threshold
comes from the heap and is reused.

A reader of many partitions wants the opposite once the broker sends faster than it
reads: every read wakes each subscription it brought messages for, so the more a read
brings, the more messages each wake-up hands over (at 256 partitions, a 64 KiB read
brought one or two per subscription). :func:`fit_read_size` doubles the size after a
read that filled it, up to :data:`MAX_READ_SIZE`, and halves it after one that brought
less than a quarter: a busy connection reads large blocks (their ``mmap`` shared by
thousands of messages), a quiet one goes back to :data:`READ_SIZE`.
"""

from __future__ import annotations

import contextlib

__all__ = ["MAX_READ_SIZE", "READ_SIZE", "cap_read_size", "fit_read_size"]

READ_SIZE = 64 * 1024
MAX_READ_SIZE = 1024 * 1024


def cap_read_size(transport: object) -> bool:
    """Make ``transport`` read at most :data:`READ_SIZE` bytes at a time when it is
    asyncio's selector socket transport; any other (TLS, uvloop) reads its own way.
    True when the transport now reads :data:`READ_SIZE` (its size can be fitted)."""
    size = getattr(transport, "max_size", None)
    if isinstance(size, int) and size >= READ_SIZE:
        with contextlib.suppress(AttributeError, TypeError):
            transport.max_size = READ_SIZE  # type: ignore[attr-defined]
            return True
    return False


def fit_read_size(transport: object, received: int) -> None:
    """After a read of ``received`` bytes from a transport :func:`cap_read_size` capped:
    double its read size when the read filled it, halve it when the read brought less
    than a quarter (between :data:`READ_SIZE` and :data:`MAX_READ_SIZE`)."""
    size: int = transport.max_size  # type: ignore[attr-defined]
    if received >= size:
        if size < MAX_READ_SIZE:
            transport.max_size = size * 2  # type: ignore[attr-defined]
    elif received < size >> 2 and size > READ_SIZE:
        transport.max_size = size >> 1  # type: ignore[attr-defined]
