"""One write task: publish the rows of Arrow batches with the Publisher, count the acks.

The loop runs once per row, so it does as little as it can there: columns are turned
into Python lists once per batch, each partition's subject is computed once, rows
with neither a key nor a partition take a round-robin counter, and acks are not
watched with a callback per message (one scheduled callback each) but collected
from the head of a queue of futures as they settle (acks arrive in order). A task
succeeds only when every row it published was acked without error. The Publisher and
its NATS connection are the process's cached ones (:mod:`._connections`), shared by
every task the Python worker runs.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from liftbridge_nats import (
    Ack,
    InvalidArgumentError,
    KeyPartitioner,
    NotConnectedError,
    Publisher,
    PublishError,
    partition_subject,
)
from liftbridge_nats.sync import _portal

from . import _connections
from ._options import WriteOptions
from ._schema import WriteColumns

__all__ = ["PartitionOffsets", "SinkTask", "Target", "TaskResult", "publish_rows"]


@dataclass(frozen=True, slots=True)
class Target:
    """Where rows go: a stream's subject and partition count, or a bare subject."""

    subject: str
    stream: str | None
    partitions: int | None


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """The offsets one task got acked in one partition."""

    partition: int
    first: int
    last: int
    count: int


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What one task published and got acked."""

    rows: int
    acked: int
    offsets: tuple[PartitionOffsets, ...]
    seconds: float


class _Ledger:
    """Futures of published rows, settled in order; the first failure wins.

    The futures wait in one deque and their partitions (-1: a bare subject) in another,
    side by side: a (partition, future) pair per row would be one more object per row
    alive until its ack, for the garbage collector to scan again and again.

    A partition's offsets are read from its first ack and its latest one only:
    reading an ack's fields decodes the whole ack (the publisher hands acks over
    undecoded), which per row cost about a fifth of a task's CPU. The sink never
    re-sends, and one connection's publishes to a partition are stored in the order
    sent, so these are its lowest and highest offsets. A task publishes every row with
    one ack policy: a partition's rows all bring an ack, or none does (AckPolicy.NONE).
    """

    __slots__ = ("acked", "error", "failed", "futures", "partitions", "ranges", "rows")

    def __init__(self) -> None:
        self.rows = 0
        self.acked = 0
        self.failed = 0
        self.error: BaseException | None = None
        # Per partition: [first offset, the future of its latest ack, count].
        self.ranges: dict[int, list[Any]] = {}
        self.futures: deque[asyncio.Future[Ack | None]] = deque()
        self.partitions: deque[int] = deque()

    def drain(self) -> None:
        """Count every settled future at the head of the queue."""
        futures, partitions, ranges = self.futures, self.partitions, self.ranges
        next_future, next_partition = futures.popleft, partitions.popleft
        acked = 0
        while futures and futures[0].done():
            fut = next_future()
            partition = next_partition()
            try:
                exc = fut.exception()
            except asyncio.CancelledError:
                exc = PublishError("the publish was cancelled before its ack")
            if exc is not None:
                self._fail(exc)
                continue
            acked += 1
            if partition < 0:
                continue
            r = ranges.get(partition)
            if r is not None:
                r[1] = fut
                r[2] += 1
            else:
                ack = fut.result()
                if ack is not None:  # AckPolicy.NONE: no offsets
                    ranges[partition] = [ack.offset, fut, 1]
        self.acked += acked

    def _fail(self, exc: BaseException) -> None:
        self.failed += 1
        if self.error is None:
            self.error = exc

    def offsets(self) -> tuple[PartitionOffsets, ...]:
        return tuple(
            PartitionOffsets(p, first, last.result().offset, count)
            for p, (first, last, count) in sorted(self.ranges.items())
        )


def _as_bytes(column: Any) -> list[Any]:
    """A binary or string Arrow column as a list of bytes (None for nulls)."""
    import pyarrow as pa

    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    values: list[Any] = column.to_pylist()
    return values


def _header_maps(column: Any) -> list[dict[str, bytes] | None]:
    """A map column as dicts of bytes (None for a null or empty map)."""
    out: list[dict[str, bytes] | None] = []
    for pairs in column.to_pylist():
        if not pairs:
            out.append(None)
            continue
        # Arrow hands a map over as a list of (key, value) pairs.
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        out.append(
            {
                str(k): b"" if v is None else v.encode() if isinstance(v, str) else bytes(v)
                for k, v in items
            }
        )
    return out


class _Router:
    """Each row's partition and subject: the partition column, else the key (the SDK's
    :class:`KeyPartitioner`, the official Go client's choice), else round-robin."""

    def __init__(self, target: Target) -> None:
        self.stream = target.stream or ""
        self.count = target.partitions
        count = target.partitions or 1
        self.subjects = [partition_subject(target.subject, p) for p in range(count)]
        self._by_key = KeyPartitioner()
        self._next = 0

    def spread(self) -> int:
        """The next partition of the round-robin."""
        p = self._next
        self._next = (p + 1) % len(self.subjects)
        return p

    def spread_from(self, partition: int) -> None:
        """Carry the round-robin on at ``partition`` (after a batch counted it locally)."""
        self._next = partition % len(self.subjects)

    def pick(self, partition: Any, key: bytes | None, value: bytes) -> int:
        """The partition of one row (-1: a bare subject, published as is)."""
        if partition is not None:
            p = int(partition)
            if p < 0 or (self.count is not None and p >= self.count):
                raise InvalidArgumentError(
                    f"column 'partition' has {p}, but stream {self.stream!r} has "
                    f"{self.count} partition(s) (0-based)."
                )
            return p
        if self.count is None:
            return -1
        if key is None:
            return self.spread()
        return self._by_key.partition(self.stream, key, value, self.count)


