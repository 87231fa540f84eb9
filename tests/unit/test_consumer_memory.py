"""The Consumer without a broker: its partitions read over the in-memory read transport
(liftbridge_nats._memread), its group calls answered by a small coordinator kept here
(join, assignments with the group epoch, leave, cursors). Rebalance, commit, seek,
pause, fail-over and bounded read-ahead; the same against real brokers is in
tests/integration (test_client_groups.py, test_consumer_api.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import pytest

from liftbridge_nats import BrokerUnavailableError, ConsumerRebalanceListener, RpcError
from liftbridge_nats._consumer import Consumer, StreamPartition
from liftbridge_nats._cursors import CURSORS_STREAM
from liftbridge_nats._memread import NOT_LEADER, UNAVAILABLE, MemoryReads
from liftbridge_nats._metadata import GroupInfo, Metadata, PartitionInfo, StreamInfo
from liftbridge_nats._proto import api_pb2

T = TypeVar("T")

CURSOR_PARTITIONS = 2


class Coordinator:
    """The group and cursor calls a broker answers, in memory (the stub's methods).

    Partitions go to members round-robin in sorted order; every join and leave bumps
    the epoch, and an assignment fetch with an older epoch fails as the server's
    does, so that the member reads the new epoch from the metadata.
    """

    def __init__(self, reads: MemoryReads, streams: dict[str, int]) -> None:
        self.reads = reads
        self.streams = streams  # partition count per stream
        self.members: dict[str, tuple[str, ...]] = {}
        self.epoch = 0
        self.cursors: dict[tuple[str, str, int], int] = {}
        self.set_calls: list[tuple[str, int, int]] = []

    def assignments(self, consumer_id: str) -> dict[str, list[int]]:
        keys = sorted(
            {
                (s, p)
                for streams in self.members.values()
                for s in streams
                for p in range(self.streams[s])
            }
        )
        members = sorted(self.members)
        out: dict[str, list[int]] = {}
        for index, (stream, partition) in enumerate(keys):
            if members[index % len(members)] == consumer_id:
                out.setdefault(stream, []).append(partition)
        return out

    async def JoinConsumerGroup(
        self, req: api_pb2.JoinConsumerGroupRequest, timeout: float
    ) -> api_pb2.JoinConsumerGroupResponse:
        self.members[req.consumerId] = tuple(req.streams)
        self.epoch += 1
        return api_pb2.JoinConsumerGroupResponse(
            coordinator="b0", epoch=self.epoch, consumerTimeout=10**9, coordinatorTimeout=10**9
        )

    async def LeaveConsumerGroup(
        self, req: api_pb2.LeaveConsumerGroupRequest, timeout: float
    ) -> None:
        if self.members.pop(req.consumerId, None) is not None:
            self.epoch += 1

    async def FetchConsumerGroupAssignments(
        self, req: api_pb2.FetchConsumerGroupAssignmentsRequest, timeout: float
    ) -> api_pb2.FetchConsumerGroupAssignmentsResponse:
        if req.consumerId not in self.members:
            raise RpcError("consumer is not a member of the group", code="NOT_FOUND")
        if req.epoch != self.epoch:
            raise RpcError(
                f"group epoch {req.epoch} is not {self.epoch}", code="FAILED_PRECONDITION"
            )
        resp = api_pb2.FetchConsumerGroupAssignmentsResponse(epoch=self.epoch)
        for stream, partitions in sorted(self.assignments(req.consumerId).items()):
            resp.assignments.add(stream=stream, partitions=partitions)
        return resp

    async def SetCursor(self, req: api_pb2.SetCursorRequest, timeout: float) -> None:
        self.cursors[req.cursorId, req.stream, req.partition] = req.offset
        self.set_calls.append((req.stream, req.partition, req.offset))

    async def FetchCursor(
        self, req: api_pb2.FetchCursorRequest, timeout: float
    ) -> api_pb2.FetchCursorResponse:
        offset = self.cursors.get((req.cursorId, req.stream, req.partition), -1)
        return api_pb2.FetchCursorResponse(offset=offset)

    async def FetchPartitionMetadata(
        self, req: api_pb2.FetchPartitionMetadataRequest, timeout: float
    ) -> api_pb2.FetchPartitionMetadataResponse:
        newest = self.reads.newest_offset(req.stream, req.partition)
        return api_pb2.FetchPartitionMetadataResponse(
            metadata=api_pb2.PartitionMetadata(newestOffset=newest)
        )

    def metadata(self) -> Metadata:
        streams = {
            name: StreamInfo(
                name,
                name,
                0,
                {
                    p: PartitionInfo(
                        p,
                        "b0",
                        high_watermark=self.reads.newest_offset(name, p),
                        newest_offset=self.reads.newest_offset(name, p),
                    )
                    for p in range(count)
                },
            )
            for name, count in {**self.streams, CURSORS_STREAM: CURSOR_PARTITIONS}.items()
        }
        return Metadata(brokers=(), streams=streams, groups={"g": GroupInfo("g", "b0", self.epoch)})


class Routes:
    """The consumer's routes (``GroupRoutes``): every call goes to the coordinator
    here, reads to the memory transport's pretend broker."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self.timeout = 1.0

    @property
    def cache(self) -> Any:
        return type("Cache", (), {"current": self.coordinator.metadata()})()

    async def refresh(self) -> Metadata:
        return self.coordinator.metadata()

    async def fetch_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        return self.coordinator.metadata()

    async def leader_address(self, stream: str, partition: int, *, replica: bool = False) -> str:
        return self.coordinator.reads.address

    async def _call(self, fn: Callable[[Any, float], Awaitable[T]]) -> T:
        return await fn(self.coordinator, 1.0)

    async def call_any(self, what: str, fn: Callable[[Any, float], Awaitable[T]], **kw: Any) -> T:
        return await self._call(fn)

    async def call_broker(
        self, what: str, broker_id: str, fn: Callable[[Any, float], Awaitable[T]], **kw: Any
    ) -> T:
        return await self._call(fn)

    async def call_leader(
        self,
        what: str,
        stream: str,
        partition: int,
        fn: Callable[[Any, float], Awaitable[T]],
        **kw: Any,
    ) -> T:
        return await self._call(fn)


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, set[StreamPartition]]] = []

    def on_partitions_revoked(self, revoked: set[StreamPartition]) -> None:
        self.events.append(("revoked", revoked))

    def on_partitions_assigned(self, assigned: set[StreamPartition]) -> None:
        self.events.append(("assigned", assigned))


