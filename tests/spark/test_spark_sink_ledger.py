"""The sink task's ledger of published rows: counts, the first failure, and each
partition's offsets, from futures settled as a Publisher settles them. Pure: no Spark
session, no server."""

from __future__ import annotations

import asyncio

import pytest

from liftbridge_nats import Ack, AckPolicy, AckTimeoutError, PublishError
from liftbridge_nats.spark._sink_task import PartitionOffsets, _Ledger


def _ack(partition: int, offset: int) -> Ack:
    return Ack(
        stream="s",
        partition=partition,
        partition_subject="s",
        message_subject=f"s.{partition}",
        offset=offset,
        ack_inbox="_INBOX.x",
        correlation_id=f"c{partition}.{offset}",
        ack_policy=AckPolicy.ALL,
        reception_timestamp=0,
        commit_timestamp=0,
    )


async def test_the_ledger_counts_settled_rows_in_order_and_keeps_each_partition_range() -> None:
    loop = asyncio.get_running_loop()
    ledger = _Ledger()
    futures = []
    for i in range(6):
        partition = i % 2
        fut: asyncio.Future[Ack | None] = loop.create_future()
        ledger.futures.append(fut)
        ledger.partitions.append(partition)
        futures.append((fut, partition, 10 + i // 2))
    # The first two settle, the third does not yet: counting stops at it.
    for fut, partition, offset in futures[:2]:
        fut.set_result(_ack(partition, offset))
    futures[3][0].set_result(_ack(1, 11))
    ledger.drain()
    assert ledger.acked == 2 and len(ledger.futures) == 4 and len(ledger.partitions) == 4
    for fut, partition, offset in futures[2:]:
        if not fut.done():
            fut.set_result(_ack(partition, offset))
    ledger.drain()
    assert ledger.acked == 6 and not ledger.futures and not ledger.partitions
    assert ledger.error is None and ledger.failed == 0
    assert ledger.offsets() == (
        PartitionOffsets(0, 10, 12, 3),
        PartitionOffsets(1, 10, 12, 3),
    )


async def test_the_first_failure_wins_and_cancelled_or_bare_subject_rows_count_right() -> None:
    loop = asyncio.get_running_loop()
    ledger = _Ledger()
    outcomes: list[tuple[int, object]] = [
        (0, _ack(0, 5)),
        (0, AckTimeoutError("no ack")),
        (0, "cancel"),
        (-1, _ack(0, 99)),  # a bare subject: counted, no offsets
        (0, _ack(0, 8)),
    ]
    for partition, outcome in outcomes:
        fut: asyncio.Future[Ack | None] = loop.create_future()
        if outcome == "cancel":
            fut.cancel()
        elif isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)  # type: ignore[arg-type]
        ledger.futures.append(fut)
        ledger.partitions.append(partition)
    ledger.drain()
    assert ledger.acked == 3 and ledger.failed == 2
    assert isinstance(ledger.error, AckTimeoutError)
    assert ledger.offsets() == (PartitionOffsets(0, 5, 8, 2),)


async def test_a_cancelled_first_row_fails_the_task_with_a_publish_error() -> None:
    loop = asyncio.get_running_loop()
    ledger = _Ledger()
    fut: asyncio.Future[Ack | None] = loop.create_future()
    fut.cancel()
    ledger.futures.append(fut)
    ledger.partitions.append(0)
    ledger.drain()
    assert isinstance(ledger.error, PublishError) and "cancelled" in str(ledger.error)
    with pytest.raises(PublishError):
        raise ledger.error


async def test_rows_published_with_no_acks_are_counted_without_offsets() -> None:
    # AckPolicy.NONE: every future settles with None once the row is handed to NATS.
    loop = asyncio.get_running_loop()
    ledger = _Ledger()
    for i in range(4):
        fut: asyncio.Future[Ack | None] = loop.create_future()
        fut.set_result(None)
        ledger.futures.append(fut)
        ledger.partitions.append(i % 2)
    ledger.drain()
    assert ledger.acked == 4 and ledger.error is None and ledger.offsets() == ()
