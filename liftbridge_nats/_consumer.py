"""The Consumer: a consumer-group member; members share streams' partitions and positions.

The :class:`Consumer` follows aiokafka's consumer where Liftbridge's model allows it:
``async for`` or :meth:`~Consumer.getmany` / :meth:`~Consumer.getone`, ``seek``,
``position`` / ``committed``, ``pause`` / ``resume`` of single partitions, a
:class:`ConsumerRebalanceListener`, manual :meth:`~Consumer.commit` beside the
periodic one, and :meth:`~Consumer.lag`.

Where Liftbridge differs (beta in v1.9.0):

- A group coordinator broker assigns partitions and bumps the group *epoch* on every
  membership change; a member hears of a rebalance at its next heartbeat (or when
  another member's subscription ends its stream), not in a join/sync round as in
  Kafka. There is no "revoke, then assign" barrier across members.
- Positions are stored as cursors named ``__group:<group id>`` and a cursor holds the
  offset of the last message *processed*; the aiokafka-style calls here speak of the
  next offset to read, as Kafka does (``committed()`` is the cursor + 1).
- The server reports no partition's oldest offset, so a partition read from the
  earliest message has position 0 until its first message is buffered.

Delivery: positions move as messages are delivered. With the periodic checkpoint on
(the default), a member commits what it delivered every few seconds, when it loses
a partition and when it closes, and a member taking a partition over waits briefly
for that last commit: a group whose members come and go delivers each message once.
A member that dies delivers again what it had not committed (at least once). A
message the deserializers refuse is delivered as a
:class:`~liftbridge_nats.DeserializationError`: it moves the position as a
message would (as confluent-kafka's deserializing consumer does), so a commit does
not bring it back; park ``raw_message`` (or ``seek`` back to it) to keep it.

Membership changes are logged (``liftbridge_nats.groups``): partitions assigned and
revoked, epoch and coordinator changes, hand-overs at INFO; an eviction and failed
commits at WARNING.
"""

# Per-call ``timeout`` arguments are part of the public API (seconds, retries included).

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from collections import deque
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Generic, NamedTuple

from . import _cursors as cursors
from ._cursors import group_cursor_id
from ._errors import ClientClosedError, InvalidArgumentError, LiftbridgeError, NotAssignedError
from ._fetcher import Fetcher, PartitionState
from ._lag import PartitionLag, group_lag
from ._log import RateLimitedLog, get_logger
from ._membership import Membership
from ._messages import K, Message, StartPosition, V
from ._proto import api_pb2

if TYPE_CHECKING:
    from ._metrics import Metrics
    from ._read_transport import GroupRoutes, ReadTransport
    from .serializers import Deserializer

__all__ = [
    "Consumer",
    "ConsumerRebalanceListener",
    "StreamPartition",
    "group_cursor_id",
]

_log = get_logger("groups")

# Messages the iteration takes from one partition before it looks at the next. Few:
# the messages taken are alive together, and a batch as large as a good part of the
# garbage collector's youngest generation (700 allocations) is still alive at its
# collections, so its messages age into the older generations and bring on full
# collections, pauses of tens of ms in a process with a large heap.
_ITER_BATCH = 32


class StreamPartition(NamedTuple):
    """A partition of a stream: aiokafka's ``TopicPartition`` (a plain tuple too)."""

    stream: str
    partition: int