def cluster(partitions: int = 1, **reads_kwargs: Any) -> tuple[MemoryReads, Coordinator]:
    reads = MemoryReads(**reads_kwargs)
    return reads, Coordinator(reads, {"s": partitions})


def consumer(
    reads: MemoryReads, coordinator: Coordinator, name: str = "a", **kwargs: Any
) -> Consumer[Any, Any]:
    kwargs.setdefault("auto_checkpoint_interval", None)
    kwargs.setdefault("assignment_interval", 0.01)
    kwargs.setdefault("handover_wait", 0.0)
    return Consumer(
        Routes(coordinator),
        "g",
        ["s"],
        transport=reads,
        consumer_id=name,
        **kwargs,
    )


async def offsets(c: Consumer[Any, Any], count: int) -> list[tuple[int, int]]:
    async with asyncio.timeout(2):
        return [(m.partition, m.offset) for m in [await anext(c) for _ in range(count)]]


async def until(check: Callable[[], bool]) -> None:
    for _ in range(400):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("still not so after 2 s")


def cursor(coordinator: Coordinator, partition: int) -> int:
    return coordinator.cursors.get(("__group:g", "s", partition), -1)


async def test_reads_from_the_start_position_then_from_the_committed_cursor() -> None:
    reads, coordinator = cluster()
    reads.extend("s", [b"x"] * 6)
    async with consumer(reads, coordinator) as c:
        assert await offsets(c, 3) == [(0, 0), (0, 1), (0, 2)]
        await c.commit()
        assert await c.committed(("s", 0)) == 3
    assert cursor(coordinator, 0) == 2
    async with consumer(reads, coordinator, "b", start_position=None) as c:
        assert await offsets(c, 3) == [(0, 3), (0, 4), (0, 5)]
    assert reads.calls[-1].start_offset == 3


