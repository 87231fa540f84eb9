"""The source on a Spark standalone cluster: driver and executors in separate processes.

The cluster (a master and two one-core workers, started from the pyspark package with
the machine's Java) is shared by these tests; the reads and writes run in executors
on the workers, which reach Liftbridge and NATS themselves. The last test kills a
streaming query's driver in the middle of a micro-batch and starts it again from its
checkpoint: every message must end up in the output exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import Record, create_stream, publish, read_all

pytestmark = [pytest.mark.spark, pytest.mark.spark_cluster, pytest.mark.timeout(600)]

DRIVER = Path(__file__).with_name("streaming_driver.py")


def _on_two_executors(spark: Any) -> None:
    # The driver plus one executor per worker (each worker has one core).
    deadline = time.monotonic() + 60
    while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3:
        assert time.monotonic() < deadline, "the executors did not register"
        time.sleep(0.2)
    assert spark.sparkContext.master.startswith("spark://")


def _executor_pids(df: Any) -> set[int]:
    """Process ids of the Python workers that produced ``df``'s partitions."""
    return set(df.rdd.mapPartitions(lambda rows: [os.getpid()] if list(rows) else []).collect())


def test_batch_read_and_write_on_the_cluster(
    spark_cluster: Any, liftbridge_cluster: Any, unique_name: Any
) -> None:
    _on_two_executors(spark_cluster)
    source, sink = unique_name("csrc"), unique_name("cdst")
    create_stream(liftbridge_cluster, source, 4)
    create_stream(liftbridge_cluster, sink, 2)
    records = [Record(i % 4, f"v{i}".encode(), key=f"k{i % 9}".encode()) for i in range(400)]
    publish(liftbridge_cluster, source, records)

    df = (
        spark_cluster.read.format("liftbridge")
        .option("brokers", ",".join(liftbridge_cluster.brokers))
        .option("stream", source)
        .option("maxOffsetsPerSplit", "25")
        .load()
    )
    rows = df.collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        (p, o) for p in range(4) for o in range(100)
    )
    # The ranges were read by Python workers outside this process, on both workers.
    pids = _executor_pids(df)
    assert os.getpid() not in pids and len(pids) >= 2

    (
        df.select("key", "value")
        .write.format("liftbridge")
        .mode("append")
        .option("nats_url", liftbridge_cluster.nats_url)
        .option("brokers", ",".join(liftbridge_cluster.brokers))
        .option("stream", sink)
        .save()
    )
    written = read_all(liftbridge_cluster, sink)
    assert sorted(m.value for m in written) == sorted(r.value for r in records)


def test_streaming_read_and_write_on_the_cluster(
    spark_cluster: Any, liftbridge_cluster: Any, unique_name: Any, tmp_path: Path
) -> None:
    first, second, sink = unique_name("s1"), unique_name("s2"), unique_name("sdst")
    for name in (first, second):
        create_stream(liftbridge_cluster, name, 2)
        publish(
            liftbridge_cluster, name, [Record(i % 2, f"{name}:{i}".encode()) for i in range(30)]
        )
    create_stream(liftbridge_cluster, sink, 1)

    def run_once() -> None:
        query = (
            spark_cluster.readStream.format("liftbridge")
            .option("brokers", ",".join(liftbridge_cluster.brokers))
            .option("streams", f"{first},{second}")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "25")
            .load()
            .select("value")
            .writeStream.format("liftbridge")
            .option("nats_url", liftbridge_cluster.nats_url)
            .option("brokers", ",".join(liftbridge_cluster.brokers))
            .option("stream", sink)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(240)
        assert query.exception() is None

    run_once()
    expected = sorted(f"{n}:{i}".encode() for n in (first, second) for i in range(30))
    assert sorted(m.value for m in read_all(liftbridge_cluster, sink)) == expected
    publish(liftbridge_cluster, second, [Record(0, b"late")])
    run_once()  # the same checkpoint: only the new message
    assert sorted(m.value for m in read_all(liftbridge_cluster, sink)) == sorted(
        [*expected, b"late"]
    )


