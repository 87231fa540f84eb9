"""Streaming reads: micro-batches follow new messages and resume from the checkpoint."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import Record, create_stream, publish

pytestmark = pytest.mark.spark


class Batches:
    """What a foreachBatch sink saw, by batch id (a replayed batch replaces itself)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_id: dict[int, list[tuple[int, int, bytes]]] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [(r.partition, r.offset, bytes(r.value)) for r in df.collect()]
        with self._lock:
            self.by_id[batch_id] = rows

    def rows(self) -> list[tuple[int, int, bytes]]:
        with self._lock:
            return [row for _, rows in sorted(self.by_id.items()) for row in rows]

    def wait_for(self, n: int, query: Any, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.rows()) < n:
            if query.exception() is not None:
                raise AssertionError(f"query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"saw {len(self.rows())} rows, expected {n}")
            time.sleep(0.2)


def _start(
    spark: Any,
    cluster: Any,
    stream: str,
    checkpoint: Path,
    sink: Callable[[Any, int], None],
    **options: str,
) -> Any:
    r = spark.readStream.format("liftbridge").option("brokers", ",".join(cluster.brokers))
    r = r.option("stream", stream)
    for k, v in options.items():
        r = r.option(k, v)
    return (
        r.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def _stop(query: Any) -> None:
    """Stop between micro-batches: interrupting one mid-flight only makes noise."""
    deadline = time.monotonic() + 10
    while query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def _values(prefix: str, n: int, partitions: int = 3) -> list[Record]:
    return [Record(i % partitions, f"{prefix}{i}".encode()) for i in range(n)]


def test_stream_follows_new_messages_and_resumes(
    spark: Any, liftbridge_cluster: Any, unique_name: Any, tmp_path: Path
) -> None:
    stream = unique_name("live")
    create_stream(liftbridge_cluster, stream, 3)
    checkpoint = tmp_path / "checkpoint"
    first = _values("a", 9)
    publish(liftbridge_cluster, stream, first)

    seen = Batches()
    query = _start(spark, liftbridge_cluster, stream, checkpoint, seen, startingOffsets="earliest")
    try:
        seen.wait_for(9, query)
        batches_before = set(seen.by_id)
        second = _values("b", 6)
        publish(liftbridge_cluster, stream, second)
        seen.wait_for(15, query)
    finally:
        _stop(query)
    # The second lot arrived in later micro-batches than the first.
    later = {bid for bid, rows in seen.by_id.items() if any(v.startswith(b"b") for _, _, v in rows)}
    assert later and min(later) > max(batches_before)

    # Published while the query is down: the restarted query must read exactly these
    # (plus, at most, a replay of a batch that was not committed: same id, same rows).
    third = _values("c", 6)
    publish(liftbridge_cluster, stream, third)
    done_before = max(seen.by_id)
    query = _start(spark, liftbridge_cluster, stream, checkpoint, seen, startingOffsets="earliest")
    try:
        seen.wait_for(21, query)
        time.sleep(1.0)  # a few more triggers: nothing else may show up
    finally:
        _stop(query)

    everything = seen.rows()
    assert len({(p, o) for p, o, _ in everything}) == len(everything) == 21
    assert sorted(v for _, _, v in everything) == sorted(r.value for r in first + second + third)
    # The restarted query went on from the checkpoint: batch ids continue, and the
    # third lot came only in batches after the ones the first run had finished.
    new_ids = [
        bid for bid, rows in seen.by_id.items() if any(v.startswith(b"c") for _, _, v in rows)
    ]
    assert new_ids and min(new_ids) >= done_before


def test_available_now_with_max_offsets_per_trigger(
    spark: Any, liftbridge_cluster: Any, unique_name: Any, tmp_path: Path
) -> None:
    stream = unique_name("capped")
    create_stream(liftbridge_cluster, stream, 2)
    publish(liftbridge_cluster, stream, _values("x", 10, partitions=2))
    seen = Batches()
    query = (
        spark.readStream.format("liftbridge")
        .option("brokers", ",".join(liftbridge_cluster.brokers))
        .option("stream", stream)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "4")
        .load()
        .writeStream.foreachBatch(seen)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    sizes = [len(rows) for _, rows in sorted(seen.by_id.items()) if rows]
    assert sizes == [4, 4, 2]
    assert sorted((p, o) for p, o, _ in seen.rows()) == [(p, o) for p in range(2) for o in range(5)]


def test_stream_option_errors(spark: Any, liftbridge_cluster: Any, unique_name: Any) -> None:
    stream = unique_name("opts")
    create_stream(liftbridge_cluster, stream, 1)
    r = (
        spark.readStream.format("liftbridge")
        .option("brokers", ",".join(liftbridge_cluster.brokers))
        .option("stream", stream)
        .option("endingOffsets", "latest")
    )
    with pytest.raises(Exception, match="'endingOffsets' is for batch reads only"):
        r.load().writeStream.format("console").start().awaitTermination(30)


def test_stream_pattern_follows_two_streams_and_finds_a_new_one(
    spark: Any, liftbridge_cluster: Any, unique_name: Any, tmp_path: Path
) -> None:
    base = unique_name("pat")
    first, second, later = f"{base}-1", f"{base}-2", f"{base}-3"
    for name in (first, second):
        create_stream(liftbridge_cluster, name, 2)
        publish(liftbridge_cluster, name, [Record(p, f"{name}:{p}".encode()) for p in (0, 1)])
    seen = Batches()
    r = (
        spark.readStream.format("liftbridge")
        .option("brokers", ",".join(liftbridge_cluster.brokers))
        .option("streamPattern", f"{base}-[0-9]+")
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        r.selectExpr("stream", "partition", "offset", "value")
        .writeStream.foreachBatch(
            lambda df, bid: seen(df.selectExpr("partition", "offset", "value"), bid)
        )
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        seen.wait_for(4, query)
        # A stream created while the query runs is read from its oldest offset.
        create_stream(liftbridge_cluster, later, 1)
        publish(liftbridge_cluster, later, [Record(0, b"late-0"), Record(0, b"late-1")])
        publish(liftbridge_cluster, first, [Record(1, b"more")])
        seen.wait_for(7, query)
        time.sleep(1.0)  # a few more triggers: nothing else may show up
    finally:
        _stop(query)
    values = sorted(v for _, _, v in seen.rows())
    assert values == sorted(
        [f"{n}:{p}".encode() for n in (first, second) for p in (0, 1)]
        + [b"late-0", b"late-1", b"more"]
    )
