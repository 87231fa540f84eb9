"""Batch reads through Spark against a real Liftbridge node."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from spark_helpers import Record, create_stream, publish, reader

pytestmark = pytest.mark.spark


def _records(n_per_partition: int, partitions: int = 3) -> list[Record]:
    out = []
    for i in range(n_per_partition * partitions):
        p = i % partitions
        out.append(
            Record(
                partition=p,
                value=f"value-{i}".encode() + bytes([0, 255]),
                # Every fifth message has no key, every third no headers.
                key=None if i % 5 == 0 else f"key-{i}".encode(),
                headers={} if i % 3 == 0 else {"trace": f"t{i}".encode(), "bin": b"\x00\x01"},
            )
        )
    return out


def _rows(df: Any) -> list[Any]:
    return sorted(df.collect(), key=lambda r: (r.partition, r.offset))


def test_batch_read_equals_published(spark: Any, liftbridge_cluster: Any, unique_name: Any) -> None:
    stream = unique_name("orders")
    create_stream(liftbridge_cluster, stream, 3)
    records = _records(20)
    before = time.time()
    acks = publish(liftbridge_cluster, stream, records)
    after = time.time()

    df = reader(spark, liftbridge_cluster, stream, maxOffsetsPerSplit="7").load()
    assert df.schema.simpleString() == (
        "struct<stream:string,partition:int,offset:bigint,key:binary,value:binary,"
        "timestamp:timestamp,subject:string,headers:map<string,binary>>"
    )
    # 20 offsets per partition in ranges of at most 7: 3 tasks per partition.
    assert df.rdd.getNumPartitions() == 9
    rows = _rows(df)
    assert len(rows) == len(records) == 60

    expected = sorted(
        (
            (r.partition, a.offset, r.key, r.value, dict(r.headers))
            for r, a in zip(records, acks, strict=True)
        ),
        key=lambda t: (t[0], t[1]),
    )
    got = [(r.partition, r.offset, r.key, r.value, dict(r.headers or {})) for r in rows]
    assert got == expected
    assert {r.stream for r in rows} == {stream}
    # Partition 0 listens on the stream subject, partition N on "<subject>.N".
    assert {(r.partition, r.subject) for r in rows} == {
        (0, stream),
        (1, f"{stream}.1"),
        (2, f"{stream}.2"),
    }
    for p in range(3):
        assert [r.offset for r in rows if r.partition == p] == list(range(20))
    for r in rows:
        assert before - 5 <= r.timestamp.timestamp() <= after + 5


def test_offset_ranges(spark: Any, liftbridge_cluster: Any, unique_name: Any) -> None:
    stream = unique_name("ranges")
    create_stream(liftbridge_cluster, stream, 3)
    publish(liftbridge_cluster, stream, _records(10))
    starting = json.dumps({stream: {"0": 5, "1": -2}})
    ending = json.dumps({stream: {"0": 8, "2": 3}})
    df = reader(
        spark, liftbridge_cluster, stream, startingOffsets=starting, endingOffsets=ending
    ).load()
    got = {(r.partition, r.offset) for r in df.select("partition", "offset").collect()}
    want = {(0, o) for o in range(5, 8)} | {(1, o) for o in range(10)} | {(2, o) for o in range(3)}
    assert got == want

    # An end beyond the high watermark stops at what is stored.
    far = json.dumps({stream: {"1": 1000}})
    assert reader(spark, liftbridge_cluster, stream, endingOffsets=far).load().count() == 30
    # A start past the end of a partition reads nothing from it.
    past = json.dumps({stream: {"0": 50, "1": 50, "2": 9}})
    rows = reader(spark, liftbridge_cluster, stream, startingOffsets=past).load().collect()
    assert [(r.partition, r.offset) for r in rows] == [(2, 9)]


def test_snapshot_ignores_later_messages_and_empty_stream(
    spark: Any, liftbridge_cluster: Any, unique_name: Any
) -> None:
    stream = unique_name("snap")
    create_stream(liftbridge_cluster, stream, 2)
    assert reader(spark, liftbridge_cluster, stream).load().count() == 0
    publish(liftbridge_cluster, stream, [Record(0, b"a"), Record(1, b"b")])
    df = reader(spark, liftbridge_cluster, stream).load()
    assert sorted(r.value for r in df.collect()) == [b"a", b"b"]
    # A limit ends the tasks early (their generators are closed mid-range).
    assert len(reader(spark, liftbridge_cluster, stream).load().limit(1).collect()) == 1


def test_starting_timestamp(spark: Any, liftbridge_cluster: Any, unique_name: Any) -> None:
    stream = unique_name("ts")
    create_stream(liftbridge_cluster, stream, 3)
    publish(liftbridge_cluster, stream, [Record(p, b"old") for p in range(3)])
    time.sleep(0.05)
    cut_ms = int(time.time() * 1000)
    time.sleep(0.05)
    publish(liftbridge_cluster, stream, [Record(0, b"new0"), Record(2, b"new2")])
    rows = reader(spark, liftbridge_cluster, stream, startingTimestamp=str(cut_ms)).load().collect()
    assert sorted((r.partition, r.offset, r.value) for r in rows) == [
        (0, 1, b"new0"),
        (2, 1, b"new2"),
    ]


def test_paused_partitions(spark: Any, liftbridge_cluster: Any, unique_name: Any) -> None:
    from spark_helpers import run

    from liftbridge_nats import Client

    stream = unique_name("paused")
    create_stream(liftbridge_cluster, stream, 2)
    publish(liftbridge_cluster, stream, [Record(0, b"a"), Record(1, b"b")])

    async def pause() -> None:
        async with Client(liftbridge_cluster.brokers) as client:
            await client.pause_stream(stream)

    run(pause())
    with pytest.raises(Exception, match=r"partition\(s\) \[0, 1\] are paused"):
        reader(spark, liftbridge_cluster, stream, resumePaused="false").load().collect()
    # By default a read resumes them (as an auto-paused, idle stream needs).
    rows = reader(spark, liftbridge_cluster, stream).load().collect()
    assert sorted(r.value for r in rows) == [b"a", b"b"]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"stream": "x"}, "'brokers' is missing"),
        (
            {"brokers": "127.0.0.1:1", "stream": "x", "startingOffsets": "{nope"},
            "'startingOffsets'",
        ),
        ({"brokers": "bad", "stream": "x"}, "'brokers'"),
        (
            {"brokers": "127.0.0.1:1", "stream": "x", "timeout": "2"},
            "option 'brokers': no Liftbridge broker answered",
        ),
    ],
)
def test_read_option_errors(spark: Any, options: dict[str, str], match: str) -> None:
    r = spark.read.format("liftbridge")
    for k, v in options.items():
        r = r.option(k, v)
    with pytest.raises(Exception, match=match):
        r.load().collect()


def test_unknown_stream_and_partition(
    spark: Any, liftbridge_cluster: Any, unique_name: Any
) -> None:
    with pytest.raises(Exception, match="option 'stream': no stream named"):
        reader(spark, liftbridge_cluster, unique_name("missing")).load().collect()
    stream = unique_name("one")
    create_stream(liftbridge_cluster, stream, 1)
    bad = json.dumps({stream: {"3": 0}})
    with pytest.raises(Exception, match=r"'startingOffsets' names partition\(s\) \[3\]"):
        reader(spark, liftbridge_cluster, stream, startingOffsets=bad).load().collect()
    other = json.dumps({"other": {"0": 0}})
    with pytest.raises(Exception, match="'endingOffsets' names stream"):
        reader(spark, liftbridge_cluster, stream, endingOffsets=other).load().collect()


def test_several_streams_by_list_and_pattern(
    spark: Any, liftbridge_cluster: Any, unique_name: Any
) -> None:
    base = unique_name("multi")
    names = [f"{base}-a", f"{base}-b", f"{base}-c"]
    for i, name in enumerate(names):
        create_stream(liftbridge_cluster, name, 2)
        publish(
            liftbridge_cluster, name, [Record(p, f"{name}/{p}".encode()) for p in (0, 1)] * (i + 1)
        )
    brokers = ",".join(liftbridge_cluster.brokers)

    def read(**options: str) -> list[tuple[str, int, int]]:
        r = spark.read.format("liftbridge").option("brokers", brokers)
        for k, v in options.items():
            r = r.option(k, v)
        return sorted((row.stream, row.partition, row.offset) for row in r.load().collect())

    two = read(streams=f"{names[0]}, {names[1]}")
    assert two == [(names[0], p, 0) for p in (0, 1)] + [
        (names[1], p, o) for p in (0, 1) for o in (0, 1)
    ]
    every = read(streamPattern=f"{base}-[a-z]")
    assert len(every) == 2 + 4 + 6 and {s for s, _, _ in every} == set(names)
    # Offsets per stream in one JSON document, as with Kafka's topics.
    start = json.dumps({names[1]: {"0": 1}, names[2]: {"1": 2}})
    bounded = read(streamPattern=f"{base}-[bc]", startingOffsets=start)
    assert bounded == [
        (names[1], 0, 1),
        (names[1], 1, 0),
        (names[1], 1, 1),
        (names[2], 0, 0),
        (names[2], 0, 1),
        (names[2], 0, 2),
        (names[2], 1, 2),
    ]
    assert read(streamPattern=f"{base}-nothing-.*") == []
    with pytest.raises(Exception, match=r"option 'streams': no stream named '.*-zzz'"):
        read(streams=f"{names[0]},{base}-zzz")
    with pytest.raises(Exception, match=r"'startingOffsets' names stream\(s\)"):
        read(streams=names[0], startingOffsets=json.dumps({names[1]: {"0": 0}}))


def test_ending_timestamps(spark: Any, liftbridge_cluster: Any, unique_name: Any) -> None:
    stream = unique_name("tsend")
    create_stream(liftbridge_cluster, stream, 2)
    publish(liftbridge_cluster, stream, [Record(p, b"early") for p in (0, 1)])
    time.sleep(0.05)
    first_cut = int(time.time() * 1000)
    time.sleep(0.05)
    publish(liftbridge_cluster, stream, [Record(p, b"middle") for p in (0, 1)])
    time.sleep(0.05)
    second_cut = int(time.time() * 1000)
    time.sleep(0.05)
    publish(liftbridge_cluster, stream, [Record(p, b"late") for p in (0, 1)])

    def values(**options: str) -> list[tuple[int, bytes]]:
        rows = reader(spark, liftbridge_cluster, stream, **options).load().collect()
        return sorted((r.partition, r.value) for r in rows)

    # An end time is exclusive: the first offset stored at or after it is not read.
    assert values(endingTimestamp=str(first_cut)) == [(0, b"early"), (1, b"early")]
    assert values(startingTimestamp=str(first_cut), endingTimestamp=str(second_cut)) == [
        (0, b"middle"),
        (1, b"middle"),
    ]
    per_partition = values(
        startingOffsetsByTimestamp=json.dumps({stream: {"0": second_cut}}),
        endingOffsetsByTimestamp=json.dumps({stream: {"1": first_cut}}),
    )
    # Partition 0 from the second cut to the end; partition 1 from the start to the first.
    assert per_partition == [(0, b"late"), (1, b"early")]
    # Ahead of everything stored: empty, not an error.
    assert values(startingTimestamp=str(second_cut + 3_600_000)) == []


def test_include_headers_false(spark: Any, liftbridge_cluster: Any, unique_name: Any) -> None:
    stream = unique_name("nohdr")
    create_stream(liftbridge_cluster, stream, 1)
    publish(liftbridge_cluster, stream, [Record(0, b"v", headers={"h": b"x"})])
    df = reader(spark, liftbridge_cluster, stream, includeHeaders="false").load()
    assert "headers" not in df.columns
    assert df.columns == ["stream", "partition", "offset", "key", "value", "timestamp", "subject"]
    assert [r.value for r in df.collect()] == [b"v"]
    with_headers = reader(spark, liftbridge_cluster, stream).load().collect()
    assert [dict(r.headers) for r in with_headers] == [{"h": b"x"}]
