"""Consumer lag: how far a consumer group's committed positions trail each partition.

::

    from liftbridge_nats import consumer_lag

    for row in await consumer_lag(client, "billing", ["orders"]):
        print(row.stream, row.partition, row.committed, row.newest, row.lag)

A group commits, per partition, the offset of the last message it processed (a cursor
named ``__group:<group id>``; -1 when it never committed). The lag is the newest offset
of the partition minus that position: the messages written that the group has not
processed yet (messages removed by retention meanwhile are counted too). The command
line's ``group describe`` and :meth:`Consumer.lag() <liftbridge_nats.Consumer.lag>`
give the same rows, from the same function.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from . import _cursors as cursors
from ._checks import check_name
from ._errors import NoSuchStreamError

if TYPE_CHECKING:
    from ._read_transport import GroupRoutes
    from ._router import Router

__all__ = ["PartitionLag", "consumer_lag", "group_lag", "partition_lag"]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition's position in a consumer group."""

    group_id: str
    stream: str
    partition: int
    committed: int
    """Offset of the last message the group committed; -1 when none."""
    newest: int
    """Offset of the newest message in the partition; -1 when it is empty."""
    lag: int
    """Messages after the committed position: ``newest - committed``, never below 0."""


class _RoutedClient(Protocol):
    # A Client, seen from here: its router is all this needs, and naming the class
    # would make this module (which the Consumer uses) import the client's module.
    @property
    def _router(self) -> Router: ...


def partition_lag(newest: int, committed: int) -> int:
    """Messages in a partition after a committed position (-1: nothing committed)."""
    return max(0, newest - committed)


async def consumer_lag(
    client: _RoutedClient,
    group_id: str,
    streams: str | Sequence[str],
    *,
    timeout: float | None = None,
) -> list[PartitionLag]:
    """The lag of ``group_id`` on every partition of ``streams``, in stream and
    partition order.

    Partition offsets come from fresh metadata, positions from the group's cursors
    (fetched concurrently). Raises :class:`~liftbridge_nats.NoSuchStreamError`
    for a stream that does not exist.
    """
    return await group_lag(client._router, group_id, streams, timeout=timeout)


async def group_lag(
    router: GroupRoutes,
    group_id: str,
    streams: str | Sequence[str],
    *,
    timeout: float | None = None,
) -> list[PartitionLag]:
    """:func:`consumer_lag` on the client's router (what a consumer holds)."""
    check_name(group_id, "group id")
    names = [streams] if isinstance(streams, str) else list(streams)
    for name in names:
        check_name(name, "stream name")
    cursor_id = cursors.group_cursor_id(group_id)
    metadata = await router.fetch_metadata(names, timeout=timeout)
    rows: list[tuple[str, int, int]] = []
    for name in names:
        info = metadata.streams.get(name)
        if info is None:
            raise NoSuchStreamError(
                f"no stream {name!r} in the cluster; create it first", code="NOT_FOUND"
            )
        for pid in sorted(info.partitions):
            rows.append((name, pid, info.partitions[pid].newest_offset))
    committed = await asyncio.gather(
        *(
            cursors.fetch_cursor(router, cursor_id, name, pid, timeout=timeout)
            for name, pid, _ in rows
        )
    )
    return [
        PartitionLag(group_id, name, pid, done, newest, partition_lag(newest, done))
        for (name, pid, newest), done in zip(rows, committed, strict=True)
    ]
