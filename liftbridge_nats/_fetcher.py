"""A consumer's assigned partitions: one subscription each, read without a task each.

Every partition's subscription reads ahead into its own bounded buffer on the event
loop (see :mod:`._stream_reader`). When a buffer gets something, the subscription's
listener puts the partition in a ready queue and wakes the consumer; the consumer
takes whole batches from ready partitions in turn (:meth:`Fetcher.collect`). So the
data path costs no task switch per partition and no queue hop per message: a
consumer of 256 partitions reads them as cheaply as one.

Each partition also has a small driver task for what needs I/O: finding the start
position, subscribing, subscribing again after a fail-over, seeking. It sleeps while
data flows and wakes only when the consumer finds the stream needs it.

A stream can also go silent without ending: a leader cut off from the cluster (and
from us) is replaced, but cannot end its streams, and TCP may not notice for a long
time. So a driver whose stream delivered nothing for ``silence`` seconds checks the
partition's metadata (one fetch per fetcher and period, shared by its partitions):
when another broker leads it now, or its high watermark passed what the stream
delivered, the stream is dropped and subscribed again after the last message taken.

Hand-over between members: the server ends a member's stream when another member
subscribes to the partition with a newer group epoch. The member losing it stops
delivering from it at once (its read-ahead is dropped) and the consumer commits what
it delivered; the member gaining it waits ``handover_wait`` after subscribing, reads
the committed position again, and starts over from there if it moved. A group that
changes members while its members commit on hand-over thus delivers each message
once (see :mod:`._consumer` for what can still repeat).

The fetcher reads each partition through :class:`._read_transport.PartitionFeed`
(a :class:`~._subscription.Subscription`, over the client's read transport).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from . import _cursors as cursors
from ._errors import DeserializationError, LiftbridgeError, NoStoredPositionError
from ._log import get_logger
from ._messages import Message, StartPosition
from ._proto import api_pb2
from ._subscription import Subscription, subscription_options

if TYPE_CHECKING:
    from ._metrics import Metrics
    from ._read_transport import GroupRoutes, PartitionFeed, ReadTransport
    from ._router import Stub
    from .serializers import Deserializer

__all__ = ["Fetcher", "PartitionState"]

Key = tuple[str, int]
Batch = list[Message[Any, Any]]

_log = get_logger("groups")

# Seconds a partition's stream may deliver nothing before its driver checks that the
# stream still comes from the partition's leader (see the module docstring). Above
# the test clusters' leader timeout (3 s), below the server's default (15 s), so that
# a stream from a replaced leader ends about when the fail-over does.
SILENCE = 10.0


class PartitionState:
    """One assigned partition: its subscription and positions."""

    __slots__ = (
        "attention",
        "committed",
        "epoch",
        "error",
        "holding",
        "key",
        "last",
        "lost",
        "paused",
        "pending",
        "ready",
        "seeks",
        "settled",
        "start",
        "sub",
        "task",
    )

    def __init__(self, key: Key, epoch: int, last: int | None, committed: int | None) -> None:
        self.key = key
        self.epoch = epoch
        self.last = last  # offset of the last message delivered (or started after)
        self.committed = committed  # the position last committed, as far as we know
        # Where the next subscription starts: an offset, a start position, or None
        # for "after the last delivered, else the committed position, else the
        # consumer's start position".
        self.start: int | StartPosition | None = None
        self.sub: PartitionFeed | None = None
        self.task: asyncio.Task[None] | None = None
        self.attention: asyncio.Future[None] | None = None
        self.pending: Batch = []  # taken but not delivered (paused meanwhile)
        self.ready = False
        self.paused = False
        self.holding = False
        self.settled = False  # the hand-over wait is behind it
        self.seeks = 0  # counts seeks: a subscribe in progress when one comes is dropped
        self.lost = False
        self.error: LiftbridgeError | None = None

    @property
    def alive(self) -> bool:
        """Whether its driver still runs (a passing failure ends it; see reconcile)."""
        return self.task is not None and not self.task.done()


class Fetcher:
    """The partitions a consumer reads, their ready queue and their drivers."""

    def __init__(
        self,
        router: GroupRoutes,
        *,
        transport: ReadTransport,
        group: api_pb2.Consumer,
        cursor_id: str,
        start_position: StartPosition | None,
        resubscribe_wait: float,
        handover_wait: float,
        on_lost: Callable[[PartitionState], None],
        value_deserializer: Deserializer[Any] | None = None,
        key_deserializer: Deserializer[Any] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._router = router
        self._transport = transport
        self._value_deserializer = value_deserializer
        self._key_deserializer = key_deserializer
        self._metrics = metrics
        self._group = group
        self._cursor_id = cursor_id
        self._start_position = start_position
        self._resubscribe_wait = resubscribe_wait
        self._handover_wait = handover_wait
        self._on_lost = on_lost
        self.parts: dict[Key, PartitionState] = {}
        self._ready: deque[PartitionState] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._failures: deque[LiftbridgeError] = deque()
        self.silence = SILENCE
        self._refresh_lock = asyncio.Lock()
        self._refreshed_at = float("-inf")

    # ------------------------------------------------------------------ membership

    def add(self, key: Key, epoch: int, previous: PartitionState | None) -> PartitionState:
        """Track a newly assigned partition (reading starts with :meth:`start`)."""
        part = PartitionState(
            key,
            epoch,
            previous.last if previous else None,
            previous.committed if previous else None,
        )
        if previous is not None:
            part.paused = previous.paused
            part.start = previous.start
            part.pending = previous.pending
        self.parts[key] = part
        return part

    def start(self, part: PartitionState) -> None:
        """Start the partition's driver."""
        part.task = asyncio.ensure_future(self._drive(part))

    def detach(self, keys: Iterable[Key]) -> list[PartitionState]:
        """Stop reading some partitions and forget them; their tasks end soon."""
        parts = [self.parts.pop(key) for key in keys if key in self.parts]
        for part in parts:
            part.lost = True
            part.ready = False
            if part.sub is not None:
                part.sub.abandon()
            if part.task is not None:
                part.task.cancel()
        return parts

    # ------------------------------------------------------------------ data path

    def _on_data(self, part: PartitionState) -> None:
        """Subscription listener: its stream has something new."""
        sub = part.sub
        if sub is None or part.lost:
            return
        if sub.handed_over:
            self.lose(part)
            return
        if not part.ready and not part.paused and not part.holding:
            part.ready = True
            self._ready.append(part)
            self.wake()

    def wake(self) -> None:
        """Wake the consumer waiting in :meth:`wait`."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def lose(self, part: PartitionState) -> None:
        """The partition moved to another member: deliver nothing more from it."""
        if part.lost or self.parts.get(part.key) is not part:
            return
        part.lost = True
        part.ready = False
        part.pending = []
        if part.sub is not None:
            part.sub.abandon()
        self._on_lost(part)

    def make_ready(self, part: PartitionState) -> None:
        """Queue a partition that may have buffered messages (after resume, say)."""
        if part.pending or (part.sub is not None and part.sub.buffered):
            self._on_data(part)

    def collect(
        self, keys: frozenset[Key] | None, limit: int, *, raise_now: bool = True
    ) -> list[tuple[PartitionState, Batch]]:
        """Take up to ``limit`` buffered messages, partition after partition, without
        waiting. ``keys`` limits which partitions (None: all). Raises a partition's
        error that no retry cures (after its messages were delivered).

        A message that cannot be deserialized is raised as soon as it is met with
        nothing collected before it (and counts as delivered: the partition's
        ``last`` moves to it); otherwise it waits in its subscription to be raised by
        the next call. ``raise_now=False`` (the caller holds messages already) keeps
        every error for a later call.
        """
        if self._failures and raise_now:
            raise self._failures.popleft()
        out: list[tuple[PartitionState, Batch]] = []
        ready = self._ready
        for _ in range(len(ready)):
            if limit <= 0:
                break
            part = ready.popleft()
            if part.lost or part.paused or part.holding or part.sub is None:
                part.ready = False
                continue
            if keys is not None and part.key not in keys:
                ready.append(part)  # stays ready for another caller
                continue
            sub = part.sub
            if part.pending:
                messages, part.pending = part.pending[:limit], part.pending[limit:]
            else:
                try:
                    messages = sub.take_many(limit)
                except DeserializationError as exc:
                    ready.append(part)  # the messages after it are still buffered
                    if out or not raise_now:
                        sub.defer_error(exc)  # raised by the next take, in its turn
                        continue
                    part.last = exc.offset
                    raise
                except LiftbridgeError as exc:
                    part.ready = False
                    self._failed(part, exc)
                    continue
            if messages:
                out.append((part, messages))
                limit -= len(messages)
            if part.pending or (sub.buffered and not sub.closed):
                ready.append(part)
            else:
                part.ready = False
                if not sub.streaming or sub.closed:
                    self._poke(part)  # the driver subscribes again, or winds up
        return out

    async def wait(self, timeout: float | None) -> None:
        """Until a partition becomes ready, :meth:`wake` is called, or ``timeout`` passes.

        Call it right after :meth:`collect` found nothing (no await in between: a
        partition ready now but not wanted by that collect must not end the wait).
        """
        if self._failures:
            return
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            pass
        finally:
            self._waiter = None

    # ------------------------------------------------------------------ positions

    def seek(self, part: PartitionState, start: int | StartPosition) -> None:
        """Read the partition from ``start`` next (what was read ahead is dropped)."""
        part.start = start
        part.seeks += 1
        part.pending = []
        part.last = start - 1 if isinstance(start, int) else None
        part.ready = False
        if part.sub is not None:
            part.sub.abandon()
            part.sub = None
        self._poke(part)

    def position(self, part: PartitionState) -> int:
        """The offset of the next message to deliver (see :meth:`Consumer.position`)."""
        if part.pending:
            return part.pending[0].offset
        if part.last is not None:
            return part.last + 1
        if isinstance(part.start, int):
            return part.start
        first = None if part.sub is None else part.sub.peek_offset()
        return 0 if first is None else first

    # ------------------------------------------------------------------ drivers

    def _poke(self, part: PartitionState) -> None:
        attention = part.attention
        if attention is not None and not attention.done():
            attention.set_result(None)

    def _failed(self, part: PartitionState, exc: LiftbridgeError) -> None:
        if exc.retriable:
            self._poke(part)  # a passing failure: the driver deals with it
            return
        part.error = exc
        self._failures.append(exc)
        self.wake()

    async def _drive(self, part: PartitionState) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not part.lost:
                sub = part.sub
                if sub is None:
                    sub = await self._subscribe(part)
                elif not await sub.ensure_open() and part.sub is sub:
                    # The server ended it, or refused a resubscription: the partition
                    # moved (what was taken from the stream is not delivered, see lose).
                    self.lose(part)
                    return
                if sub is None or part.sub is not sub:
                    continue  # a seek replaced it meanwhile (or it was lost)
                if sub.refused:
                    # Refused at the first subscribe: nothing was read. Ending the driver
                    # leaves the partition assigned but not alive, and the next
                    # heartbeat starts a new driver with the epoch it then has (or
                    # revokes the partition): waiting here for data would wait forever.
                    self._log_refused(part)
                    return
                part.attention = loop.create_future()
                self.make_ready(part)
                await self._watch(part, sub, part.attention)
        except LiftbridgeError as exc:
            # A passing failure ends this driver and the next heartbeat starts a new
            # one; anything else (a deleted stream, no start position) is the
            # caller's to see, unless the partition was taken away meanwhile.
            if not exc.retriable and self.parts.get(part.key) is part:
                part.error = exc
                self._failures.append(exc)
                self.wake()
        finally:
            part.attention = None

    async def _watch(
        self, part: PartitionState, sub: PartitionFeed, attention: asyncio.Future[None]
    ) -> None:
        """Wait until the partition needs its driver (``attention``); meanwhile, after
        every ``silence`` seconds in which its stream delivered nothing, check that the
        stream is not one a replaced leader left open. Such a stream is dropped: the
        driver then subscribes again."""
        seen = sub.last_offset
        while True:
            done, _ = await asyncio.wait((attention,), timeout=self.silence)
            if done:
                return
            taken, seen = seen, sub.last_offset
            if (
                taken != seen  # it delivered
                or part.lost
                or part.paused
                or part.holding
                or part.sub is not sub
                or sub.buffered  # the consumer is slow, not the stream
                or not sub.streaming
            ):
                continue
            why = await self._stale(part, sub)
            if why is not None:
                sub.reconnect(why)
                return

    async def _stale(self, part: PartitionState, sub: PartitionFeed) -> str | None:
        """Why a silent stream cannot be the partition's live stream, or None."""
        stream, partition = part.key
        try:
            async with self._refresh_lock:
                loop = asyncio.get_running_loop()
                if loop.time() - self._refreshed_at >= self.silence / 2:
                    await self._router.fetch_metadata(sorted({key[0] for key in self.parts}))
                    self._refreshed_at = loop.time()
            info = self._router.cache.current.partition(stream, partition)
            if info is None or not info.leader:
                return None  # nowhere better to read from (yet)
            leader = await self._router.leader_address(stream, partition)
        except LiftbridgeError:
            return None  # the cluster is not answering: the next period looks again
        if leader != sub.address:
            return f"broker {info.leader} leads the partition now"
        last = sub.last_offset if sub.last_offset is not None else part.last
        if last is not None and info.high_watermark > last:
            return f"the partition's high watermark is {info.high_watermark}"
        return None

    def _log_refused(self, part: PartitionState) -> None:
        _log.info(
            "group %r member %s: the broker refused partition %s/%d to group epoch %d "
            "(a subscriber with a newer epoch holds it there); subscribing again at the "
            "next heartbeat if it is still assigned",
            self._group.groupId,
            self._group.consumerId,
            *part.key,
            part.epoch,
        )

    async def _subscribe(self, part: PartitionState) -> PartitionFeed | None:
        """Subscribe where the partition should start; None when a seek (or the hand-
        over check) decided otherwise meanwhile: the caller tries again."""
        stream, partition = part.key
        seeks = part.seeks
        start, last, committed = await self._start_options(part)
        if part.seeks != seeks:
            return None
        if last is not None:
            part.last = last
        if committed is not None:
            part.committed = committed
        group = api_pb2.Consumer()
        group.CopyFrom(self._group)
        group.groupEpoch = part.epoch
        sub: Subscription[Any, Any] = Subscription(
            self._router,
            subscription_options(stream, partition=partition, **start),  # type: ignore[arg-type]
            transport=self._transport,
            resubscribe_wait=self._resubscribe_wait,
            group=group,
            listener=functools.partial(self._on_data, part),
            value_deserializer=self._value_deserializer,
            key_deserializer=self._key_deserializer,
            metrics=self._metrics,
        )
        part.sub = sub
        part.start = None
        part.holding = self._handover_wait > 0 and not part.settled
        try:
            await sub.start()
            if part.holding and part.seeks == seeks and not sub.refused:
                part.settled = True
                await self._settle_handover(part)
        finally:
            part.holding = False
        if part.seeks != seeks or part.sub is not sub:
            sub.abandon()
            if part.sub is sub:
                part.sub = None
            return None
        return sub

    async def _settle_handover(self, part: PartitionState) -> None:
        """After subscribing: give a previous owner (whose stream this subscription
        just ended) time to commit, then read the committed position again. When it
        moved past where this subscription started, start over from there (as a seek
        would)."""
        seeks = part.seeks
        await asyncio.sleep(self._handover_wait)
        stored = await self._cursor(part)
        last = part.last if part.last is not None else -1
        if part.seeks == seeks and stored >= 0 and stored > last:
            _log.info(
                "group %r: took over partition %s/%d; the previous owner committed "
                "offset %d: reading from %d",
                self._group.groupId,
                *part.key,
                stored,
                stored + 1,
            )
            part.last = part.committed = stored
            part.start = stored + 1
            part.seeks += 1

    async def _cursor(self, part: PartitionState) -> int:
        stream, partition = part.key
        return await cursors.fetch_cursor(self._router, self._cursor_id, stream, partition)

    async def _start_options(
        self, part: PartitionState
    ) -> tuple[dict[str, object], int | None, int | None]:
        """Where to subscribe: a seek, else after the last delivered message, else
        after the committed position, else the consumer's start position. Also the
        partition's last and committed offsets that this start implies (None: as is).
        A start position is turned into an offset when one can be known (see
        position())."""
        start = part.start
        if isinstance(start, int):
            return {"start_offset": start}, None, None
        if start is StartPosition.EARLIEST:
            return {"start_position": StartPosition.EARLIEST}, None, None
        if part.last is not None:
            return {"start_offset": part.last + 1}, None, None
        stored = await self._cursor(part)
        if stored >= 0:
            return {"start_offset": stored + 1}, stored, stored
        position = self._start_position
        if position is None:
            stream, partition = part.key
            raise NoStoredPositionError(
                f"no stored position for {stream!r}/{partition} in group "
                f"{self._group.groupId!r} and start_position is None; set a start "
                "position or a cursor",
            )
        if position is StartPosition.EARLIEST:
            return {"start_position": StartPosition.EARLIEST}, None, None
        # LATEST starts at the newest message, NEW_ONLY after it: as an offset, so that
        # position() knows it and nothing published meanwhile is skipped.
        newest = await self._newest(part)
        first = max(0, newest if position is StartPosition.LATEST else newest + 1)
        return {"start_offset": first}, first - 1, None

    async def _newest(self, part: PartitionState) -> int:
        stream, partition = part.key
        req = api_pb2.FetchPartitionMetadataRequest(stream=stream, partition=partition)

        async def call(stub: Stub, left: float) -> int:
            resp = await stub.FetchPartitionMetadata(req, timeout=left)
            return int(resp.metadata.newestOffset)

        return await self._router.call_leader(
            f"fetch metadata of {stream!r}/{partition}", stream, partition, call
        )

    async def stop(self, parts: list[PartitionState]) -> None:
        """Wait for the drivers of detached partitions (cancelled by :meth:`detach`)
        to end. A cancellation of the caller ends the wait and is raised: swallowed,
        it would leave a heartbeat that was releasing partitions running after
        ``close()`` cancelled it, and ``close()`` waiting for it forever."""
        tasks = [p.task for p in parts if p.task is not None and not p.task.done()]
        if tasks:
            await asyncio.wait(tasks)