async def test_commit_of_given_offsets_stores_the_cursor_one_below() -> None:
    reads, coordinator = cluster(2)
    async with consumer(reads, coordinator) as c:
        await c.commit({("s", 1): 7})
        assert await c.committed(("s", 1)) == 7
        assert await c.committed(("s", 0)) is None
    assert cursor(coordinator, 1) == 6


async def test_the_periodic_checkpoint_and_close_commit_what_was_delivered() -> None:
    reads, coordinator = cluster()
    reads.extend("s", [b"x"] * 4)
    async with consumer(reads, coordinator, auto_checkpoint_interval=0.01) as c:
        assert await offsets(c, 2) == [(0, 0), (0, 1)]
        await until(lambda: cursor(coordinator, 0) == 1)
        assert await offsets(c, 1) == [(0, 2)]
    assert cursor(coordinator, 0) == 2


async def test_seek_delivers_from_the_offset_and_drops_the_read_ahead() -> None:
    reads, coordinator = cluster()
    reads.extend("s", [b"x"] * 10)
    async with consumer(reads, coordinator) as c:
        assert await offsets(c, 2) == [(0, 0), (0, 1)]
        c.seek(("s", 0), 7)
        assert await c.position(("s", 0)) == 7
        assert await offsets(c, 3) == [(0, 7), (0, 8), (0, 9)]
        await c.seek_to_beginning()
        assert await offsets(c, 1) == [(0, 0)]
        await c.seek_to_end()
        assert await c.position(("s", 0)) == 10
        reads.append("s", b"new")
        assert await offsets(c, 1) == [(0, 10)]
    starts = [(c.request.startPosition, c.start_offset) for c in reads.calls]
    assert starts == [
        (api_pb2.EARLIEST, 0),
        (api_pb2.OFFSET, 7),
        (api_pb2.EARLIEST, 0),
        (api_pb2.OFFSET, 10),
    ]


async def test_a_paused_partition_delivers_nothing_until_resumed() -> None:
    reads, coordinator = cluster(2)
    reads.extend("s", [b"x"] * 3, partition=0)
    reads.extend("s", [b"x"] * 3, partition=1)
    async with consumer(reads, coordinator) as c:
        await c.wait_for_assignment(2)
        c.pause(("s", 0))
        assert c.paused() == {StreamPartition("s", 0)}
        assert await offsets(c, 3) == [(1, 0), (1, 1), (1, 2)]
        assert await c.getmany(timeout=0.02) == {}
        c.resume(("s", 0))
        batches = await c.getmany(timeout=1)
    assert {k: [m.offset for m in v] for k, v in batches.items()} == {
        StreamPartition("s", 0): [0, 1, 2]
    }


async def test_read_ahead_of_a_paused_partition_stays_bounded() -> None:
    reads, coordinator = cluster(max_bytes=16 * 1024)
    reads.extend("s", [b"v" * 1000] * 200)
    async with consumer(reads, coordinator) as c:
        await c.wait_for_assignment(2)
        c.pause(("s", 0))
        await asyncio.sleep(0.02)
        part = c._fetcher.parts["s", 0]
        sub = cast(Any, part.sub)
        assert 0 < sub._reader.buffered_bytes <= 16 * 1024
        c.resume(("s", 0))
        got = await offsets(c, 200)
    assert [o for _, o in got] == list(range(200))


@pytest.mark.parametrize("end", [NOT_LEADER, UNAVAILABLE], ids=["not-leader", "unavailable"])
async def test_a_fail_over_resubscribes_after_what_was_read(end: Any) -> None:
    reads, coordinator = cluster()
    reads.extend("s", [b"x"] * 3)
    async with consumer(reads, coordinator) as c:
        assert await offsets(c, 3) == [(0, 0), (0, 1), (0, 2)]
        reads.move_leader()
        reads.end_calls("s", end)
        reads.extend("s", [b"y"] * 2)
        assert await offsets(c, 2) == [(0, 3), (0, 4)]
    _, second = reads.calls
    assert (second.address, second.start_offset) == ("memory:1", 3)
    assert second.request.consumer.groupId == "g"


