"""The workload of a chaos run: publishers at a steady rate and a consumer group, each
recording what happened to the history.

Publishes go through the SDK's :class:`~liftbridge_nats.Publisher` with
``AckPolicy.ALL``, a key per message (a few keys, so that each key sees many messages)
and a unique id in the ``chaos-id`` header (and as the value, so that a message can be
named even without its headers). The partition is the key's, computed as the SDK's key
partitioner does (CRC-32 of the key), and given explicitly so the history knows it
whatever happens to the publish. The consumer group's members are the SDK's
:class:`~liftbridge_nats.Consumer`, committing every second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import zlib
from collections.abc import Callable
from typing import Any

from liftbridge_nats import (
    Ack,
    AckPolicy,
    ClientClosedError,
    LiftbridgeError,
    Message,
    Publisher,
    StartPosition,
    StopPosition,
)

from .history import HistoryWriter, Member, Publish, Read, Stored

ID_HEADER = "chaos-id"


def key_partition(key: str, partitions: int) -> int:
    """The partition of ``key``: CRC-32 (IEEE) modulo the partition count, as the SDK's
    and the Go client's key partitioners compute it."""
    return zlib.crc32(key.encode()) % partitions


def message_id(message: Message[bytes, bytes]) -> str:
    """The run's id of a stored message ("" for one the run did not publish)."""
    raw = message.headers.get(ID_HEADER) or message.value or b""
    return raw.decode(errors="replace") if raw.startswith(b"c") else ""


class PublishLoad:
    """Publishes at ``rate`` messages a second until stopped, recording each outcome.

    ``deadline`` is how long a publish may take to end (the ack timeout plus a margin):
    :meth:`finish` waits that long for the last ones and records those that did not
    end as such (``end`` None), which the checker fails.
    """

    def __init__(
        self,
        publisher: Publisher[bytes, bytes],
        history: HistoryWriter,
        *,
        stream: str,
        partitions: int,
        rate: float,
        keys: int,
        deadline: float,
    ) -> None:
        self._pub = publisher
        self._history = history
        self._stream = stream
        self._partitions = partitions
        self._rate = rate
        self._keys = keys
        self.deadline = deadline
        # Publishes not ended yet: id -> (key, partition, start).
        self._pending: dict[str, tuple[str, int, float]] = {}
        self._futures: set[asyncio.Future[Ack | None]] = set()
        self.sent = 0
        self.acked = 0
        self.acked_ids: set[str] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until ``stop`` is set. A publish that blocks (backpressure, a route
        lookup during a fail-over) delays the next ones: the offered rate drops, and
        the blocked publish's own time counts against its deadline."""
        began = time.monotonic()
        n = 0
        while not stop.is_set():
            due = began + n / self._rate
            now = time.monotonic()
            if due > now:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), due - now)
                continue
            await self._publish_one(n)
            n += 1

    async def _publish_one(self, n: int) -> None:
        ident = f"c{n:08d}"
        key = f"k{n % self._keys:02d}"
        partition = key_partition(key, self._partitions)
        start = time.time()
        self._pending[ident] = (key, partition, start)
        self.sent += 1
        try:
            future = await self._pub.publish_to_stream_async(
                self._stream,
                ident.encode(),
                key=key.encode(),
                headers={ID_HEADER: ident.encode()},
                ack_policy=AckPolicy.ALL,
                partition=partition,
            )
        except Exception as exc:  # recorded: the checker judges what it is
            self._ended(ident, None, exc)
            return
        self._futures.add(future)
        future.add_done_callback(functools.partial(self._on_done, ident))

    def _on_done(self, ident: str, future: asyncio.Future[Ack | None]) -> None:
        self._futures.discard(future)
        if future.cancelled():
            self._ended(ident, None, asyncio.CancelledError())
            return
        exc = future.exception()
        self._ended(ident, None if exc else future.result(), exc)

    def _ended(self, ident: str, ack: Ack | None, exc: BaseException | None) -> None:
        if ident not in self._pending:
            return  # recorded already (as unended, by finish)
        key, partition, start = self._pending.pop(ident)
        end = time.time()
        if exc is None and ack is not None:
            self.acked += 1
            self.acked_ids.add(ident)
            event = Publish(ident, key, partition, start, end, offset=ack.offset)
        else:
            error = exc or LiftbridgeError("no ack (the publish ended with None)")
            event = Publish(
                ident,
                key,
                partition,
                start,
                end,
                error=type(error).__name__,
                typed=isinstance(error, LiftbridgeError),
                maybe_stored=bool(getattr(error, "maybe_stored", False)),
            )
        self._history.record(event)

    async def finish(self) -> int:
        """Wait for the publishes in flight, each until its deadline; record those that
        did not end; return how many did not."""
        while self._pending:
            oldest = min(start for _, _, start in self._pending.values())
            if time.time() > oldest + self.deadline:
                break
            await asyncio.sleep(0.1)
        left = dict(self._pending)
        self._pending.clear()
        for ident, (key, partition, start) in left.items():
            self._history.record(Publish(ident, key, partition, start, None))
        for future in list(self._futures):
            future.cancel()
        return len(left)


