"""Consumer-group lag: how far a group's committed positions trail each partition.

One code path for everyone who asks: :meth:`Client.fetch_group_lag`,
:meth:`Consumer.lag` and the command line's ``group describe`` all call
:func:`fetch_group_lag`.
"""

# Per-call ``timeout`` arguments are part of the public API (seconds, retries included).

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import cursors
from ._args import checked_name
from ._proto import api_pb2
from .errors import InvalidArgumentError, NoSuchStreamError

if TYPE_CHECKING:
    from ._router import Router, Stub

__all__ = ["PartitionLag", "fetch_group_lag"]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A group's position on one partition against the partition's newest message.

    ``committed`` is the offset the group stored (its cursor: the last message it
    processed), -1 when it stored none; ``newest`` is the partition's newest offset
    (-1 when empty), read from the partition leader. ``lag`` is the difference: the
    messages stored after the committed position (a partition whose retention
    removed old messages may count some that no longer exist).
    """

    stream: str
    partition: int
    committed: int
    newest: int

    @property
    def lag(self) -> int:
        """Messages after the committed position: ``newest - committed``, at least 0."""
        return max(0, self.newest - self.committed)


async def fetch_group_lag(
    router: Router,
    group_id: str,
    streams: Sequence[str],
    *,
    timeout: float | None = None,
) -> list[PartitionLag]:
    """The lag of ``group_id`` on every partition of ``streams``, in stream order then
    partition order. Raises :class:`NoSuchStreamError` for an unknown stream."""
    checked_name(group_id, "group_id")
    if isinstance(streams, str):
        raise InvalidArgumentError("streams is a list of names, not one string")
    for stream in streams:
        checked_name(stream, "stream name")
    metadata = await router.fetch_metadata(list(streams), timeout=timeout)
    cursor_id = cursors.group_cursor_id(group_id)
    keys: list[tuple[str, int]] = []
    for stream in streams:
        info = metadata.streams.get(stream)
        if info is None:
            raise NoSuchStreamError(
                f"stream {stream} does not exist; check the name", code="NOT_FOUND"
            )
        keys += [(stream, pid) for pid in sorted(info.partitions)]

    async def newest(stream: str, partition: int) -> int:
        req = api_pb2.FetchPartitionMetadataRequest(stream=stream, partition=partition)

        async def call(stub: Stub, left: float) -> int:
            resp = await stub.FetchPartitionMetadata(req, timeout=left)
            return int(resp.metadata.newestOffset)

        return await router.call_leader(
            f"fetch metadata of {stream!r}/{partition}", stream, partition, call, timeout=timeout
        )

    async def one(stream: str, partition: int) -> PartitionLag:
        committed, last = await asyncio.gather(
            cursors.fetch_cursor(router, cursor_id, stream, partition, timeout=timeout),
            newest(stream, partition),
        )
        return PartitionLag(stream, partition, committed, last)

    return list(await asyncio.gather(*(one(s, p) for s, p in keys)))
