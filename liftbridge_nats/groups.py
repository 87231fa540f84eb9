"""Consumer groups: members share a set of streams' partitions and their positions.

Protocol (Liftbridge's, beta in v1.9.0): a member joins the group for some streams;
the group's coordinator broker assigns partitions. Fetching assignments from the
coordinator is also the member's heartbeat; it must carry the group's current epoch,
so a rebalance shows up as an epoch error, after which the member reads the new epoch
and coordinator from the metadata. Each assigned partition is read with a Subscribe
that names the member (group, epoch, consumer id), which lets the server replace an
older member's stream. Positions are stored as cursors named ``__group:<group id>``,
so a partition handed to another member resumes after the last checkpoint. A member
that cannot reach the coordinator for the coordinator timeout reports it, and the
cluster picks a new one once most members did.

Delivery is at least once: a message delivered but not yet checkpointed when its
partition moves is delivered again by the new owner. Closing a consumer checkpoints
before it leaves the group, so a group that changes members while no message is in
flight delivers every message exactly once.
"""

# Per-call ``timeout`` arguments are part of the public API (seconds, retries included).

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import cursors
from ._proto import api_pb2
from .errors import (
    ClientClosedError,
    InvalidArgumentError,
    LiftbridgeError,
    NoStoredPositionError,
    RpcError,
)
from .messages import Message, StartPosition
from .subscription import Subscription, subscription_options

if TYPE_CHECKING:
    from ._router import Router, Stub

__all__ = ["Consumer", "group_cursor_id"]

PartitionKey = tuple[str, int]


def group_cursor_id(group_id: str) -> str:
    """The cursor id under which a group's positions are stored (as the Go client does)."""
    return f"__group:{group_id}"


@dataclass(slots=True)
class _Reader:
    """One assigned partition being read."""

    epoch: int
    task: asyncio.Task[None] | None = None
    subscription: Subscription | None = None
    generation: int = 0


@dataclass(slots=True)
class _Membership:
    coordinator: str
    epoch: int
    consumer_timeout: float
    coordinator_timeout: float
    last_contact: float = field(default_factory=time.monotonic)


