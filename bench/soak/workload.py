"""The soak's workload: scheduled publishes, a subscription and a consumer-group member.

Everything goes through the SDK's public API, as an application would use it:

- ``publishers`` tasks share one :class:`~liftbridge_nats.Publisher`; half of them await
  ``publish`` (several due messages gathered at once), the others take the futures of
  ``publish_async`` and read the acks in done callbacks. Task ``i`` writes to partition
  ``i % partitions``.
- Sends are scheduled: message ``k`` of a task is due at ``start + k / task_rate``. A task
  that falls behind sends what is due at once, and latency is counted from the scheduled
  time, so a stall shows up in the percentiles instead of lowering the offered rate.
- A :meth:`Client.subscribe <liftbridge_nats.Client.subscribe>` reader follows
  partition 0 from its first offset and checks that offsets arrive without gaps.
- A group :class:`~liftbridge_nats.Consumer` reads every partition with ``getmany`` and
  commits by hand once a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from liftbridge_nats import (
    Ack,
    AckPolicy,
    Client,
    Consumer,
    Publisher,
    StartPosition,
    partition_subject,
)

COMMIT_EVERY_S = 1.0
GETMANY_RECORDS = 2000


@dataclass(frozen=True, slots=True)
class Load:
    """The offered load: rate, payload, tasks, ack policy, stream shape."""

    rate: int = 2000
    size: int = 100
    publishers: int = 4
    partitions: int = 2
    ack_policy: AckPolicy = AckPolicy.LEADER
    ack_timeout: float = 10.0


@dataclass(slots=True)
class Tally:
    """Counts since the last interval (reset by :meth:`Workload.take`) and totals."""

    sent: int = 0
    acked: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    read: int = 0
    consumed: int = 0
    commits: int = 0
    latencies: list[float] = field(default_factory=list)


class Workload:
    """Runs the load against one stream until :meth:`stop`; :meth:`take` reads the counts."""

    def __init__(self, nc: Any, client: Client, stream: str, load: Load) -> None:
        self.load = load
        self.stream = stream
        self.group = f"soak-{uuid.uuid4().hex[:8]}"
        self.publisher: Publisher[bytes, bytes] = Publisher(nc, ack_timeout=load.ack_timeout)
        self._client = client
        self._interval = Tally()
        self.totals = Tally()
        self.gaps = 0
        self.reader_errors: Counter[str] = Counter()
        # Highest acked offset per partition; the readers' last offsets against them.
        self.acked_offsets: dict[int, int] = {}
        self.reader_offset = -1
        self.consumer_offsets: dict[int, int] = {}
        self.consumer: Consumer[bytes, bytes] | None = None
        self._stopping = asyncio.Event()
        self._publishing: list[asyncio.Task[None]] = []
        self._reading: list[asyncio.Task[None]] = []
        self._value = b"x" * load.size

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the publisher, the reader, the consumer, then the publishing tasks."""
        await self.publisher.start()
        self.consumer = self._client.consumer(
            self.group,
            [self.stream],
            auto_checkpoint_interval=None,
            start_position=StartPosition.EARLIEST,
        )
        await self.consumer.start()
        self._reading = [
            asyncio.create_task(self._read(), name="soak-reader"),
            asyncio.create_task(self._consume(self.consumer), name="soak-consumer"),
        ]
        loop = asyncio.get_running_loop()
        start = loop.time()
        task_rate = self.load.rate / self.load.publishers
        for i in range(self.load.publishers):
            subject = partition_subject(self.stream, i % self.load.partitions)
            body = self._publish_awaited if i % 2 == 0 else self._publish_futures
            self._publishing.append(
                asyncio.create_task(body(subject, start, task_rate), name=f"soak-publisher-{i}")
            )

    async def stop_publishing(self, timeout: float = 30.0) -> None:
        """Stop scheduling sends and wait until every message sent is settled."""
        self._stopping.set()
        await asyncio.gather(*self._publishing)
        with contextlib.suppress(Exception):
            await self.publisher.flush(timeout)

    async def drain(self, timeout: float) -> bool:
        """Wait until both readers have every acked message; False at ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.reader_backlog() == 0 and self.consumer_backlog() == 0:
                return True
            await asyncio.sleep(0.1)
        return False

    async def close(self) -> None:
        """Stop the readers and close the consumer and the publisher."""
        self._stopping.set()
        for task in self._reading:
            task.cancel()
        await asyncio.gather(*self._reading, return_exceptions=True)
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                await self.consumer.commit()
            await self.consumer.close()
        await self.publisher.close()

    # ------------------------------------------------------------------ readings

    def take(self) -> Tally:
        """The counts since the previous call (the latencies move out with them)."""
        taken, self._interval = self._interval, Tally()
        return taken

    def reader_backlog(self) -> int:
        """Acked messages of partition 0 the subscription has not delivered yet."""
        return max(0, self.acked_offsets.get(0, -1) - self.reader_offset)

    def consumer_backlog(self) -> int:
        """Acked messages of every partition the group member has not delivered yet."""
        return sum(
            max(0, newest - self.consumer_offsets.get(p, -1))
            for p, newest in self.acked_offsets.items()
        )

    # ------------------------------------------------------------------ publishing

    def _acked(self, ack: Ack | None, scheduled: float, now: float) -> None:
        if ack is not None and ack.offset > self.acked_offsets.get(ack.partition, -1):
            self.acked_offsets[ack.partition] = ack.offset
        for tally in (self._interval, self.totals):
            tally.acked += 1
        self._interval.latencies.append(now - scheduled)

    def _failed(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self._interval.failed[name] += 1
        self.totals.failed[name] += 1

    def _sent(self, count: int) -> None:
        self._interval.sent += count
        self.totals.sent += count

    async def _due(self, start: float, rate: float, k: int) -> int:
        """Sleep until message ``k`` is due; return how many are due then (at least 1)."""
        loop = asyncio.get_running_loop()
        wait = start + k / rate - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        return max(1, int((loop.time() - start) * rate) + 1 - k)

    async def _publish_awaited(self, subject: str, start: float, rate: float) -> None:
        loop = asyncio.get_running_loop()
        publish, policy, value = self.publisher.publish, self.load.ack_policy, self._value
        k = 0
        while not self._stopping.is_set():
            due = await self._due(start, rate, k)
            calls: list[Awaitable[Ack | None]] = [
                publish(subject, value, ack_policy=policy) for _ in range(due)
            ]
            self._sent(due)
            results = await asyncio.gather(*calls, return_exceptions=True)
            now = loop.time()
            for j, result in enumerate(results):
                if isinstance(result, BaseException):
                    self._failed(result)
                else:
                    self._acked(result, start + (k + j) / rate, now)
            k += due

    async def _publish_futures(self, subject: str, start: float, rate: float) -> None:
        loop = asyncio.get_running_loop()
        publish, policy, value = self.publisher.publish_async, self.load.ack_policy, self._value
        k = 0
        while not self._stopping.is_set():
            due = await self._due(start, rate, k)
            for j in range(due):
                scheduled = start + (k + j) / rate
                try:
                    future = await publish(subject, value, ack_policy=policy)
                except Exception as exc:  # refused before sending: counted like a failure
                    self._failed(exc)
                    continue
                future.add_done_callback(
                    lambda f, s=scheduled: self._settled(f, s, loop.time())  # type: ignore[misc]
                )
            self._sent(due)
            k += due

    def _settled(self, future: asyncio.Future[Ack | None], scheduled: float, now: float) -> None:
        if future.cancelled():
            self._failed(asyncio.CancelledError())
        elif (exc := future.exception()) is not None:
            self._failed(exc)
        else:
            self._acked(future.result(), scheduled, now)

    # ------------------------------------------------------------------ reading

    async def _read(self) -> None:
        # Restart the subscription where it stopped if it ever ends with an error: a soak
        # counts errors rather than ending at the first one.
        while not self._stopping.is_set():
            sub = self._client.subscribe(
                self.stream, partition=0, start_offset=self.reader_offset + 1
            )
            try:
                async with sub:
                    async for msg in sub:
                        if msg.offset != self.reader_offset + 1:
                            self.gaps += 1
                        self.reader_offset = msg.offset
                        self._interval.read += 1
                        self.totals.read += 1
            except Exception as exc:
                self.reader_errors[type(exc).__name__] += 1
                await asyncio.sleep(0.5)

    async def _consume(self, consumer: Consumer[bytes, bytes]) -> None:
        last_commit = time.monotonic()
        while True:
            try:
                batches = await consumer.getmany(timeout=1.0, max_records=GETMANY_RECORDS)
            except Exception as exc:
                self.reader_errors[type(exc).__name__] += 1
                await asyncio.sleep(0.5)
                continue
            count = 0
            for part, messages in batches.items():
                self.consumer_offsets[part.partition] = messages[-1].offset
                count += len(messages)
            self._interval.consumed += count
            self.totals.consumed += count
            if time.monotonic() - last_commit >= COMMIT_EVERY_S:
                last_commit = time.monotonic()
                try:
                    await consumer.commit()
                except Exception as exc:
                    self.reader_errors[f"commit {type(exc).__name__}"] += 1
                else:
                    self._interval.commits += 1
                    self.totals.commits += 1
