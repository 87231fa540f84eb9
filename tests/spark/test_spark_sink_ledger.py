"""The sink task's ledger of published rows (counts, the first failure, and each
partition's offsets, from futures settled as a Publisher settles them) and its router
(which partition a row goes to). Pure: no Spark session, no server."""

from __future__ import annotations

import asyncio
import zlib

import pytest

from liftbridge_nats import Ack, AckPolicy, AckTimeoutError, InvalidArgumentError, PublishError
from liftbridge_nats.spark._sink_task import (
    PartitionOffsets,
    Target,
    _Ledger,
    _Router,
    first_partition,
)


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
        ledger.placed(partition, fut, fut, 1)
        futures.append((fut, partition, 10 + i // 2))
    # The first two settle, the third does not yet: counting stops at it.
    for fut, partition, offset in futures[:2]:
        fut.set_result(_ack(partition, offset))
    futures[3][0].set_result(_ack(1, 11))
    ledger.drain()
    assert ledger.acked == 2 and len(ledger.futures) == 4
    for fut, partition, offset in futures[2:]:
        if not fut.done():
            fut.set_result(_ack(partition, offset))
    ledger.drain()
    assert ledger.acked == 6 and not ledger.futures
    assert ledger.error is None and ledger.failed == 0
    assert ledger.offsets() == (
        PartitionOffsets(0, 10, 12, 3),
        PartitionOffsets(1, 10, 12, 3),
    )


async def test_runs_of_rows_keep_each_partition_first_and_latest_offsets() -> None:
    # Batches of rows placed as runs: partition 1, then 0, then 1 again.
    loop = asyncio.get_running_loop()
    ledger = _Ledger()
    offsets = {0: 40, 1: 7}
    for partition, count in ((1, 3), (0, 2), (1, 4)):
        run = []
        for _ in range(count):
            fut: asyncio.Future[Ack | None] = loop.create_future()
            fut.set_result(_ack(partition, offsets[partition]))
            offsets[partition] += 1
            ledger.futures.append(fut)
            run.append(fut)
        ledger.placed(partition, run[0], run[-1], count)
    ledger.drain()
    assert ledger.acked == 9 and ledger.error is None
    assert ledger.offsets() == (PartitionOffsets(0, 40, 41, 2), PartitionOffsets(1, 7, 13, 7))


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
        ledger.placed(partition, fut, fut, 1)
    ledger.drain()
    assert ledger.acked == 3 and ledger.failed == 2
    assert isinstance(ledger.error, AckTimeoutError)
    assert list(ledger.ranges) == [0]  # the bare subject's row has no partition


async def test_a_cancelled_first_row_fails_the_task_with_a_publish_error() -> None:
    loop = asyncio.get_running_loop()
    ledger = _Ledger()
    fut: asyncio.Future[Ack | None] = loop.create_future()
    fut.cancel()
    ledger.futures.append(fut)
    ledger.placed(0, fut, fut, 1)
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
        ledger.placed(i % 2, fut, fut, 1)
    ledger.drain()
    assert ledger.acked == 4 and ledger.error is None and ledger.offsets() == ()


def _target(partitions: int | None) -> Target:
    return Target(
        subject="orders", stream=None if partitions is None else "orders", partitions=partitions
    )


def test_rows_without_key_or_partition_go_one_batch_to_a_partition_from_the_task_s_own() -> None:
    router = _Router(_target(3), stage=9, task=4)  # the task with Spark partition id 4
    start = first_partition(9, 4, 3)
    seen = []
    for _ in range(4):
        seen.append(router.pick(None, None, b"v"))
        assert router.pick(None, None, b"w") == seen[-1]  # the whole batch
        router.next_batch()
    assert seen == [start, (start + 1) % 3, (start + 2) % 3, start]
    # Keys and the partition column are not moved by it.
    keyed = router.pick(None, b"cust-7", b"v")
    router.next_batch()
    assert router.pick(None, b"cust-7", b"v") == keyed == zlib.crc32(b"cust-7") % 3
    assert router.pick(2, b"cust-7", b"v") == 2
    with pytest.raises(InvalidArgumentError, match="column 'partition' has 3"):
        router.pick(3, None, b"v")


def test_tasks_of_a_stage_start_apart_and_stages_start_at_different_partitions() -> None:
    # One stage: its tasks start one partition apart (a retried task where it was).
    starts = [first_partition(7, task, 4) for task in range(4)]
    assert sorted(starts) == [0, 1, 2, 3]
    assert all(starts[t] == (starts[0] + t) % 4 for t in range(4))
    assert first_partition(7, 2, 4) == starts[2]
    # Writes (or micro-batches) of one task: not all at the same partition.
    firsts = [first_partition(stage, 0, 4) for stage in range(200)]
    assert all(35 <= firsts.count(p) <= 65 for p in range(4)), firsts
    # Also when every micro-batch takes two stages (ids of one parity).
    assert len({first_partition(stage, 0, 2) for stage in range(0, 40, 2)}) == 2


def test_rows_for_a_bare_subject_have_no_partition() -> None:
    router = _Router(_target(None), stage=3, task=1)
    assert router.pick(None, None, b"v") == -1 and router.pick(None, b"k", b"v") == -1
    router.next_batch()
    assert router.sticky == -1 and router.subjects == ["orders"]