class Consumer:
    """A consumer-group member; see the module docstring and :meth:`Client.consumer`.

    ``async with client.consumer(group, streams) as consumer: async for msg in
    consumer: ...``. ``assignments`` tells which partitions it holds now.
    """

    def __init__(
        self,
        router: Router,
        group_id: str,
        streams: Sequence[str],
        *,
        consumer_id: str | None = None,
        auto_checkpoint_interval: float | None = 5.0,
        start_position: StartPosition | None = StartPosition.EARLIEST,
        assignment_interval: float | None = None,
        resubscribe_wait: float = 30.0,
        buffer: int = 256,
    ) -> None:
        if not group_id:
            raise InvalidArgumentError("group_id must not be empty")
        if not streams or any(not s for s in streams):
            raise InvalidArgumentError("give at least one stream name")
        if start_position not in (
            None,
            StartPosition.EARLIEST,
            StartPosition.LATEST,
            StartPosition.NEW_ONLY,
        ):
            raise InvalidArgumentError("start_position must be EARLIEST, LATEST, NEW_ONLY or None")
        if auto_checkpoint_interval is not None and auto_checkpoint_interval <= 0:
            raise InvalidArgumentError("auto_checkpoint_interval must be > 0 (or None)")
        if assignment_interval is not None and assignment_interval <= 0:
            raise InvalidArgumentError("assignment_interval must be > 0 (or None)")
        self.group_id = group_id
        self.consumer_id = consumer_id or uuid.uuid4().hex
        self.streams = tuple(streams)
        self.cursor_id = group_cursor_id(group_id)
        self._router = router
        self._auto_checkpoint = auto_checkpoint_interval
        self._start_position = start_position
        self._assignment_interval = assignment_interval
        self._resubscribe_wait = resubscribe_wait
        self._queue: asyncio.Queue[tuple[PartitionKey, int, Message] | BaseException | None] = (
            asyncio.Queue(maxsize=buffer)
        )
        self._readers: dict[PartitionKey, _Reader] = {}
        self._positions: dict[PartitionKey, int] = {}
        self._committed: dict[PartitionKey, int] = {}
        self._membership: _Membership | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._generation = 0
        self._checkpoint_lock = asyncio.Lock()
        self._closed = False
        self._assigned = asyncio.Event()

    # ------------------------------------------------------------------ public state

    @property
    def epoch(self) -> int | None:
        """The group epoch of the current assignment (None before joining)."""
        return None if self._membership is None else self._membership.epoch

    @property
    def coordinator(self) -> str | None:
        """Broker id of the group's coordinator, as last seen."""
        return None if self._membership is None else self._membership.coordinator

    @property
    def assignments(self) -> frozenset[PartitionKey]:
        """The (stream, partition) pairs this member reads now."""
        return frozenset(self._readers)

    @property
    def positions(self) -> dict[PartitionKey, int]:
        """Offset of the last message delivered per partition (a copy)."""
        return dict(self._positions)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Join the group and start reading what it assigns."""
        if self._membership is not None:
            return
        if self._closed:
            raise ClientClosedError("this consumer is closed; create a new one")
        await self._join()
        with contextlib.suppress(LiftbridgeError):
            await self._fetch_assignments()
        self._tasks.append(asyncio.ensure_future(self._heartbeat_loop()))
        if self._auto_checkpoint is not None:
            self._tasks.append(asyncio.ensure_future(self._checkpoint_loop(self._auto_checkpoint)))

    async def close(self) -> None:
        """Stop reading, checkpoint what was delivered, and leave the group (idempotent)."""
        if self._closed:
            return
        self._closed = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._stop_readers(list(self._readers))
        try:
            with contextlib.suppress(LiftbridgeError):
                await self.checkpoint()
            if self._membership is not None:
                with contextlib.suppress(LiftbridgeError):
                    await self._leave()
        finally:
            self._membership = None
            # Wake an iteration waiting for messages.
            while not self._queue.empty():
                self._queue.get_nowait()
            self._queue.put_nowait(None)

    async def checkpoint(self) -> None:
        """Store the position of every partition that moved since the last checkpoint."""
        async with self._checkpoint_lock:
            for key, offset in list(self._positions.items()):
                if self._committed.get(key) == offset:
                    continue
                stream, partition = key
                await cursors.set_cursor(self._router, self.cursor_id, stream, partition, offset)
                self._committed[key] = offset

    async def wait_for_assignment(self, timeout: float | None = None) -> frozenset[PartitionKey]:
        """Wait until the coordinator has assigned this member at least one partition."""
        await asyncio.wait_for(self._assigned.wait(), timeout)
        return self.assignments

    # ------------------------------------------------------------------ iteration

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        while True:
            if self._closed and self._queue.empty():
                raise StopAsyncIteration
            item = await self._queue.get()
            if item is None:
                raise StopAsyncIteration
            if isinstance(item, BaseException):
                raise item
            key, generation, msg = item
            reader = self._readers.get(key)
            if reader is None or reader.generation != generation:
                continue  # read before a rebalance took the partition away
            self._positions[key] = msg.offset
            return msg

    # ------------------------------------------------------------------ group protocol

    async def _join(self) -> None:
        req = api_pb2.JoinConsumerGroupRequest(
            groupId=self.group_id, consumerId=self.consumer_id, streams=list(self.streams)
        )

        async def call(stub: Stub, left: float) -> api_pb2.JoinConsumerGroupResponse:
            return await stub.JoinConsumerGroup(req, timeout=left)

        resp = await self._router.call_any(f"join consumer group {self.group_id!r}", call)
        self._membership = _Membership(
            coordinator=resp.coordinator,
            epoch=resp.epoch,
            consumer_timeout=resp.consumerTimeout / 1e9,
            coordinator_timeout=resp.coordinatorTimeout / 1e9,
        )

    async def _leave(self) -> None:
        req = api_pb2.LeaveConsumerGroupRequest(groupId=self.group_id, consumerId=self.consumer_id)

        async def call(stub: Stub, left: float) -> None:
            await stub.LeaveConsumerGroup(req, timeout=left)

        await self._router.call_any(f"leave consumer group {self.group_id!r}", call)

    def _interval(self) -> float:
        if self._assignment_interval is not None:
            return self._assignment_interval
        timeout = self._membership.consumer_timeout if self._membership else 15.0
        return max(0.1, 0.4 * timeout)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval())
            try:
                if self._membership is None:
                    await self._join()  # a rejoin that failed last time
                await self._fetch_assignments()
            except LiftbridgeError as exc:
                # Errors here are the cluster's weather (fail-overs, rebalances): keep
                # the member alive and try again at the next beat.
                with contextlib.suppress(LiftbridgeError):
                    await self._recover(exc)

    async def _checkpoint_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(LiftbridgeError):
                await self.checkpoint()

    async def _fetch_assignments(self) -> None:
        membership = self._membership
        assert membership is not None
        req = api_pb2.FetchConsumerGroupAssignmentsRequest(
            groupId=self.group_id, consumerId=self.consumer_id, epoch=membership.epoch
        )

        async def call(stub: Stub, left: float) -> api_pb2.FetchConsumerGroupAssignmentsResponse:
            return await stub.FetchConsumerGroupAssignments(req, timeout=left)

        resp = await self._router.call_broker(
            f"fetch assignments of group {self.group_id!r}",
            membership.coordinator,
            call,
            timeout=max(1.0, membership.consumer_timeout / 2),
        )
        membership.last_contact = time.monotonic()
        assigned = {(a.stream, p) for a in resp.assignments for p in a.partitions}
        await self._reconcile(assigned, resp.epoch)

    async def _recover(self, exc: LiftbridgeError) -> None:
        """After a failed heartbeat: follow a new epoch or coordinator, rejoin, or report."""
        membership = self._membership
        if membership is None:
            return
        text = str(exc).lower()
        if (isinstance(exc, RpcError) and exc.code == "NOT_FOUND") or "not a member" in text:
            # Evicted (missed heartbeats) or the group is gone: join again.
            await self._release(list(self._readers))
            self._membership = None
            await self._join()
            return
        # A rebalance (epoch) or a coordinator change: the metadata has the new values.
        # Positions are checkpointed first so that whoever takes a partition over
        # resumes where this member stopped.
        with contextlib.suppress(LiftbridgeError):
            await self.checkpoint()
        try:
            md = await self._router.fetch_metadata([], [self.group_id])
        except LiftbridgeError:
            md = None
        group = None if md is None else md.groups.get(self.group_id)
        if group is not None and (group.coordinator, group.epoch) != (
            membership.coordinator,
            membership.epoch,
        ):
            membership.coordinator, membership.epoch = group.coordinator, group.epoch
            with contextlib.suppress(LiftbridgeError):
                await self._fetch_assignments()
            return
        if time.monotonic() - membership.last_contact > membership.coordinator_timeout:
            await self._report_coordinator(membership)

    async def _report_coordinator(self, membership: _Membership) -> None:
        req = api_pb2.ReportConsumerGroupCoordinatorRequest(
            groupId=self.group_id,
            consumerId=self.consumer_id,
            coordinator=membership.coordinator,
            epoch=membership.epoch,
        )

        async def call(stub: Stub, left: float) -> None:
            await stub.ReportConsumerGroupCoordinator(req, timeout=left)

        with contextlib.suppress(LiftbridgeError):
            await self._router.call_any(f"report coordinator of {self.group_id!r}", call)

    # ------------------------------------------------------------------ partitions

    async def _reconcile(self, assigned: set[PartitionKey], epoch: int) -> None:
        dropped = [key for key in self._readers if key not in assigned]
        if dropped:
            await self._release(dropped)
        for key in assigned:
            reader = self._readers.get(key)
            if reader is not None and reader.task is not None and not reader.task.done():
                continue  # keep reading; the stream's older epoch stays valid for us
            self._generation += 1
            reader = _Reader(epoch=epoch, generation=self._generation)
            self._readers[key] = reader
            reader.task = asyncio.ensure_future(self._read(key, reader))
        if assigned:
            self._assigned.set()

    async def _release(self, keys: list[PartitionKey]) -> None:
        """Hand partitions back: stop reading, commit what was delivered, forget them.

        Forgetting matters: a later checkpoint must not write this member's old
        position over the one the partition's new owner commits.
        """
        await self._stop_readers(keys)
        async with self._checkpoint_lock:
            for key in keys:
                offset = self._positions.pop(key, None)
                committed = self._committed.pop(key, None)
                if offset is not None and offset != committed:
                    stream, partition = key
                    with contextlib.suppress(LiftbridgeError):
                        await cursors.set_cursor(
                            self._router, self.cursor_id, stream, partition, offset
                        )

    async def _stop_readers(self, keys: list[PartitionKey]) -> None:
        readers = [self._readers.pop(key) for key in keys if key in self._readers]
        for reader in readers:
            if reader.task is not None:
                reader.task.cancel()
        await asyncio.gather(
            *(r.task for r in readers if r.task is not None), return_exceptions=True
        )
        for reader in readers:
            if reader.subscription is not None:
                await reader.subscription.aclose()

    async def _start_options(self, key: PartitionKey) -> dict[str, object]:
        stream, partition = key
        stored = await cursors.fetch_cursor(self._router, self.cursor_id, stream, partition)
        local = self._positions.get(key, -1)
        last = max(stored, local)
        if last >= 0:
            return {"start_offset": last + 1}
        if self._start_position is None:
            raise NoStoredPositionError(
                f"no stored position for {stream!r}/{partition} in group {self.group_id!r} "
                "and start_position is None; set a start position or a cursor",
            )
        return {"start_position": self._start_position}

    async def _read(self, key: PartitionKey, reader: _Reader) -> None:
        stream, partition = key
        try:
            start = await self._start_options(key)
            options = subscription_options(stream, partition=partition, **start)  # type: ignore[arg-type]
            group = api_pb2.Consumer(
                groupId=self.group_id, groupEpoch=reader.epoch, consumerId=self.consumer_id
            )
            sub = Subscription(
                self._router, options, resubscribe_wait=self._resubscribe_wait, group=group
            )
            reader.subscription = sub
            async with sub:
                async for msg in sub:
                    await self._queue.put((key, reader.generation, msg))
        except LiftbridgeError as exc:
            # A passing failure ends this reader and the next heartbeat starts a new
            # one; anything else (a deleted stream, no start position) is the
            # caller's to see, unless the partition was taken away meanwhile.
            if not exc.retriable and self._readers.get(key) is reader:
                await self._queue.put(exc)