def _driver(
    cluster: Any, standalone: Any, streams: str, cp: Path, out: Path, *extra: str
) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, str(DRIVER),
        "--master", standalone.master_url,
        "--brokers", ",".join(cluster.brokers),
        "--streams", streams,
        "--checkpoint", str(cp),
        "--out", str(out),
        *extra,
    ]  # fmt: skip
    log = cp.parent / f"driver-{len(list(cp.parent.glob('driver-*')))}.log"
    # A session of its own: the kill takes the driver JVM (its child) with it. The
    # child writes to its own copy of the log's descriptor.
    with log.open("wb") as to_log:
        return subprocess.Popen(
            cmd, stdout=to_log, stderr=subprocess.STDOUT, start_new_session=True
        )


def _batches(cp: Path, kind: str) -> set[int]:
    folder = cp / kind
    if not folder.is_dir():
        return set()
    return {int(f.name) for f in folder.iterdir() if f.name.isdigit()}


def test_killed_streaming_query_restarts_with_nothing_lost_or_read_twice(
    spark_sessions: Any,
    spark_standalone: Any,
    liftbridge_cluster: Any,
    unique_name: Any,
    tmp_path: Path,
) -> None:
    # The driver programs below need both workers' cores.
    spark_sessions.stop()
    streams = [unique_name("k1"), unique_name("k2")]
    stored: list[tuple[str, int, int]] = []

    def store(name: str, records: list[Record]) -> None:
        acks = publish(liftbridge_cluster, name, records)
        stored.extend((name, r.partition, a.offset) for r, a in zip(records, acks, strict=True))

    for name in streams:
        create_stream(liftbridge_cluster, name, 2)
        store(name, [Record(i % 2, b"x%d" % i) for i in range(120)])
    cp, out = tmp_path / "cp", tmp_path / "out"

    # Keep publishing while the query runs, so that it is killed with work in flight.
    stop = threading.Event()

    def keep_publishing() -> None:
        n = 0
        while not stop.is_set():
            batch = [Record(i % 2, b"live%d" % (n + i)) for i in range(10)]
            store(streams[n % 20 // 10], batch)
            n += 10
            time.sleep(0.5)

    publisher = threading.Thread(target=keep_publishing)
    driver = _driver(liftbridge_cluster, spark_standalone, ",".join(streams), cp, out)
    publisher.start()
    mid_batch = False
    try:
        deadline = time.monotonic() + 240
        while len(_batches(cp, "commits")) < 2:
            assert driver.poll() is None, (tmp_path / "driver-0.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the query committed no two batches"
            time.sleep(0.05)
        # Kill when a batch is planned (its offsets logged) but not committed.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if _batches(cp, "offsets") - _batches(cp, "commits"):
                mid_batch = True
                break
            time.sleep(0.01)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    finally:
        stop.set()
        publisher.join()
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    committed_before = _batches(cp, "commits")
    # More arrives while the query is down.
    for name in streams:
        store(name, [Record(0, b"down"), Record(1, b"down")])

    # Restarted on the same checkpoint (larger batches now: a rate limit may change).
    again = _driver(
        liftbridge_cluster,
        spark_standalone,
        ",".join(streams),
        cp,
        out,
        "--available-now",
        "--max-offsets-per-trigger",
        "5000",
    )
    assert again.wait(timeout=300) == 0, (tmp_path / "driver-1.log").read_text()[-3000:]
    assert max(_batches(cp, "commits")) > max(committed_before)

    spark = spark_sessions.get("local[2]")
    rows = spark.read.json(str(out)).collect()
    got = sorted((r.stream, r.partition, r.offset) for r in rows)
    want = sorted(stored)
    assert len(got) == len(set(got)), "a message was read twice"
    assert got == want, f"{len(set(want) - set(got))} message(s) lost"
    # The kill did land with a batch in flight (else the test proved less).
    assert mid_batch