class ConsumerRebalanceListener:
    """Told when partitions are assigned to this member or taken from it.

    Subclass it and pass it as ``listener`` to :meth:`Client.consumer`. Either method
    may be a coroutine. They run in the consumer's heartbeat task: keep them short,
    or the coordinator may consider the member gone.

    ``on_partitions_revoked`` runs once the partitions' reading has stopped and,
    with the periodic checkpoint on, after their delivered positions were committed:
    the place to flush state kept per partition, or to :meth:`Consumer.commit` with
    manual commits. Unlike Kafka, the partitions may already be read by their new
    owner then (Liftbridge hands them over without waiting): a commit made here is
    seen by the new owner only if it lands within the consumer's ``handover_wait``.
    ``on_partitions_assigned`` runs before the new partitions are read: a ``seek``
    made there decides where they start.
    """

    def on_partitions_revoked(self, revoked: set[StreamPartition]) -> Awaitable[None] | None:
        """Partitions this member no longer reads."""
        return None

    def on_partitions_assigned(self, assigned: set[StreamPartition]) -> Awaitable[None] | None:
        """Partitions this member reads from now on."""
        return None


def partition_list(keys: Iterable[tuple[str, int]], most: int = 20) -> str:
    """``orders/0, orders/1`` for a log line (sorted; the first ``most`` of them)."""
    ordered = sorted(keys)
    text = ", ".join(f"{stream}/{partition}" for stream, partition in ordered[:most])
    if len(ordered) > most:
        text += f" and {len(ordered) - most} more"
    return text or "none"


def _key(partition: object) -> StreamPartition:
    if (
        isinstance(partition, tuple)
        and len(partition) == 2
        and isinstance(partition[0], str)
        and isinstance(partition[1], int)
        and not isinstance(partition[1], bool)
    ):
        return StreamPartition(partition[0], partition[1])
    raise TypeError(f"a partition is a (stream, partition) tuple, got {partition!r}")