class GroupLoad:
    """Consumer-group members reading the stream, one slot each; a slot's member can
    leave and a new one join (churn). Every delivered message is recorded."""

    def __init__(
        self,
        client: Any,
        history: HistoryWriter,
        *,
        stream: str,
        group: str,
        members: int,
        log: Callable[[str], None],
    ) -> None:
        self._client = client
        self._history = history
        self._stream = stream
        self._group = group
        self._log = log
        # Slot -> ([its consumer, once created], the task reading for it).
        self._slots: list[tuple[list[Any], asyncio.Task[None]] | None] = [None] * members
        self._generation = [0] * members
        self.seen: set[str] = set()
        self.reads = 0
        self.last_read: dict[int, float] = {}

    async def start(self) -> None:
        """Start every member."""
        for slot in range(len(self._slots)):
            await self.join(slot)

    async def join(self, slot: int) -> None:
        """A new member takes ``slot`` (nothing happens if one is there)."""
        if self._slots[slot] is not None:
            return
        self._generation[slot] += 1
        member = f"m{slot}.{self._generation[slot]}"
        holder: list[Any] = []
        task = asyncio.create_task(self._read(member, holder))
        self._slots[slot] = (holder, task)
        self._history.record(Member(member, "join", time.time()))

    async def leave(self, slot: int) -> None:
        """The member in ``slot`` leaves the group (closes, which commits what it read)."""
        taken, self._slots[slot] = self._slots[slot], None
        if taken is None:
            return
        holder, task = taken
        member = ""
        if holder:
            member = holder[0].consumer_id
            with contextlib.suppress(Exception):
                await asyncio.wait_for(holder[0].close(), 30)
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        self._history.record(Member(member, "leave", time.time()))

    async def stop(self) -> None:
        """Every member leaves."""
        for slot in range(len(self._slots)):
            await self.leave(slot)

    async def _joined(self, member: str, holder: list[Any]) -> Any:
        """A started consumer for ``member`` (kept in ``holder``), trying again while
        joining fails (a fault in progress). A consumer whose start failed is replaced,
        not started again: its second start() would return without joining."""
        while True:
            consumer = self._client.consumer(
                self._group,
                self._stream,
                consumer_id=member,
                auto_checkpoint_interval=1.0,
                start_position=StartPosition.EARLIEST,
            )
            holder[:] = [consumer]
            try:
                await consumer.start()
                return consumer
            except LiftbridgeError as exc:
                self._history.record(Member(member, "error", time.time(), repr(exc)))
                with contextlib.suppress(Exception):
                    await consumer.close()
                await asyncio.sleep(1.0)

    async def _read(self, member: str, holder: list[Any]) -> None:
        consumer = await self._joined(member, holder)
        while True:
            try:
                batches = await consumer.getmany(timeout=0.5)
            except ClientClosedError:
                return
            except LiftbridgeError as exc:
                self._history.record(Member(member, "error", time.time(), repr(exc)))
                await asyncio.sleep(0.5)
                continue
            now = time.time()
            for part, messages in batches.items():
                self.last_read[part.partition] = now
                for message in messages:
                    ident = message_id(message)
                    self.seen.add(ident)
                    self.reads += 1
                    self._history.record(
                        Read(ident, message.partition, message.offset, member, now)
                    )


async def read_everything(
    client: Any, history: HistoryWriter, *, stream: str, partitions: int
) -> int:
    """The final read: every partition from its earliest offset to its newest, each
    message recorded as :class:`Stored`; return how many."""
    count = 0
    for partition in range(partitions):
        async with client.subscribe(
            stream,
            partition=partition,
            start_position=StartPosition.EARLIEST,
            stop_position=StopPosition.LATEST,
        ) as sub:
            async for message in sub:
                history.record(Stored(message_id(message), partition, message.offset))
                count += 1
    history.flush()
    return count