async def test_a_rebalance_hands_a_partition_over_where_its_owner_stopped() -> None:
    reads, coordinator = cluster(2)
    reads.extend("s", [b"x"] * 4, partition=0)
    reads.extend("s", [b"x"] * 4, partition=1)
    heard = Recorder()
    a = consumer(reads, coordinator, "a", listener=heard, auto_checkpoint_interval=10.0)
    b = consumer(reads, coordinator, "b", auto_checkpoint_interval=10.0, handover_wait=0.02)
    async with a:
        assert await a.wait_for_assignment(2) == {("s", 0), ("s", 1)}
        got = await offsets(a, 8)
        assert sorted(got) == [(p, o) for p in (0, 1) for o in range(4)]
        async with b:
            # b joins: the epoch moves, a's next heartbeat finds out and gives p1 up.
            assert await b.wait_for_assignment(2) == {("s", 1)}
            await until(lambda: a.assignments == {("s", 0)})
            assert cursor(coordinator, 1) == 3  # a committed what it delivered
            reads.append("s", b"after", partition=1)
            assert await offsets(b, 1) == [(1, 4)]  # b goes on after it: no repeat
            assert a.epoch == b.epoch == coordinator.epoch
        # b left: a is given p1 back at its next heartbeat.
        await until(lambda: a.assignments == {("s", 0), ("s", 1)})
    assert heard.events == [
        ("assigned", {StreamPartition("s", 0), StreamPartition("s", 1)}),
        ("revoked", {StreamPartition("s", 1)}),
        ("assigned", {StreamPartition("s", 1)}),
        ("revoked", {StreamPartition("s", 0), StreamPartition("s", 1)}),
    ]
    assert coordinator.members == {}


async def test_a_member_whose_stream_another_member_took_stops_reading_it() -> None:
    """The server ends a member's stream when a member with a newer epoch subscribes:
    the member stops delivering from it at once, before its heartbeat tells it."""
    reads, coordinator = cluster()
    reads.extend("s", [b"x"] * 3)
    async with consumer(reads, coordinator, "a", assignment_interval=10.0) as a:
        assert await offsets(a, 3) == [(0, 0), (0, 1), (0, 2)]
        taker = api_pb2.SubscribeRequest(
            stream="s",
            startPosition=api_pb2.OFFSET,
            startOffset=3,
            consumer=api_pb2.Consumer(groupId="g", consumerId="z", groupEpoch=99),
        )
        reads.subscribe(reads.address, taker, skip_through=None)
        await until(lambda: a.assignments == frozenset())
        assert await a.getmany(timeout=0.02) == {}


async def test_close_ends_while_the_heartbeat_waits_for_a_released_partition() -> None:
    """close() cancels the heartbeat while it gives a partition up and waits for the
    partition's reader to wind up: the heartbeat must end there, or close() waits
    for it forever; and it still commits the partition's position (its new owner
    resumes there) and tells the listener."""
    reads, coordinator = cluster(2)
    reads.extend("s", [b"x"] * 3, partition=1)
    heard = Recorder()
    c = consumer(reads, coordinator, "a", listener=heard, auto_checkpoint_interval=10.0)
    await c.start()
    try:
        assert await c.wait_for_assignment(2) == {("s", 0), ("s", 1)}
        assert await offsets(c, 3) == [(1, 0), (1, 1), (1, 2)]
        # The reader of partition 1 takes its time to end once cancelled (a stream
        # being torn down on a busy machine).
        part = c._fetcher.parts["s", 1]
        assert part.task is not None
        part.task.cancel()
        wound_up = asyncio.Event()

        async def slow_to_end() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                await wound_up.wait()

        part.task = asyncio.ensure_future(slow_to_end())
        # Another member joins (membership only): a's next heartbeat gives p1 up.
        await coordinator.JoinConsumerGroup(
            api_pb2.JoinConsumerGroupRequest(groupId="g", consumerId="b", streams=["s"]), 1.0
        )
        await until(lambda: ("s", 1) not in c._fetcher.parts)
        assert not part.task.done()  # the heartbeat waits for it
    finally:
        async with asyncio.timeout(2):
            await c.close()
    assert "a" not in coordinator.members  # close() went on to leave the group
    assert cursor(coordinator, 1) == 2
    assert heard.events == [
        ("assigned", {StreamPartition("s", 0), StreamPartition("s", 1)}),
        ("revoked", {StreamPartition("s", 1)}),
        ("revoked", {StreamPartition("s", 0)}),
    ]
    wound_up.set()
    await asyncio.wait([part.task], timeout=1)
    assert part.task.cancelled()


