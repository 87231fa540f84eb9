"""One write task: publish the rows of Arrow batches with the Publisher, count the acks.

The loop runs once per row, so it does as little as it can there: columns are turned
into Python lists once per batch, each partition's subject is computed once, a batch
of rows with neither a key nor a partition goes to one partition, and acks are not
watched with a callback per message (one scheduled callback each) but collected
from the head of a queue of futures as they settle (acks arrive in order). A task
succeeds only when every row it published was acked without error. The Publisher and
its NATS connection are the process's cached ones (:mod:`._connections`), shared by
every task the Python worker runs.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import islice
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

__all__ = [
    "PartitionOffsets",
    "SinkTask",
    "Target",
    "TaskResult",
    "first_partition",
    "publish_rows",
]


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

    Counting an ack only looks at its future: which partition a row went to is kept
    apart, per partition, when it is published (its first row's future, its latest
    row's future and its count), so a settled future is one pop and one check. Reading
    an ack's fields decodes the whole ack (the publisher hands acks over undecoded),
    which per row cost about a fifth of a task's CPU: a partition's offsets are read
    from its first ack and its latest one only, once the task is done. The sink never
    re-sends, and one connection's publishes to a partition are stored in the order
    sent, so these are its lowest and highest offsets. A task publishes every row with
    one ack policy: a partition's rows all bring an ack, or none does (AckPolicy.NONE).
    """

    __slots__ = ("acked", "error", "failed", "futures", "ranges", "rows")

    def __init__(self) -> None:
        self.rows = 0
        self.acked = 0
        self.failed = 0
        self.error: BaseException | None = None
        # Per partition: [the future of its first row, of its latest row, row count].
        self.ranges: dict[int, list[Any]] = {}
        self.futures: deque[asyncio.Future[Ack | None]] = deque()

    def placed(
        self,
        partition: int,
        first: asyncio.Future[Ack | None],
        last: asyncio.Future[Ack | None],
        count: int,
    ) -> None:
        """Note ``count`` rows published to ``partition`` (-1: a bare subject, no
        offsets), from the row of ``first`` to the row of ``last``."""
        if partition < 0:
            return
        r = self.ranges.get(partition)
        if r is None:
            self.ranges[partition] = [first, last, count]
        else:
            r[1] = last
            r[2] += count

    def drain(self) -> None:
        """Count every settled future at the head of the queue."""
        futures = self.futures
        next_future = futures.popleft
        acked = 0
        while futures and futures[0].done():
            fut = next_future()
            try:
                exc = fut.exception()
            except asyncio.CancelledError:
                exc = PublishError("the publish was cancelled before its ack")
            if exc is None:
                acked += 1
            else:
                self._fail(exc)
        self.acked += acked

    def _fail(self, exc: BaseException) -> None:
        self.failed += 1
        if self.error is None:
            self.error = exc

    def offsets(self) -> tuple[PartitionOffsets, ...]:
        """Each partition's offsets; only once every row is acked without error."""
        out = []
        for p, (first, last, count) in sorted(self.ranges.items()):
            ack = first.result()
            if ack is not None:  # AckPolicy.NONE: no offsets
                out.append(PartitionOffsets(p, ack.offset, last.result().offset, count))
        return tuple(out)


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
    :class:`KeyPartitioner`, the official Go client's choice), else the batch's.

    Rows with neither a partition nor a key are spread as Kafka's sticky partitioner
    spreads records without a key: an Arrow batch's rows go to one partition, the next
    batch's to the next. Each partition leader gets them in long runs from one
    connection, which it stores in fewer, larger batches than rows taking turns from
    every task. Where a task starts is :func:`first_partition`.
    """

    def __init__(self, target: Target, stage: int = 0, task: int = 0) -> None:
        self.stream = target.stream or ""
        self.count = target.partitions
        count = target.partitions or 1
        self.subjects = [partition_subject(target.subject, p) for p in range(count)]
        self._by_key = KeyPartitioner()
        self.sticky = -1 if self.count is None else first_partition(stage, task, self.count)

    def next_batch(self) -> None:
        """Move the rows without a key or partition on to the next partition."""
        if self.sticky >= 0:
            self.sticky = (self.sticky + 1) % len(self.subjects)

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
            return self.sticky
        return self._by_key.partition(self.stream, key, value, self.count)


def first_partition(stage: int, task: int, partitions: int) -> int:
    """Where a task's rows without a key or partition start: the tasks of one Spark
    stage (one write, or one micro-batch) start one partition apart, at an offset drawn
    from the stage id. Tasks running side by side so write to different partitions, a
    retried task starts where its first attempt did, and writes or micro-batches of a
    single task do not all start at the same partition."""
    return (random.Random(stage).randrange(partitions) + task) % partitions


async def _publish_batch(
    pub: Publisher, router: _Router, ledger: _Ledger, cols: WriteColumns, batch: Any, policy: Any
) -> None:
    values = _as_bytes(batch.column(cols.value))
    if not values:
        return
    keys = None if cols.key is None else _as_bytes(batch.column(cols.key))
    headers = None if cols.headers is None else _header_maps(batch.column(cols.headers))
    parts = None if cols.partition is None else batch.column(cols.partition).to_pylist()
    publish_async, subjects = pub.publish_async, router.subjects
    futures, drain = ledger.futures, ledger.drain
    add_future = futures.append
    ledger.rows += len(values)
    # Settled futures are counted as soon as the head of the queue settles: a future
    # kept after its ack holds the ack too, for the garbage collector to scan.
    if keys is None and headers is None and parts is None:
        # Values only: the whole batch goes to the router's partition (or to the bare
        # subject, partition -1).
        p = router.sticky
        subject = subjects[max(p, 0)]
        value = values[0]
        first = fut = await publish_async(
            subject, b"" if value is None else value, ack_policy=policy
        )
        add_future(fut)
        for value in islice(values, 1, None):
            fut = await publish_async(subject, b"" if value is None else value, ack_policy=policy)
            add_future(fut)
            if futures[0].done():
                drain()
        ledger.placed(p, first, fut, len(values))
        router.next_batch()
        return
    placed = ledger.placed
    for i, value in enumerate(values):
        value = b"" if value is None else value
        key = None if keys is None else keys[i]
        p = router.pick(None if parts is None else parts[i], key, value)
        fut = await publish_async(
            subjects[max(p, 0)],
            value,
            key=key,
            headers=None if headers is None else headers[i],
            ack_policy=policy,
        )
        add_future(fut)
        placed(p, fut, fut, 1)
        if futures[0].done():
            drain()
    router.next_batch()


class SinkTask:
    """One task's publishing, fed an Arrow batch at a time (each step on the loop).

    The task's thread reads Spark's batches and hands them over one by one, so the
    loop goes on taking acks while the next batch is read.
    """

    def __init__(
        self, opts: WriteOptions, target: Target, cols: WriteColumns, task: int, stage: int = 0
    ) -> None:
        self._opts, self._target, self._cols, self._task = opts, target, cols, task
        self._ledger = _Ledger()
        self._router = _Router(target, stage, task)
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
    opts: WriteOptions,
    target: Target,
    cols: WriteColumns,
    batches: Iterable[Any],
    task: int,
    stage: int = 0,
) -> TaskResult:
    """Publish every row of ``batches`` (Arrow record batches) and wait for the acks,
    on the process's background loop with its cached Publisher; ``task`` and ``stage``
    are the Spark partition and stage ids (see :func:`first_partition`).

    Raises :class:`~liftbridge_nats.PublishError` (so Spark retries the task)
    unless every row was acked without error.
    """
    sink = SinkTask(opts, target, cols, task, stage)
    _portal.call(sink.start)
    try:
        for batch in batches:
            if not _portal.call(sink.publish, batch):
                break
    except BaseException:
        _portal.call(sink.settle)
        raise
    return _portal.call(sink.finish)
