"""The Consumer's aiokafka-style calls against a real server: getmany/getone, seek,
position/committed, pause/resume, manual commits, the rebalance listener and lag."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest
from _waiting import wait_for

from liftbridge_nats import (
    Client,
    ClientClosedError,
    Consumer,
    ConsumerRebalanceListener,
    InvalidArgumentError,
    Message,
    NotAssignedError,
    PartitionLag,
    StreamPartition,
    consumer_lag,
)

PARTITIONS = 3


async def filled(client: Client, name: str, per_partition: int) -> None:
    await client.create_stream(name, name, partitions=PARTITIONS)
    for i in range(per_partition * PARTITIONS):
        await client.publish_to_stream(name, b"%d" % i, partition=i % PARTITIONS)


async def drain(
    consumer: Consumer, want: int, *partitions: tuple[str, int], **kwargs: Any
) -> dict[StreamPartition, list[int]]:
    """getmany until ``want`` messages came; offsets per partition."""
    got: dict[StreamPartition, list[int]] = {}
    deadline = time.monotonic() + 20
    while sum(map(len, got.values())) < want:
        assert time.monotonic() < deadline, f"only {got} of {want}"
        kwargs.setdefault("timeout", 1.0)
        batch = await consumer.getmany(*partitions, **kwargs)
        for tp, messages in batch.items():
            assert isinstance(tp, StreamPartition)
            assert all(isinstance(m, Message) and m.partition == tp.partition for m in messages)
            got.setdefault(tp, []).extend(m.offset for m in messages)
    return got


def member(client: Client, group: str, stream: str, **kwargs: Any) -> Consumer:
    kwargs.setdefault("assignment_interval", 0.3)
    return client.consumer(group, [stream], **kwargs)


async def test_getmany_in_batches_and_getone(liftbridge_cluster: Any, unique_name: Any) -> None:
    name, group = unique_name("many"), unique_name("g")
    async with Client(liftbridge_cluster.brokers) as client:
        await filled(client, name, 10)
        async with member(client, group, name) as consumer:
            await consumer.wait_for_assignment(10)
            first = await consumer.getmany(timeout=5.0, max_records=4)
            assert 1 <= sum(map(len, first.values())) <= 4
            got = await drain(consumer, 30 - sum(map(len, first.values())))
            for tp, messages in first.items():
                got[tp] = [m.offset for m in messages] + got.get(tp, [])
            assert got == {StreamPartition(name, p): list(range(10)) for p in range(PARTITIONS)}
            # Nothing buffered: timeout 0 returns at once, empty.
            started = time.monotonic()
            assert await consumer.getmany() == {}
            assert time.monotonic() - started < 0.5
            # Only one partition asked for: only it answers.
            await client.publish_to_stream(name, b"late-0", partition=0)
            await client.publish_to_stream(name, b"late-1", partition=1)
            only = await drain(consumer, 1, (name, 1))
            assert only == {StreamPartition(name, 1): [10]}
            one = await asyncio.wait_for(consumer.getone(), 10)
            assert (one.partition, one.offset, one.value) == (0, 10, b"late-0")
            assert consumer.positions == {(name, p): 10 if p < 2 else 9 for p in range(3)}


async def test_seek_and_position(liftbridge_cluster: Any, unique_name: Any) -> None:
    name, group = unique_name("seek"), unique_name("g")
    async with Client(liftbridge_cluster.brokers) as client:
        await filled(client, name, 6)
        async with member(client, group, name) as consumer:
            await consumer.wait_for_assignment(10)
            tp = StreamPartition(name, 1)
            assert await drain(consumer, 3, tp, max_records=3) == {tp: [0, 1, 2]}
            assert await consumer.position(tp) == 3
            consumer.seek(tp, 1)
            assert await consumer.position(tp) == 1
            assert await drain(consumer, 5, tp) == {tp: [1, 2, 3, 4, 5]}
            await consumer.seek_to_beginning(tp)
            assert await drain(consumer, 6, tp) == {tp: list(range(6))}
            await consumer.seek_to_end(tp)
            assert await consumer.position(tp) == 6
            assert await consumer.getmany(tp, timeout=0.3) == {}
            await client.publish_to_stream(name, b"new", partition=1)
            assert await drain(consumer, 1, tp) == {tp: [6]}
            # An iteration's read-ahead is dropped by a seek too.
            consumer.seek(tp, 4)
            seen = []
            async for message in consumer:
                if message.partition == 1:
                    seen.append(message.offset)
                    if message.offset == 6:
                        break
            assert seen == [4, 5, 6]

        # A seek while the partition is still being subscribed to, and one from the
        # listener before reading starts, both decide where reading begins.
        class SeekOnAssign(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned: set[StreamPartition]) -> None:
                ref[0].seek((name, 2), 5)

        ref: list[Consumer] = []
        racing = member(client, unique_name("g"), name, listener=SeekOnAssign())
        ref.append(racing)
        async with racing:
            await racing.wait_for_assignment(10)
            racing.seek(tp, 3)
            got = await drain(racing, 4 + 1, tp, (name, 2))
            assert got == {tp: [3, 4, 5, 6], StreamPartition(name, 2): [5]}


async def test_wrong_partitions_and_arguments(liftbridge_cluster: Any, unique_name: Any) -> None:
    name, group = unique_name("args"), unique_name("g")
    async with Client(liftbridge_cluster.brokers) as client:
        await filled(client, name, 1)
        consumer = member(client, group, name)
        async with consumer:
            await consumer.wait_for_assignment(10)
            with pytest.raises(NotAssignedError, match="not assigned"):
                consumer.seek((name, 7), 0)
            with pytest.raises(NotAssignedError):
                await consumer.position(("other", 0))
            with pytest.raises(NotAssignedError):
                consumer.pause((name, 9))
            with pytest.raises(InvalidArgumentError):
                consumer.seek((name, 0), -1)
            with pytest.raises(TypeError, match="tuple"):
                consumer.seek(cast(Any, name), 0)
            with pytest.raises(InvalidArgumentError):
                await consumer.getmany(timeout=-1)
            with pytest.raises(InvalidArgumentError):
                await consumer.getmany(max_records=0)
            with pytest.raises(InvalidArgumentError):
                await consumer.commit({(name, 0): -5})
            await drain(consumer, PARTITIONS)
            waiting = asyncio.ensure_future(consumer.getmany(timeout=30))
            await asyncio.sleep(0.1)
        assert await asyncio.wait_for(waiting, 5) == {}  # ended by the close
        with pytest.raises(ClientClosedError):
            await consumer.getmany()
        with pytest.raises(InvalidArgumentError):
            client.consumer(group, [name], handover_wait=-1)
        with pytest.raises(TypeError):
            client.consumer(group, [name], listener=object())  # type: ignore[arg-type]


async def test_pause_and_resume_lose_nothing(liftbridge_cluster: Any, unique_name: Any) -> None:
    name, group = unique_name("pause"), unique_name("g")
    async with Client(liftbridge_cluster.brokers) as client:
        await filled(client, name, 20)
        async with member(client, group, name) as consumer:
            await consumer.wait_for_assignment(10)
            p0 = StreamPartition(name, 0)
            # The iteration takes batches ahead of what it returns: pausing keeps them.
            first = await asyncio.wait_for(anext(consumer), 10)
            delivered = {first.partition: [first.offset]}
            consumer.pause(p0)
            assert consumer.paused() == {p0}
            got = await drain(consumer, 40 - (1 if first.partition else 0))
            assert p0 not in got
            for tp, offsets in got.items():
                delivered.setdefault(tp.partition, []).extend(offsets)
            assert await consumer.getmany(timeout=0.3) == {}
            consumer.resume(p0)
            assert consumer.paused() == frozenset()
            rest = await drain(consumer, 20 - len(delivered.get(0, [])))
            delivered.setdefault(0, []).extend(rest[p0])
            assert delivered == {p: list(range(20)) for p in range(PARTITIONS)}


async def test_manual_commits_and_committed(liftbridge_cluster: Any, unique_name: Any) -> None:
    name, group = unique_name("commit"), unique_name("g")
    async with Client(liftbridge_cluster.brokers) as client:
        await filled(client, name, 5)
        tp = StreamPartition(name, 2)
        async with member(client, group, name, auto_checkpoint_interval=None) as consumer:
            await consumer.wait_for_assignment(10)
            assert await drain(consumer, 3, tp, max_records=3) == {tp: [0, 1, 2]}
            assert await consumer.committed(tp) is None
            await consumer.commit()
            assert await consumer.committed(tp) == 3  # the next offset to read
            assert await client.fetch_cursor(consumer.cursor_id, name, 2) == 2  # the cursor
            await consumer.commit({tp: 1})
            assert await consumer.committed(tp) == 1
            assert await consumer.committed((name, 0)) is None
            await drain(consumer, 2, tp)
        # Manual commits: closing stores nothing more.
        assert await client.fetch_cursor(consumer.cursor_id, name, 2) == 0
        assert await client.fetch_cursor(consumer.cursor_id, name, 0) == -1

        # The periodic mode commits on close; the next member resumes after it.
        async with member(client, group, name) as consumer:
            await consumer.wait_for_assignment(10)
            got = await drain(consumer, 4 + 5 + 5)
            assert got[tp] == [1, 2, 3, 4]
        assert [await client.fetch_cursor(consumer.cursor_id, name, p) for p in range(3)] == [4] * 3


class Recorder(ConsumerRebalanceListener):
    """Records the calls; flushes per-partition state on revocation (async)."""

    def __init__(self, consumer_ref: list[Consumer]) -> None:
        self.calls: list[tuple[str, set[StreamPartition]]] = []
        self.state: dict[StreamPartition, int] = {}
        self.flushed: dict[StreamPartition, int] = {}
        self._consumer = consumer_ref

    def on_partitions_assigned(self, assigned: set[StreamPartition]) -> None:
        self.calls.append(("assigned", set(assigned)))

    async def on_partitions_revoked(self, revoked: set[StreamPartition]) -> None:
        self.calls.append(("revoked", set(revoked)))
        for tp in revoked:
            if tp in self.state:
                self.flushed[tp] = self.state.pop(tp)
        await asyncio.sleep(0)


async def test_rebalance_listener(liftbridge_cluster: Any, unique_name: Any) -> None:
    name, group = unique_name("listen"), unique_name("g")
    async with Client(liftbridge_cluster.brokers) as client:
        await filled(client, name, 4)
        ref: list[Consumer] = []
        recorder = Recorder(ref)
        first = member(client, group, name, listener=recorder)
        ref.append(first)
        async with first:
            await first.wait_for_assignment(10)
            await wait_for(lambda: len(first.assignments) == PARTITIONS, "all partitions")
            for tp, offsets in (await drain(first, 12)).items():
                recorder.state[tp] = len(offsets)
            second = member(client, group, name)
            async with second:
                await wait_for(
                    lambda: (
                        bool(second.assignments)
                        and len(first.assignments) + len(second.assignments) == PARTITIONS
                    ),
                    "the second member to get partitions",
                )
                await wait_for(lambda: recorder.calls[-1][0] == "revoked", "the revocation")
                moved = set(second.assignments)
                revoked = set().union(*(p for kind, p in recorder.calls if kind == "revoked"))
                assert moved <= revoked
                assert set(recorder.flushed) == revoked
        assert recorder.calls[0] == (
            "assigned",
            {StreamPartition(name, p) for p in range(PARTITIONS)},
        )
        # Every call fits the one before: only held partitions are revoked, and
        # closing revokes whatever was left.
        held: set[StreamPartition] = set()
        for kind, partitions in recorder.calls:
            if kind == "assigned":
                assert not held & partitions
                held |= partitions
            else:
                assert partitions <= held
                held -= partitions
        assert held == set()


async def test_lag_one_code_path(liftbridge_cluster: Any, unique_name: Any) -> None:
    name, group = unique_name("lag"), unique_name("g")
    async with Client(liftbridge_cluster.brokers) as client:
        await filled(client, name, 5)
        assert await consumer_lag(client, group, name) == [
            PartitionLag(group, name, p, committed=-1, newest=4, lag=5) for p in range(PARTITIONS)
        ]
        async with member(client, group, name, auto_checkpoint_interval=None) as consumer:
            await consumer.wait_for_assignment(10)
            await drain(consumer, 2, (name, 0), max_records=2)
            await consumer.commit()
            lags = await consumer.lag()
        assert [(x.partition, x.committed, x.newest, x.lag) for x in lags] == [
            (0, 1, 4, 3),
            (1, -1, 4, 5),
            (2, -1, 4, 5),
        ]
        assert lags == await consumer_lag(client, group, [name])
