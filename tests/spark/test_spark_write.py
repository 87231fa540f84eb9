"""Writes: batch and streaming sinks publish with acks; what they write reads back."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.sql import DataFrame, SparkSession
from spark_helpers import Record, create_stream, publish, read_all

from liftbridge_nats import InvalidArgumentError, PublishError
from liftbridge_nats.spark import LiftbridgeCommitMessage, LiftbridgeDataSource
from liftbridge_nats.testing import LocalCluster

if TYPE_CHECKING:
    import pyarrow as pa

pytestmark = pytest.mark.spark


def _writer_options(cluster: LocalCluster, **extra: str) -> dict[str, str]:
    return {"nats_url": cluster.nats_url, "brokers": ",".join(cluster.brokers), **extra}


def _save(df: DataFrame, options: dict[str, str]) -> None:
    w = df.write.format("liftbridge").mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def test_batch_write_reads_back(
    spark: SparkSession, liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    stream = unique_name("out")
    create_stream(liftbridge_cluster, stream, 3)
    rows = []
    for i in range(60):
        key = None if i % 4 == 0 else f"customer-{i % 7}".encode()
        partition = 2 if i % 10 == 0 else None  # an explicit partition wins over the key
        headers = {"n": str(i)} if i % 2 else None
        rows.append((f"order-{i}", key, headers, partition))
    df = spark.createDataFrame(
        rows, "value string, key binary, headers map<string,string>, partition int"
    ).repartition(3)
    _save(df, _writer_options(liftbridge_cluster, stream=stream))

    got = read_all(liftbridge_cluster, stream)
    assert len(got) == 60
    by_value = {m.value.decode(): m for m in got}
    assert len(by_value) == 60
    for value, key, headers, partition in rows:
        m = by_value[value]
        assert m.key == key
        user_headers = {k: v for k, v in m.headers.items() if k not in ("subject", "reply")}
        assert user_headers == ({k: v.encode() for k, v in headers.items()} if headers else {})
        if partition is not None:
            assert m.partition == partition
        elif key is not None:
            assert m.partition == zlib.crc32(key) % 3
    # Keyless rows were spread, not all put on one partition.
    assert len({by_value[v].partition for v, k, _, p in rows if k is None and p is None}) > 1

    # The source reads back exactly what the sink wrote.
    back = (
        spark.read.format("liftbridge")
        .option("brokers", ",".join(liftbridge_cluster.brokers))
        .option("stream", stream)
        .load()
    )
    assert sorted(r.value.decode() for r in back.select("value").collect()) == sorted(
        r[0] for r in rows
    )


def test_rows_without_a_key_go_a_batch_at_a_time_from_each_task_s_own_partition(
    spark: SparkSession, liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    stream = unique_name("sticky")
    create_stream(liftbridge_cluster, stream, 3)
    # Two tasks of 60 rows, in Arrow batches of 10: six batches each.
    df = spark.range(120, numPartitions=2).selectExpr("cast(cast(id as string) as binary) AS value")
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "10")
    try:
        _save(df, _writer_options(liftbridge_cluster, stream=stream))
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)
    got = {int(m.value): m.partition for m in read_all(liftbridge_cluster, stream)}
    assert sorted(got) == list(range(120))
    # Each batch of a task goes to one partition, the next batch to the next one; the
    # second task starts one partition after the first (where the first starts depends
    # on the write's stage id).
    first = got[0]
    expected = {i: (first + i // 60 + (i % 60) // 10) % 3 for i in range(120)}
    assert got == expected
    counts = [sum(1 for p in got.values() if p == q) for q in range(3)]
    assert counts == [40, 40, 40]


def test_write_to_bare_subject(
    spark: SparkSession, liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    stream = unique_name("subj")
    create_stream(liftbridge_cluster, stream, 1)
    df = spark.createDataFrame([(b"x",), (b"y",)], "value binary")
    _save(df, {"nats_url": liftbridge_cluster.nats_url, "subject": stream, "ack_policy": "LEADER"})
    assert sorted(m.value for m in read_all(liftbridge_cluster, stream)) == [b"x", b"y"]


def test_streaming_write_reads_back(
    spark: SparkSession,
    liftbridge_cluster: LocalCluster,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source = unique_name("src")
    sink = unique_name("dst")
    create_stream(liftbridge_cluster, source, 3)
    create_stream(liftbridge_cluster, sink, 2)
    published = [Record(i % 3, f"m{i}".encode(), key=f"k{i}".encode()) for i in range(30)]
    publish(liftbridge_cluster, source, published)

    def run_once() -> None:
        query = (
            spark.readStream.format("liftbridge")
            .option("brokers", ",".join(liftbridge_cluster.brokers))
            .option("stream", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "12")
            .load()
            .selectExpr("key", "value", "headers")
            .writeStream.format("liftbridge")
            .option("nats_url", liftbridge_cluster.nats_url)
            .option("brokers", ",".join(liftbridge_cluster.brokers))
            .option("stream", sink)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        assert query.exception() is None

    run_once()
    got = read_all(liftbridge_cluster, sink)
    assert sorted((m.key, m.value) for m in got) == sorted((r.key, r.value) for r in published)
    # More input, same checkpoint: only the new rows are written.
    more = [Record(0, b"late", key=b"k-late")]
    publish(liftbridge_cluster, source, more)
    run_once()
    got = read_all(liftbridge_cluster, sink)
    assert len(got) == 31
    assert sorted(m.value for m in got if m.key == b"k-late") == [b"late"]


def _arrow_batch(values: list[bytes]) -> pa.RecordBatch:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({"value": pa.array(values, type=pa.binary())})


def test_writer_commit_messages_and_summary(
    spark: SparkSession,
    liftbridge_cluster: LocalCluster,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    stream = unique_name("direct")
    create_stream(liftbridge_cluster, stream, 2)
    source = LiftbridgeDataSource(_writer_options(liftbridge_cluster, stream=stream))
    writer = source.writer(StructType([StructField("value", BinaryType())]), False)
    message = writer.write(iter([_arrow_batch([b"a", b"b", b"c"]), _arrow_batch([b"d"])]))
    assert isinstance(message, LiftbridgeCommitMessage)
    assert message.rows == message.acked == 4
    # Each Arrow batch goes to one partition, the next batch to the other one.
    offsets = {o.partition: (o.first, o.last, o.count) for o in message.offsets}
    first = next(p for p, (_, _, count) in offsets.items() if count == 3)
    assert offsets == {first: (0, 2, 3), 1 - first: (0, 0, 1)}
    with caplog.at_level(logging.INFO, logger="liftbridge_nats.spark"):
        writer.commit([message, None])
    assert f"4 row(s) to '{stream}' from 1 task(s), ack_policy=ALL" in caplog.text
    shown = {first: "3 in [0, 2]", 1 - first: "1 in [0, 0]"}
    assert f"p0: {shown[0]}, p1: {shown[1]}" in caplog.text


def test_writer_fails_when_acks_are_missing(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    # Nobody records this subject: no ack can come, so the task must fail.
    source = LiftbridgeDataSource(
        {
            "nats_url": liftbridge_cluster.nats_url,
            "subject": unique_name("nobody"),
            "ack_timeout": "2",
        }
    )
    writer = source.writer(StructType([StructField("value", BinaryType())]), False)
    with pytest.raises(PublishError, match=r"2 of 2 row\(s\) .* were not acked"):
        writer.write(iter([_arrow_batch([b"a", b"b"])]))


@pytest.mark.parametrize(
    ("columns", "options", "match"),
    [
        ("name string", {"stream": "{stream}"}, "needs a 'value' column"),
        ("value int", {"stream": "{stream}"}, "column 'value' must be binary or string"),
        ("value string", {"stream": "nope-{stream}"}, "option 'stream': no stream named"),
        ("value string", {}, "exactly one of the options 'stream'"),
    ],
)
def test_write_errors(
    spark: SparkSession,
    liftbridge_cluster: LocalCluster,
    unique_name: Callable[[str], str],
    columns: str,
    options: dict[str, str],
    match: str,
) -> None:
    stream = unique_name("err")
    create_stream(liftbridge_cluster, stream, 1)
    df = spark.createDataFrame([], columns)
    opts = _writer_options(
        liftbridge_cluster, **{k: v.format(stream=stream) for k, v in options.items()}
    )
    with pytest.raises(Exception, match=match):
        _save(df, opts)


def test_write_needs_nats_url_and_append(
    spark: SparkSession, liftbridge_cluster: LocalCluster
) -> None:
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="'nats_url' is missing"):
        df.write.format("liftbridge").mode("append").option("subject", "s").save()
    with pytest.raises(Exception, match="mode 'overwrite' is not supported"):
        df.write.format("liftbridge").mode("overwrite").option("nats_url", "nats://x:1").option(
            "subject", "s"
        ).save()
    with pytest.raises(InvalidArgumentError, match="'nats_url'"):
        LiftbridgeDataSource({"subject": "s"}).writer(df.schema, False)
    # Nothing listens there: the write fails on the driver, naming the option.
    with pytest.raises(Exception, match="option 'nats_url': cannot connect"):
        df.write.format("liftbridge").mode("append").option(
            "nats_url", "nats://127.0.0.1:1"
        ).option("subject", "s").save()
