"""Writes: every task publishes its rows with the NATS-native Publisher and awaits acks.

A task succeeds only when every row it published was acked without error (under the
``ack_policy`` option, ALL by default); otherwise it raises, Spark retries it, and
the rows it had already published are published again: the sink is at-least-once.
Each task's commit message carries its row count and the offsets acked per
partition; the driver logs a summary of them when the job (or micro-batch) commits.
Tasks and the driver-side checks run on the process's background loop with its cached
connections (:mod:`._connections`): a Python worker connects once, not once per task.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from liftbridge_nats import AckPolicy
from liftbridge_nats._log import get_logger

from . import _connections, _io
from ._lookup import sink_target
from ._options import WriteOptions
from ._schema import check_write_schema
from ._sink_task import PartitionOffsets, Target, publish_rows

__all__ = [
    "LiftbridgeCommitMessage",
    "LiftbridgeStreamWriter",
    "LiftbridgeWriter",
    "PartitionOffsets",
    "summarize",
]

logger = get_logger("spark")


@dataclass(frozen=True)
class LiftbridgeCommitMessage(WriterCommitMessage):
    """What one write task reports to the driver."""

    task: int
    rows: int
    acked: int
    offsets: tuple[PartitionOffsets, ...] = ()
    seconds: float = 0.0


def _task_ids() -> tuple[int, int]:
    """This task's Spark stage and partition ids."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return (ctx.stageId(), ctx.partitionId()) if ctx is not None else (0, 0)


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
    # The probe's connection stays open for the next micro-batch's check: it does not
    # retry, so a NATS that went away fails here rather than waiting out reconnects.
    _io.run(_connections.nats(opts.nats_servers, opts.timeout, opts.nats_auth, reconnect=False))
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
        stage, task = _task_ids()
        done = publish_rows(self._opts, self._target, self._cols, iterator, task, stage=stage)
        return LiftbridgeCommitMessage(task, done.rows, done.acked, done.offsets, done.seconds)


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