class Consumer(Generic[V, K]):
    """A consumer-group member; see the module docstring and :meth:`Client.consumer`.

    ``async with client.consumer(group, streams) as consumer: async for msg in
    consumer: ...``, or ``batches = await consumer.getmany(timeout=1.0)``.
    ``assignments`` tells which partitions it holds now.
    """

    def __init__(
        self,
        router: GroupRoutes,
        group_id: str,
        streams: Sequence[str],
        *,
        transport: ReadTransport,
        consumer_id: str | None = None,
        auto_checkpoint_interval: float | None = 5.0,
        start_position: StartPosition | None = StartPosition.EARLIEST,
        assignment_interval: float | None = None,
        resubscribe_wait: float = 30.0,
        listener: ConsumerRebalanceListener | None = None,
        handover_wait: float = 0.5,
        value_deserializer: Deserializer[V] | None = None,
        key_deserializer: Deserializer[K] | None = None,
        metrics: Metrics | None = None,
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
        if handover_wait < 0:
            raise InvalidArgumentError("handover_wait must be >= 0 seconds")
        if listener is not None and not isinstance(listener, ConsumerRebalanceListener):
            raise TypeError("listener must be a ConsumerRebalanceListener")
        self.group_id = group_id
        self.consumer_id = consumer_id or uuid.uuid4().hex
        self.streams = tuple(streams)
        self.cursor_id = group_cursor_id(group_id)
        self._router = router
        self._auto_checkpoint = auto_checkpoint_interval
        self._listener = listener
        self._membership = Membership(
            router,
            group_id,
            self.consumer_id,
            self.streams,
            assignment_interval=assignment_interval,
        )
        self._fetcher = Fetcher(
            router,
            transport=transport,
            group=api_pb2.Consumer(groupId=group_id, consumerId=self.consumer_id),
            cursor_id=self.cursor_id,
            start_position=start_position,
            resubscribe_wait=resubscribe_wait,
            handover_wait=handover_wait,
            on_lost=self._on_lost,
            value_deserializer=value_deserializer,
            key_deserializer=key_deserializer,
            metrics=metrics,
        )
        # Periodic commits that fail (a fail-over in progress) are retried at the next
        # tick: reported at most every 30 s.
        self._commit_failures = RateLimitedLog(_log, interval=30.0)
        # Partitions being handed back: commit() still finds them while the revoke
        # listener runs.
        self._revoking: dict[tuple[str, int], PartitionState] = {}
        # What the iteration took and has not delivered yet, partition by partition.
        self._batches: deque[tuple[PartitionState, list[Message[V, K]]]] = deque()
        self._batch_pos = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._commit_lock = asyncio.Lock()
        self._reconcile_lock = asyncio.Lock()
        self._started = False
        self._closed = False
        self._assigned = asyncio.Event()

    # ------------------------------------------------------------------ public state

    @property
    def epoch(self) -> int | None:
        """The group epoch of the current assignment (None before joining)."""
        return self._membership.epoch if self._membership.joined else None

    @property
    def coordinator(self) -> str | None:
        """Broker id of the group's coordinator, as last seen."""
        return self._membership.coordinator if self._membership.joined else None

    @property
    def assignments(self) -> frozenset[StreamPartition]:
        """The partitions this member reads now."""
        return frozenset(StreamPartition(*key) for key in self._fetcher.parts)

    @property
    def positions(self) -> dict[tuple[str, int], int]:
        """Offset of the last message delivered (or committed, before any delivery)
        per assigned partition (a copy)."""
        return {key: p.last for key, p in self._fetcher.parts.items() if p.last is not None}

    def paused(self) -> frozenset[StreamPartition]:
        """The partitions paused with :meth:`pause`."""
        return frozenset(StreamPartition(*k) for k, p in self._fetcher.parts.items() if p.paused)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Consumer[V, K]:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Join the group and start reading what it assigns."""
        if self._closed:
            raise ClientClosedError("this consumer is closed; create a new one")
        if self._started:
            return
        self._started = True
        try:
            await self._membership.join()
        except BaseException:
            # A join that failed (the coordinator unreachable, a timeout) may be tried again.
            self._started = False
            raise
        with contextlib.suppress(LiftbridgeError):
            await self._heartbeat()
        self._tasks.append(asyncio.ensure_future(self._heartbeat_loop()))
        if self._auto_checkpoint is not None:
            self._tasks.append(asyncio.ensure_future(self._checkpoint_loop(self._auto_checkpoint)))

    async def close(self) -> None:
        """Stop reading, commit what was delivered (unless commits are manual: see
        :meth:`Client.consumer`), tell the listener, and leave the group (idempotent)."""
        if self._closed:
            return
        self._closed = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        parts = self._fetcher.detach(list(self._fetcher.parts))
        if parts:
            self._log_revoked(parts)
        self._batches.clear()
        self._fetcher.wake()  # an iteration waiting for messages ends
        try:
            await self._fetcher.stop(parts)
        finally:
            # Cancelled while the readers wind up, close() still commits and leaves
            # (then the cancellation goes on).
            try:
                if self._auto_checkpoint is not None:
                    with contextlib.suppress(LiftbridgeError):
                        await self._commit_parts(parts)
                if parts and self._listener is not None:
                    await self._call_listener(
                        "on_partitions_revoked", {StreamPartition(*p.key) for p in parts}
                    )
                if self._membership.joined:
                    with contextlib.suppress(LiftbridgeError):
                        await self._membership.leave()
            finally:
                self._membership.joined = False

    async def wait_for_assignment(self, timeout: float | None = None) -> frozenset[StreamPartition]:
        """Wait until the coordinator has assigned this member at least one partition."""
        await asyncio.wait_for(self._assigned.wait(), timeout)
        return self.assignments

    # ------------------------------------------------------------------ reading

    def __aiter__(self) -> Consumer[V, K]:
        return self

    async def __anext__(self) -> Message[V, K]:
        batches = self._batches
        while True:
            while batches:
                part, messages = batches[0]
                index = self._batch_pos
                if index < len(messages):
                    message = messages[index]
                    self._batch_pos = index + 1
                    part.last = message.offset
                    return message
                batches.popleft()
                self._batch_pos = 0
            if self._closed:
                raise StopAsyncIteration
            got = self._fetcher.collect(None, _ITER_BATCH)
            if got:
                batches.extend(got)
            else:
                await self._fetcher.wait(None)

    async def getmany(
        self,
        *partitions: tuple[str, int],
        timeout: float = 0.0,
        max_records: int | None = None,
    ) -> dict[StreamPartition, list[Message[V, K]]]:
        """Messages per partition: what is buffered now, or the first to arrive within
        ``timeout`` seconds (0: do not wait). ``partitions`` limits which (default:
        all assigned, paused ones excepted); ``max_records`` bounds the total.

        As in aiokafka, every message returned counts as delivered: its offset is the
        partition's position and what :meth:`commit` stores. Raises the error of a
        partition that cannot be read (a deleted stream, say), and
        :class:`ClientClosedError` once the consumer is closed. A message the
        deserializers refuse is raised as
        :class:`~liftbridge_nats.DeserializationError` once the messages
        before it were returned, and counts as delivered: the next call goes on
        after it.
        """
        if self._closed:
            raise ClientClosedError("this consumer is closed; create a new one")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise InvalidArgumentError("timeout must be >= 0 seconds")
        if max_records is not None and (
            isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1
        ):
            raise InvalidArgumentError("max_records must be an int >= 1 (or None)")
        keys = frozenset(_key(p) for p in partitions) if partitions else None
        limit = max_records if max_records is not None else 2**62
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        result: dict[StreamPartition, list[Message[V, K]]] = {}
        while True:
            got = self._drain_iteration(keys, limit)
            got += self._fetcher.collect(keys, limit - len(got), raise_now=not got)
            for part, messages in got:
                part.last = messages[-1].offset
                result.setdefault(StreamPartition(*part.key), []).extend(messages)
            if result or self._closed:
                return result
            left = deadline - loop.time()
            if left <= 0:
                return result
            await self._fetcher.wait(left)

    def _drain_iteration(
        self, keys: frozenset[tuple[str, int]] | None, limit: int
    ) -> list[tuple[PartitionState, list[Message[V, K]]]]:
        """What ``async for`` took and did not deliver goes first (mixing both is fine)."""
        out: list[tuple[PartitionState, list[Message[V, K]]]] = []
        kept: deque[tuple[PartitionState, list[Message[V, K]]]] = deque()
        first = True
        while self._batches:
            part, messages = self._batches.popleft()
            if first:
                messages = messages[self._batch_pos :]
                self._batch_pos = 0
                first = False
            if limit <= 0 or (keys is not None and part.key not in keys):
                kept.append((part, messages))
                continue
            out.append((part, messages[:limit]))
            if len(messages) > limit:
                kept.append((part, messages[limit:]))
            limit -= len(out[-1][1])
        self._batches.extend(kept)  # in place: a waiting __anext__ holds the deque
        return [(p, m) for p, m in out if m]

    async def getone(self, *partitions: tuple[str, int]) -> Message[V, K]:
        """The next message (of ``partitions``, default all), waiting as long as it takes."""
        while True:
            got = await self.getmany(*partitions, timeout=3600.0, max_records=1)
            for messages in got.values():
                return messages[0]

    # ------------------------------------------------------------------ positions

    def _part(self, partition: tuple[str, int]) -> PartitionState:
        key = _key(partition)
        part = self._fetcher.parts.get(key)
        if part is None:
            raise NotAssignedError(
                f"partition {key.partition} of stream {key.stream!r} is not assigned to "
                f"consumer {self.consumer_id!r}; see consumer.assignments"
            )
        return part

    def _forget_taken(self, part: PartitionState) -> None:
        """Drop what the iteration took from ``part`` and did not deliver."""
        batches = self._batches  # changed in place: a waiting __anext__ holds it
        if batches and batches[0][0] is part:
            self._batch_pos = 0  # the batch being delivered goes
        kept = [(p, m) for p, m in batches if p is not part]
        batches.clear()
        batches.extend(kept)

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        """Deliver ``partition`` from ``offset`` next (read ahead messages are dropped).

        An offset past the end waits for that message; one before the oldest still
        stored starts at the oldest. Commits are not changed until the next commit.
        """
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidArgumentError(f"offset must be an int >= 0, got {offset!r}")
        part = self._part(partition)
        self._forget_taken(part)
        self._fetcher.seek(part, offset)

    async def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        """Deliver these partitions (default: all assigned) from their oldest message."""
        for part in self._parts(partitions):
            self._forget_taken(part)
            self._fetcher.seek(part, StartPosition.EARLIEST)

    async def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        """Deliver these partitions (default: all assigned) from the next message
        published, as aiokafka does: the position becomes newest offset + 1."""
        for part in self._parts(partitions):
            newest = await self._fetcher._newest(part)
            self._forget_taken(part)
            self._fetcher.seek(part, newest + 1)

    def _parts(self, partitions: tuple[tuple[str, int], ...]) -> list[PartitionState]:
        if not partitions:
            return list(self._fetcher.parts.values())
        return [self._part(p) for p in partitions]

    async def position(self, partition: tuple[str, int]) -> int:
        """The offset of the next message this member will deliver from ``partition``.

        Known once the partition's start is resolved: after a delivered message, a
        seek, or a committed position; LATEST and NEW_ONLY starts resolve to offsets.
        A partition read from the earliest message reports its first buffered offset,
        and 0 before one arrives (Liftbridge does not report a partition's oldest
        offset). Raises :class:`NotAssignedError` for a partition not assigned.
        """
        part = self._part(partition)
        for index, (taker, messages) in enumerate(self._batches):
            first = self._batch_pos if index == 0 else 0
            if taker is part and first < len(messages):
                return messages[first].offset
        return self._fetcher.position(part)

    async def committed(
        self, partition: tuple[str, int], *, timeout: float | None = None
    ) -> int | None:
        """The group's committed position on ``partition`` as aiokafka gives it (the
        next offset to read: Liftbridge's cursor + 1), None when none is stored.
        Any partition of the group's streams, assigned here or not."""
        key = _key(partition)
        stored = await cursors.fetch_cursor(
            self._router, self.cursor_id, key.stream, key.partition, timeout=timeout
        )
        return None if stored < 0 else stored + 1

    async def commit(self, offsets: Mapping[tuple[str, int], int] | None = None) -> None:
        """Commit positions now, beside (or instead of) the periodic checkpoint.

        Without ``offsets``: the position of every partition that moved since its last
        commit (as :meth:`checkpoint`). With ``offsets``, as in aiokafka, the next
        offset to read per partition (stored as a cursor one below it); a partition
        need not be assigned here.
        """
        if offsets is None:
            async with self._commit_lock:
                await self._commit_parts([*self._fetcher.parts.values(), *self._revoking.values()])
            return
        targets: dict[StreamPartition, int] = {}
        for partition, offset in offsets.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise InvalidArgumentError(f"a committed offset is an int >= 0, got {offset!r}")
            targets[_key(partition)] = offset - 1
        async with self._commit_lock:
            await asyncio.gather(
                *(
                    cursors.set_cursor(self._router, self.cursor_id, k.stream, k.partition, c)
                    for k, c in targets.items()
                )
            )
            for key, cursor in targets.items():
                part = self._fetcher.parts.get(key) or self._revoking.get(key)
                if part is not None:
                    part.committed = cursor

    async def checkpoint(self) -> None:
        """Store the position of every partition that moved since the last commit."""
        await self.commit()

    async def _commit_parts(self, parts: list[PartitionState]) -> None:
        moved = [p for p in parts if p.last is not None and p.last != p.committed]

        async def one(part: PartitionState) -> None:
            last = part.last
            assert last is not None
            stream, partition = part.key
            await cursors.set_cursor(self._router, self.cursor_id, stream, partition, last)
            part.committed = last

        results = await asyncio.gather(*(one(p) for p in moved), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def lag(self, *, timeout: float | None = None) -> list[PartitionLag]:
        """The group's lag on every partition of its streams (committed positions
        against the newest offsets), as :func:`~liftbridge_nats.consumer_lag` gives it."""
        return await group_lag(self._router, self.group_id, self.streams, timeout=timeout)

    # ------------------------------------------------------------------ flow

    def pause(self, *partitions: tuple[str, int]) -> None:
        """Stop delivering from these partitions until :meth:`resume`.

        Client-side, as in aiokafka: reading stops once the partition's read-ahead is
        full, and the server holds the rest. (Not Liftbridge's ``pause_stream``,
        which stops a partition from recording.)
        """
        for partition in partitions:
            part = self._part(partition)
            part.paused = True
            part.ready = False
            taken = [m for p, m in self._batches if p is part]
            if taken:
                if self._batches[0][0] is part:
                    taken[0] = taken[0][self._batch_pos :]
                self._forget_taken(part)
                part.pending = [m for batch in taken for m in batch] + part.pending

    def resume(self, *partitions: tuple[str, int]) -> None:
        """Deliver again from paused partitions."""
        for partition in partitions:
            part = self._part(partition)
            if part.paused:
                part.paused = False
                self._fetcher.make_ready(part)

    # ------------------------------------------------------------------ group protocol

    async def _heartbeat(self) -> None:
        membership = self._membership
        if not membership.joined:
            await membership.join()  # a rejoin that failed last time
        assigned, epoch = await membership.fetch_assignments()
        await self._reconcile(assigned, epoch)

    async def _heartbeat_loop(self) -> None:
        # (``not self._closed``, not ``True``: should anything under it ever swallow
        # close()'s cancellation, the loop still ends, and close() with it.)
        while not self._closed:
            await asyncio.sleep(self._membership.interval())
            try:
                await self._heartbeat()
            except LiftbridgeError as exc:
                # Errors here are the cluster's weather (fail-overs, rebalances): keep
                # the member alive and try again at the next beat.
                _log.debug(
                    "group %r member %s: heartbeat: %s", self.group_id, self.consumer_id, exc
                )
                with contextlib.suppress(LiftbridgeError):
                    await self._recover(exc)

    async def _recover(self, exc: LiftbridgeError) -> None:
        """After a failed heartbeat: follow a new epoch or coordinator, rejoin, or report."""
        membership = self._membership
        if membership.evicted(exc):
            # Evicted (missed heartbeats) or the group is gone: join again.
            _log.warning(
                "group %r member %s is no longer a member (%s); joining again",
                self.group_id,
                self.consumer_id,
                exc,
            )
            await self._release(list(self._fetcher.parts))
            membership.joined = False
            await membership.join()
            return
        # A rebalance (epoch) or a coordinator change: the metadata has the new values.
        # Positions are committed first so that whoever takes a partition over
        # resumes where this member stopped.
        if self._auto_checkpoint is not None:
            with contextlib.suppress(LiftbridgeError):
                await self.commit()
        before = membership.coordinator, membership.epoch
        if await membership.follow_metadata():
            _log.info(
                "group %r: coordinator %s, epoch %d (was %s, %d)",
                self.group_id,
                membership.coordinator,
                membership.epoch,
                *before,
            )
            with contextlib.suppress(LiftbridgeError):
                assigned, epoch = await membership.fetch_assignments()
                await self._reconcile(assigned, epoch)
            return
        await membership.report_if_silent()

    async def _checkpoint_loop(self, interval: float) -> None:
        while not self._closed:
            await asyncio.sleep(interval)
            try:
                await self.commit()
            except LiftbridgeError as exc:
                self._commit_failures.log(
                    "group %r member %s: periodic commit failed, retried in %g s: %s",
                    self.group_id,
                    self.consumer_id,
                    interval,
                    exc,
                )

    # ------------------------------------------------------------------ partitions

    async def _reconcile(self, assigned: set[tuple[str, int]], epoch: int) -> None:
        async with self._reconcile_lock:
            if self._closed:
                return
            parts = self._fetcher.parts
            dropped = [key for key in parts if key not in assigned]
            if dropped:
                await self._release(dropped)
            new: list[PartitionState] = []
            fresh: set[StreamPartition] = set()
            for key in sorted(assigned):
                previous = parts.get(key)
                if previous is not None and previous.alive:
                    continue  # keep reading; the stream's older epoch stays valid for us
                new.append(self._fetcher.add(key, epoch, previous))
                if previous is None:
                    fresh.add(StreamPartition(*key))
            if fresh:
                _log.info(
                    "group %r member %s, epoch %d: assigned %s",
                    self.group_id,
                    self.consumer_id,
                    epoch,
                    partition_list(fresh),
                )
            if fresh and self._listener is not None:
                await self._call_listener("on_partitions_assigned", fresh)
            for part in new:
                if self._fetcher.parts.get(part.key) is part:
                    self._fetcher.start(part)
            if assigned:
                self._assigned.set()

    def _on_lost(self, part: PartitionState) -> None:
        """The server ended a partition's stream: another member took it over. What
        the iteration took from it is not delivered; the rest of the hand-back (the
        commit the new owner waits for) follows at once in a task."""
        _log.info(
            "group %r member %s: partition %s/%d was taken over by another member after "
            "offset %s; handing it back",
            self.group_id,
            self.consumer_id,
            *part.key,
            "none" if part.last is None else part.last,
        )
        self._forget_taken(part)
        task = asyncio.ensure_future(self._hand_back(part))
        self._tasks.append(task)
        task.add_done_callback(self._forget_task)

    async def _hand_back(self, part: PartitionState) -> None:
        # The new owner reads the committed position again ``handover_wait`` after it
        # took the partition: commit first, before anything else can delay it.
        if self._auto_checkpoint is not None:
            with contextlib.suppress(LiftbridgeError):
                await self._commit_parts([part])
        await self._release([part.key])

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    async def _release(self, keys: list[tuple[str, int]]) -> None:
        """Hand partitions back: stop reading, commit what was delivered, tell the
        listener, forget them.

        Forgetting matters: a later commit must not write this member's old position
        over the one the partition's new owner commits.
        """
        for key in keys:
            part = self._fetcher.parts.get(key)
            if part is not None:
                self._forget_taken(part)
        parts = self._fetcher.detach(keys)
        if not parts:
            return
        self._log_revoked(parts)
        for part in parts:
            self._revoking[part.key] = part
        try:
            try:
                await self._fetcher.stop(parts)
            finally:
                # Cancelled while the readers wind up (close() cancels the heartbeat),
                # this still commits what was delivered, where the partitions' new
                # owners resume, and tells the listener.
                if self._auto_checkpoint is not None:
                    async with self._commit_lock:
                        with contextlib.suppress(LiftbridgeError):
                            await self._commit_parts(parts)
                if self._listener is not None:
                    await self._call_listener(
                        "on_partitions_revoked", {StreamPartition(*p.key) for p in parts}
                    )
        finally:
            for part in parts:
                if self._revoking.get(part.key) is part:
                    del self._revoking[part.key]

    def _log_revoked(self, parts: list[PartitionState]) -> None:
        _log.info(
            "group %r member %s: revoked %s",
            self.group_id,
            self.consumer_id,
            partition_list(p.key for p in parts),
        )

    async def _call_listener(self, name: str, partitions: set[StreamPartition]) -> None:
        try:
            result = getattr(self._listener, name)(partitions)
            if inspect.isawaitable(result):
                await result
        except Exception:
            # As aiokafka does: a failing listener is reported and the consumer goes on.
            _log.exception("consumer %s: %s failed", self.consumer_id, name)
