"""Cursors: named, durable read positions stored by the cluster.

The server keeps cursors in its internal ``__cursors`` stream and only the leader of
the ``__cursors`` partition that holds a cursor answers for it. Which partition that
is follows from the cursor's key, ``"<cursor id>,<stream>,<partition>"``, hashed with
CRC-32 (IEEE) modulo the number of ``__cursors`` partitions: the same rule the server
and the Go client use, so the call goes straight to the right broker.
"""

# Per-call ``timeout`` arguments are part of the public API (seconds, retries included).

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from ._checks import check_int, check_name, check_partition
from ._errors import CursorsDisabledError
from ._proto import api_pb2

if TYPE_CHECKING:
    from ._read_transport import GroupRoutes
    from ._router import Stub

__all__ = [
    "CURSORS_STREAM",
    "CursorsDisabledError",
    "cursor_partition",
    "fetch_cursor",
    "group_cursor_id",
    "set_cursor",
]

CURSORS_STREAM = "__cursors"


def group_cursor_id(group_id: str) -> str:
    """The cursor id under which a group's positions are stored (as the Go client does)."""
    return f"__group:{group_id}"


def cursor_partition(cursor_id: str, stream: str, partition: int, partitions: int) -> int:
    """The ``__cursors`` partition holding a cursor, given the partition count."""
    key = f"{cursor_id},{stream},{partition}".encode()
    return zlib.crc32(key) % partitions


async def _route(router: GroupRoutes, cursor_id: str, stream: str, partition: int) -> int:
    check_name(cursor_id, "cursor_id")
    check_name(stream, "stream name")
    check_partition(partition)
    info = router.cache.current.streams.get(CURSORS_STREAM)
    if info is None:
        info = (await router.refresh()).streams.get(CURSORS_STREAM)
    if info is None or not info.partitions:
        raise CursorsDisabledError(
            "the cluster has no __cursors stream: start the brokers with "
            "cursors.stream.partitions > 0 to use cursors and consumer groups"
        )
    return cursor_partition(cursor_id, stream, partition, len(info.partitions))


async def set_cursor(
    router: GroupRoutes,
    cursor_id: str,
    stream: str,
    partition: int,
    offset: int,
    *,
    timeout: float | None = None,
) -> None:
    """Store ``offset`` as the position of ``cursor_id`` on a stream partition.

    ``offset`` -1 stores "no position" (what :func:`fetch_cursor` returns for none).
    """
    check_int(offset, "offset", low=-1)
    target = await _route(router, cursor_id, stream, partition)
    req = api_pb2.SetCursorRequest(
        stream=stream, partition=partition, cursorId=cursor_id, offset=offset
    )

    async def call(stub: Stub, left: float) -> None:
        await stub.SetCursor(req, timeout=left)

    await router.call_leader(
        f"set cursor {cursor_id!r} on {stream!r}/{partition}",
        CURSORS_STREAM,
        target,
        call,
        timeout=timeout,
    )


async def fetch_cursor(
    router: GroupRoutes,
    cursor_id: str,
    stream: str,
    partition: int,
    *,
    timeout: float | None = None,
) -> int:
    """The stored offset of ``cursor_id`` on a stream partition, -1 when none."""
    target = await _route(router, cursor_id, stream, partition)
    req = api_pb2.FetchCursorRequest(stream=stream, partition=partition, cursorId=cursor_id)

    async def call(stub: Stub, left: float) -> int:
        resp = await stub.FetchCursor(req, timeout=left)
        return int(resp.offset)

    return await router.call_leader(
        f"fetch cursor {cursor_id!r} on {stream!r}/{partition}",
        CURSORS_STREAM,
        target,
        call,
        timeout=timeout,
    )
