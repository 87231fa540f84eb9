"""failOnDataLoss: offsets removed by compaction or retention, and deleted streams.

The server really removes the messages (nothing is simulated): compacted streams get
tiny segments and a cleaner that runs every second, so that only the newest message
per key stays; an aged stream rolls its segment after 1 s and deletes segments older
than 1 s, so that nothing stays at all (Liftbridge removes whole segments).
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import (
    Record,
    create_stream,
    delete_stream,
    publish,
    reader,
    stored_offsets,
    wait_until_removed,
)

from liftbridge_nats.spark import DataLossError
from liftbridge_nats.spark._options import parse_read_options
from liftbridge_nats.spark._planning import OffsetRange
from liftbridge_nats.spark._reader import read_range
from liftbridge_nats.spark._schema import arrow_read_schema, read_schema

pytestmark = pytest.mark.spark

COMPACTED = {"segment_max_bytes": 512, "compact_enabled": True, "cleaner_interval": 1}
AGED = {"segment_max_age": 1, "retention_max_age": 1, "cleaner_interval": 0.5}


def _compacted(cluster: Any, unique_name: Any, *, gaps_inside: bool) -> tuple[str, list[int]]:
    """A compacted stream of 200 messages; return it and the offsets compaction kept.

    The first 100 share a key, so offsets 0 to 98 go; with ``gaps_inside`` the next
    100 alternate between a shared key and their own, leaving gaps after those too.
    """
    stream = unique_name("compacted")
    create_stream(cluster, stream, 1, **COMPACTED)
    records = []
    for i in range(200):
        shared = i < 100 or (gaps_inside and i % 2 == 1 and i < 190)
        key = b"old" if i < 100 else b"shared" if shared else f"own-{i}".encode()
        records.append(Record(0, f"v{i:03d}".encode() * 8, key=key))
    publish(cluster, stream, records)
    stored = wait_until_removed(cluster, stream, fewer_than=200)
    assert stored and stored[0] > 0 and stored[-1] == 199, stored
    return stream, stored


def test_gap_at_the_start(spark: Any, liftbridge_cluster: Any, unique_name: Any) -> None:
    stream, stored = _compacted(liftbridge_cluster, unique_name, gaps_inside=False)
    assert stored == list(range(stored[0], 200))

    # Earliest means the oldest offset stored: nothing the query expected is missing.
    rows = reader(spark, liftbridge_cluster, stream).load().collect()
    assert sorted(r.offset for r in rows) == stored

    from_zero = json.dumps({stream: {"0": 0}})
    with pytest.raises(Exception, match=rf"offsets 0 to {stored[0] - 1} can no longer be read"):
        reader(spark, liftbridge_cluster, stream, startingOffsets=from_zero).load().collect()
    skipped = reader(
        spark, liftbridge_cluster, stream, startingOffsets=from_zero, failOnDataLoss="false"
    )
    assert sorted(r.offset for r in skipped.load().collect()) == stored


def test_gaps_inside_the_range(spark: Any, liftbridge_cluster: Any, unique_name: Any) -> None:
    stream, stored = _compacted(liftbridge_cluster, unique_name, gaps_inside=True)
    gaps = sorted(set(range(stored[0], 200)) - set(stored))
    assert gaps, stored
    with pytest.raises(Exception, match=f"offset {gaps[0]} can no longer be read") as info:
        reader(spark, liftbridge_cluster, stream).load().collect()
    assert "set option 'failOnDataLoss' to false" in str(info.value)
    rows = reader(spark, liftbridge_cluster, stream, failOnDataLoss="false").load().collect()
    assert sorted(r.offset for r in rows) == stored


def test_skipped_offsets_are_logged(
    liftbridge_cluster: Any, unique_name: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The task's own code, in this process, so that its log can be captured.
    stream, stored = _compacted(liftbridge_cluster, unique_name, gaps_inside=False)
    base = {"brokers": ",".join(liftbridge_cluster.brokers), "stream": stream}
    schema = arrow_read_schema(read_schema(True))
    rng = OffsetRange(stream, 0, 0, 200)
    opts = parse_read_options({**base, "failOnDataLoss": "false"}, streaming=False)
    with caplog.at_level(logging.WARNING, logger="liftbridge_nats.spark"):
        batches = list(read_range(opts, rng, schema))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == stored
    assert f"offsets 0 to {stored[0] - 1} can no longer be read" in caplog.text
    strict = parse_read_options(base, streaming=False)
    with pytest.raises(DataLossError, match=f"stream {stream!r} partition 0: offsets 0 to"):
        list(read_range(strict, rng, schema))


def test_partition_emptied_by_retention(
    spark: Any, liftbridge_cluster: Any, unique_name: Any
) -> None:
    stream = unique_name("aged")
    create_stream(liftbridge_cluster, stream, 1, **AGED)
    publish(liftbridge_cluster, stream, [Record(0, f"m{i}".encode()) for i in range(50)])
    assert wait_until_removed(liftbridge_cluster, stream, fewer_than=1) == []
    # Nothing is stored, and a subscription from any offset waits for offset 50: the
    # read must notice the offsets are gone instead of waiting for them.
    fast = {"timeout": "2"}
    assert reader(spark, liftbridge_cluster, stream, **fast).load().count() == 0
    from_zero = json.dumps({stream: {"0": 0}})
    with pytest.raises(Exception, match="offsets 0 to 49 can no longer be read"):
        reader(
            spark, liftbridge_cluster, stream, startingOffsets=from_zero, **fast
        ).load().collect()
    skipped = reader(
        spark,
        liftbridge_cluster,
        stream,
        startingOffsets=from_zero,
        failOnDataLoss="false",
        **fast,
    )
    assert skipped.load().count() == 0


def _available_now(spark: Any, cluster: Any, checkpoint: Path, out: Path, **options: str) -> Any:
    r = spark.readStream.format("liftbridge").option("brokers", ",".join(cluster.brokers))
    for k, v in options.items():
        r = r.option(k, v)
    query = (
        r.load()
        .selectExpr("stream", "partition", "offset")
        .writeStream.format("json")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    from pyspark.errors import StreamingQueryException

    # A failed query raises here; the test looks at query.exception() instead.
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(120)
    return query


def _offsets(spark: Any, out: Path) -> list[tuple[str, int]]:
    rows = spark.read.json(str(out)).collect()
    return sorted((r.stream, r.offset) for r in rows)


def test_streaming_from_removed_offsets_fails_then_restarts_skipping(
    spark: Any, liftbridge_cluster: Any, unique_name: Any, tmp_path: Path
) -> None:
    stream, stored = _compacted(liftbridge_cluster, unique_name, gaps_inside=False)
    cp, out = tmp_path / "cp", tmp_path / "out"
    # Offsets the query expects (from an earlier run, or given here) that are gone.
    opts = {"stream": stream, "startingOffsets": json.dumps({stream: {"0": 10}})}
    failed = _available_now(spark, liftbridge_cluster, cp, out, **opts)
    assert failed.exception() is not None
    assert f"offsets 10 to {stored[0] - 1} can no longer be read" in str(failed.exception())
    assert "failOnDataLoss" in str(failed.exception())

    # Restarted from its checkpoint, told to skip: it reads what is left, once.
    skipped = _available_now(spark, liftbridge_cluster, cp, out, **opts, failOnDataLoss="false")
    assert skipped.exception() is None
    assert _offsets(spark, out) == [(stream, o) for o in stored]


def test_deleted_stream_is_data_loss(
    spark: Any, liftbridge_cluster: Any, unique_name: Any, tmp_path: Path
) -> None:
    base = unique_name("gone")
    keep, drop = f"{base}-keep", f"{base}-drop"
    for stream in (keep, drop):
        create_stream(liftbridge_cluster, stream, 1)
        publish(liftbridge_cluster, stream, [Record(0, b"a"), Record(0, b"b")])
    cp, out = tmp_path / "cp", tmp_path / "out"
    opts = {"streamPattern": f"{base}-.*", "startingOffsets": "earliest"}
    assert _available_now(spark, liftbridge_cluster, cp, out, **opts).exception() is None
    assert len(_offsets(spark, out)) == 4

    delete_stream(liftbridge_cluster, drop)
    publish(liftbridge_cluster, keep, [Record(0, b"c")])
    failed = _available_now(spark, liftbridge_cluster, cp, out, **opts)
    assert failed.exception() is not None
    assert f"stream {drop!r} was deleted while the query read it" in str(failed.exception())
    went_on = _available_now(spark, liftbridge_cluster, cp, out, **opts, failOnDataLoss="false")
    assert went_on.exception() is None
    assert _offsets(spark, out) == [(drop, 0), (drop, 1), (keep, 0), (keep, 1), (keep, 2)]
    assert stored_offsets(liftbridge_cluster, keep) == [0, 1, 2]