async def test_a_start_whose_join_failed_can_be_tried_again() -> None:
    reads, coordinator = cluster()
    reads.extend("s", [b"x"] * 2)
    join = coordinator.JoinConsumerGroup

    async def unavailable(req: api_pb2.JoinConsumerGroupRequest, timeout: float) -> Any:
        raise BrokerUnavailableError("the coordinator cannot be reached")

    coordinator.JoinConsumerGroup = unavailable  # type: ignore[method-assign]
    c = consumer(reads, coordinator)
    with pytest.raises(BrokerUnavailableError):
        await c.start()
    coordinator.JoinConsumerGroup = join  # type: ignore[method-assign]
    await c.start()
    try:
        assert "a" in coordinator.members
        assert await offsets(c, 2) == [(0, 0), (0, 1)]
    finally:
        await c.close()


async def test_a_subscribe_refused_for_an_older_epoch_is_tried_again() -> None:
    """A group deleted when it emptied and created again starts its epochs over: a
    member of the old group still subscribed (with its higher epoch) makes the broker
    refuse the new owner's Subscribe as not assigned. Once that stale stream ends,
    the new owner must subscribe again (at the partition's current leader), not sit
    on an assigned partition it never reads."""
    reads, coordinator = cluster()
    reads.extend("s", [b"x"] * 3)
    stale = api_pb2.SubscribeRequest(
        stream="s",
        startPosition=api_pb2.OFFSET,
        consumer=api_pb2.Consumer(groupId="g", consumerId="old", groupEpoch=99),
    )
    stale_reader = reads.subscribe(reads.address, stale, skip_through=None)
    heard = Recorder()
    async with consumer(reads, coordinator, "a", listener=heard) as a:
        assert await a.wait_for_assignment(2) == {("s", 0)}
        await until(lambda: len(reads.calls) == 2)  # the stale one, a's refused one
        assert await a.getmany(timeout=0.05) == {}  # a few heartbeats: still refused
        reads.move_leader()
        stale_reader.cancel()  # the old member learns it lost the partition
        assert await offsets(a, 3) == [(0, 0), (0, 1), (0, 2)]
        assert a.assignments == {("s", 0)}
        epoch = coordinator.epoch
    last = reads.calls[-1]
    assert (last.address, last.request.consumer.groupEpoch) == ("memory:1", epoch)
    assert heard.events == [
        ("assigned", {StreamPartition("s", 0)}),
        ("revoked", {StreamPartition("s", 0)}),
    ]


@pytest.mark.parametrize("leader_moved", [True, False], ids=["leader-moved", "watermark-moved"])
async def test_a_silent_stream_from_a_replaced_leader_is_subscribed_again(
    leader_moved: bool,
) -> None:
    """A leader cut off from the cluster is replaced but cannot end its streams: the
    member's stream just goes silent. After ``silence`` seconds without a message the
    member looks at the metadata and, seeing another leader (or a high watermark past
    what it read), subscribes again after the last message it took."""
    reads, coordinator = cluster()
    reads.extend("s", [b"x"] * 3)
    a = consumer(reads, coordinator)
    a._fetcher.silence = 0.02
    async with a:
        assert await offsets(a, 3) == [(0, 0), (0, 1), (0, 2)]
        assert await a.getmany(timeout=0.1) == {}  # idle, not silent: no new stream
        assert len(reads.calls) == 1
        reads.stall("s")  # the old leader's stream: open, and nothing more comes
        if leader_moved:
            reads.move_leader()
        reads.extend("s", [b"y"] * 2)
        await until(lambda: len(reads.calls) == 2)
        reads.stall("s", stalled=False)
        assert await offsets(a, 2) == [(0, 3), (0, 4)]
    second = reads.calls[1]
    address = "memory:1" if leader_moved else "memory:0"
    assert (second.address, second.start_offset) == (address, 3)
