"""Writes: every task publishes its rows with the NATS-native Publisher and awaits acks.

A task succeeds only when every row it published was acked without error (under the
``ack_policy`` option, ALL by default); otherwise it raises, Spark retries it, and
the rows it had already published are published again: the sink is at-least-once.
Each task's commit message carries its row count and the offsets acked per
partition; the driver logs a summary of them when the job (or micro-batch) commits.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from liftbridge_nats.errors import InvalidArgumentError, PublishError
from liftbridge_nats.messages import Ack, AckPolicy
from liftbridge_nats.partitioning import (
    KeyPartitioner,
    RoundRobinPartitioner,
    choose_partition,
    partition_subject,
)
from liftbridge_nats.publisher import Publisher

from . import _io
from ._lookup import sink_target
from ._options import WriteOptions
from ._schema import WriteColumns, check_write_schema

__all__ = [
    "LiftbridgeCommitMessage",
    "LiftbridgeStreamWriter",
    "LiftbridgeWriter",
    "PartitionOffsets",
    "publish_rows",
    "summarize",
]

logger = logging.getLogger("liftbridge_nats.spark")


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


@dataclass(frozen=True)
class LiftbridgeCommitMessage(WriterCommitMessage):
    """What one write task reports to the driver."""

    task: int
    rows: int
    acked: int
    offsets: tuple[PartitionOffsets, ...] = ()
    seconds: float = 0.0


@dataclass
class _Ledger:
    """Acks seen so far by one task; the first failure wins."""

    rows: int = 0
    acked: int = 0
    failed: int = 0
    error: BaseException | None = None
    ranges: dict[int, list[int]] = field(default_factory=dict)
    pending: set[asyncio.Future[Ack | None]] = field(default_factory=set)

    def track(self, partition: int | None, fut: asyncio.Future[Ack | None]) -> None:
        self.rows += 1
        self.pending.add(fut)

        def done(f: asyncio.Future[Ack | None]) -> None:
            self.pending.discard(f)
            if f.cancelled():
                self._fail(PublishError("the publish was cancelled before its ack"))
                return
            exc = f.exception()
            if exc is not None:
                self._fail(exc)
                return
            self.acked += 1
            ack = f.result()
            if ack is None or partition is None:
                return
            r = self.ranges.get(partition)
            if r is None:
                self.ranges[partition] = [ack.offset, ack.offset, 1]
            else:
                r[0] = min(r[0], ack.offset)
                r[1] = max(r[1], ack.offset)
                r[2] += 1

        fut.add_done_callback(done)

    def _fail(self, exc: BaseException) -> None:
        self.failed += 1
        if self.error is None:
            self.error = exc

    def offsets(self) -> tuple[PartitionOffsets, ...]:
        return tuple(PartitionOffsets(p, *self.ranges[p]) for p in sorted(self.ranges))


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _headers(value: Any) -> dict[str, bytes] | None:
    if not value:
        return None
    # Arrow hands a map over as a list of (key, value) pairs.
    items = value.items() if isinstance(value, Mapping) else value
    return {str(k): b"" if v is None else _bytes(v) for k, v in items}


class _Chooser:
    """Picks each row's partition: the partition column, else the key, else round-robin.

    Keyed rows go where the SDK's :class:`KeyPartitioner` puts them (the official Go
    client's choice), so Go, Python and Spark writers agree on where a key lives; rows
    with neither a partition nor a key are spread round-robin.
    """

    def __init__(self, target: Target) -> None:
        self._count = target.partitions
        self._stream = target.stream or ""
        self._by_key = KeyPartitioner()
        self._spread = RoundRobinPartitioner()

    def __call__(self, partition: Any, key: bytes | None, value: bytes) -> int | None:
        if partition is not None:
            p = int(partition)
            if p < 0 or (self._count is not None and p >= self._count):
                raise InvalidArgumentError(
                    f"column 'partition' has {p}, but stream {self._stream!r} has "
                    f"{self._count} partition(s) (0-based)."
                )
            return p
        if self._count is None:
            return None  # a bare subject: published as is
        by = self._by_key if key is not None else self._spread
        return choose_partition(by, self._stream, key, value, self._count)


async def publish_rows(
    opts: WriteOptions,
    target: Target,
    cols: WriteColumns,
    batches: Iterable[Any],
    task: int,
) -> LiftbridgeCommitMessage:
    """Publish every row of ``batches`` (Arrow record batches) and wait for the acks."""
    started = time.monotonic()
    ledger = _Ledger()
    choose = _Chooser(target)
    nc = await _io.connect_nats(opts.nats_servers, opts.timeout, opts.nats_auth)
    try:
        async with Publisher(
            nc, ack_timeout=opts.ack_timeout, max_inflight=opts.max_inflight
        ) as pub:
            for batch in batches:
                values = batch.column(cols.value).to_pylist()
                keys = batch.column(cols.key).to_pylist() if cols.key is not None else None
                headers = (
                    batch.column(cols.headers).to_pylist() if cols.headers is not None else None
                )
                parts = (
                    batch.column(cols.partition).to_pylist() if cols.partition is not None else None
                )
                for i, raw in enumerate(values):
                    value = b"" if raw is None else _bytes(raw)
                    key = None if keys is None or keys[i] is None else _bytes(keys[i])
                    partition = choose(None if parts is None else parts[i], key, value)
                    fut = await pub.publish_nowait(
                        target.subject
                        if partition is None
                        else partition_subject(target.subject, partition),
                        value,
                        key=key,
                        headers=None if headers is None else _headers(headers[i]),
                        ack_policy=opts.ack_policy,
                    )
                    ledger.track(partition, fut)
                if ledger.error is not None:
                    break  # fail fast: the task is lost anyway
            if ledger.pending:
                await asyncio.wait(set(ledger.pending))
    finally:
        await nc.close()
    if ledger.error is not None:
        where = target.stream or target.subject
        raise PublishError(
            f"liftbridge sink task {task}: {ledger.failed} of {ledger.rows} row(s) published to "
            f"{where!r} were not acked ({type(ledger.error).__name__}: {ledger.error}); Spark "
            "retries the task, which publishes its rows again (at-least-once).",
            subject=target.subject,
        ) from ledger.error
    return LiftbridgeCommitMessage(
        task=task,
        rows=ledger.rows,
        acked=ledger.acked,
        offsets=ledger.offsets(),
        seconds=time.monotonic() - started,
    )


def _task_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def summarize(messages: Iterable[WriterCommitMessage | None], where: str, policy: AckPolicy) -> str:
    """One line: rows, tasks and offset ranges per partition across all tasks."""
    msgs = [m for m in messages if isinstance(m, LiftbridgeCommitMessage)]
    rows = sum(m.rows for m in msgs)
    per: dict[int, list[int]] = {}
    for m in msgs:
        for o in m.offsets:
            r = per.setdefault(o.partition, [o.first, o.last, 0])
            r[0] = min(r[0], o.first)
            r[1] = max(r[1], o.last)
            r[2] += o.count
    parts = ", ".join(f"p{p}: {r[2]} in [{r[0]}, {r[1]}]" for p, r in sorted(per.items()))
    return (
        f"liftbridge sink: {rows} row(s) to {where!r} from {len(msgs)} task(s), "
        f"ack_policy={policy.name}" + (f"; offsets {parts}" if parts else "")
    )


def _log(level: int, text: str) -> None:
    # The driver-side commit runs in a fresh Python worker with logging unconfigured,
    # where INFO would be dropped; give our logger a stderr handler in that case.
    if not logging.getLogger().handlers and not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    logger.log(level, text)


def resolve_target(opts: WriteOptions) -> Target:
    """Check NATS is reachable, then look the stream up or take the bare subject.

    Runs on the driver, so a wrong ``nats_url``, ``brokers`` or ``stream`` fails the
    write before any task starts.
    """
    _io.run(_io.probe_nats(opts.nats_servers, opts.timeout, opts.nats_auth))
    if opts.stream is None:
        assert opts.subject is not None
        return Target(subject=opts.subject, stream=None, partitions=None)
    info = _io.run(sink_target(opts.brokers, opts.stream, opts.timeout, opts.tls))
    return Target(subject=info.subject, stream=opts.stream, partitions=info.partition_count)


class _WriterBase:
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        # Both checks run on the driver, before any task: bad columns or an unknown
        # stream fail the write at once.
        self._cols = check_write_schema(schema)
        self._opts = opts
        self._target = resolve_target(opts)

    @property
    def _where(self) -> str:
        return self._target.stream or self._target.subject

    def _write(self, iterator: Iterator[Any]) -> LiftbridgeCommitMessage:
        return asyncio.run(publish_rows(self._opts, self._target, self._cols, iterator, _task_id()))


class LiftbridgeWriter(_WriterBase, DataSourceArrowWriter):
    """Batch sink (``df.write.format("liftbridge")``)."""

    def write(self, iterator: Iterator[Any]) -> LiftbridgeCommitMessage:
        """Publish this task's rows; raises (so Spark retries) unless all are acked."""
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log the job's summary on the driver."""
        _log(logging.INFO, summarize(messages, self._where, self._opts.ack_policy))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what the successful tasks published before the job failed."""
        _log(
            logging.WARNING,
            "write aborted; already published (not undone): "
            + summarize(messages, self._where, self._opts.ack_policy),
        )


class LiftbridgeStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """Streaming sink (``df.writeStream.format("liftbridge")``), at-least-once per batch."""

    def write(self, iterator: Iterator[Any]) -> LiftbridgeCommitMessage:
        """Publish this task's rows of the micro-batch; raises unless all are acked."""
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log the micro-batch's summary on the driver."""
        text = summarize(messages, self._where, self._opts.ack_policy)
        _log(logging.INFO, f"batch {batchId}: {text}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log what the successful tasks of a failed micro-batch published."""
        text = summarize(messages, self._where, self._opts.ack_policy)
        _log(logging.WARNING, f"batch {batchId} aborted; already published: {text}")