async def _publish_batch(
    pub: Publisher, router: _Router, ledger: _Ledger, cols: WriteColumns, batch: Any, policy: Any
) -> None:
    values = _as_bytes(batch.column(cols.value))
    keys = None if cols.key is None else _as_bytes(batch.column(cols.key))
    headers = None if cols.headers is None else _header_maps(batch.column(cols.headers))
    parts = None if cols.partition is None else batch.column(cols.partition).to_pylist()
    publish_async, subjects = pub.publish_async, router.subjects
    futures, add_partition = ledger.futures, ledger.partitions.append
    add_future = futures.append
    ledger.rows += len(values)
    # Settled futures are counted as soon as the head of the queue settles: a future
    # kept after its ack holds the ack too, for the garbage collector to scan.
    if keys is None and headers is None and parts is None:
        # No key, no header, no partition column: values only, round-robin (or one
        # bare subject, partition -1).
        if router.count is None:
            subject = subjects[0]
            for value in values:
                add_future(
                    await publish_async(subject, b"" if value is None else value, ack_policy=policy)
                )
                add_partition(-1)
                if futures[0].done():
                    ledger.drain()
            return
        n = len(subjects)
        p = router.spread()
        for value in values:
            add_future(
                await publish_async(subjects[p], b"" if value is None else value, ack_policy=policy)
            )
            add_partition(p)
            if futures[0].done():
                ledger.drain()
            p = p + 1 if p + 1 < n else 0
        router.spread_from(p)
        return
    for i, value in enumerate(values):
        value = b"" if value is None else value
        key = None if keys is None else keys[i]
        p = router.pick(None if parts is None else parts[i], key, value)
        add_future(
            await publish_async(
                subjects[max(p, 0)],
                value,
                key=key,
                headers=None if headers is None else headers[i],
                ack_policy=policy,
            )
        )
        add_partition(p)
        if futures[0].done():
            ledger.drain()


class SinkTask:
    """One task's publishing, fed an Arrow batch at a time (each step on the loop).

    The task's thread reads Spark's batches and hands them over one by one, so the
    loop goes on taking acks while the next batch is read.
    """

    def __init__(self, opts: WriteOptions, target: Target, cols: WriteColumns, task: int) -> None:
        self._opts, self._target, self._cols, self._task = opts, target, cols, task
        self._ledger = _Ledger()
        self._router = _Router(target)
        self._pub: Publisher[Any, Any] | None = None
        self._started = time.monotonic()

    async def start(self) -> None:
        """Take the process's Publisher for the write's options."""
        opts = self._opts
        self._pub = await _connections.publisher(
            opts.nats_servers,
            opts.timeout,
            opts.nats_auth,
            ack_timeout=opts.ack_timeout,
            max_inflight=opts.max_inflight,
        )

    async def publish(self, batch: Any) -> bool:
        """Publish the rows of one Arrow batch; False once a publish has failed (the
        task is lost anyway: stop feeding it)."""
        assert self._pub is not None, "start() first"
        ledger = self._ledger
        await _publish_batch(
            self._pub, self._router, ledger, self._cols, batch, self._opts.ack_policy
        )
        return ledger.error is None

    async def settle(self) -> None:
        """Wait for every publish of the task to be acked or to fail.

        Also when the task fails: the shared Publisher must not carry this task's
        publishes into the next task.
        """
        ledger = self._ledger
        if ledger.futures:
            await asyncio.wait(ledger.futures)
        ledger.drain()
        if isinstance(ledger.error, NotConnectedError) and self._pub is not None:
            # The next task (Spark's retry) starts on a new connection.
            await _connections.discard(self._pub)

    async def finish(self) -> TaskResult:
        """Settle, then the task's result; raises unless every row was acked."""
        await self.settle()
        ledger, target = self._ledger, self._target
        if ledger.error is not None:
            where = target.stream or target.subject
            raise PublishError(
                f"liftbridge sink task {self._task}: {ledger.failed} of {ledger.rows} row(s) "
                f"published to {where!r} were not acked ({type(ledger.error).__name__}: "
                f"{ledger.error}); Spark retries the task, which publishes its rows again "
                "(at-least-once).",
                subject=target.subject,
            ) from ledger.error
        took = time.monotonic() - self._started
        return TaskResult(ledger.rows, ledger.acked, ledger.offsets(), took)


def publish_rows(
    opts: WriteOptions, target: Target, cols: WriteColumns, batches: Iterable[Any], task: int
) -> TaskResult:
    """Publish every row of ``batches`` (Arrow record batches) and wait for the acks,
    on the process's background loop with its cached Publisher.

    Raises :class:`~liftbridge_nats.PublishError` (so Spark retries the task)
    unless every row was acked without error.
    """
    sink = SinkTask(opts, target, cols, task)
    _portal.call(sink.start)
    try:
        for batch in batches:
            if not _portal.call(sink.publish, batch):
                break
    except BaseException:
        _portal.call(sink.settle)
        raise
    return _portal.call(sink.finish)
