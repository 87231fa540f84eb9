"""Option parsing and offset planning of the Spark source: pure, no Spark session."""

from __future__ import annotations

import pickle

import pytest

from liftbridge_nats.errors import InvalidArgumentError
from liftbridge_nats.messages import AckPolicy
from liftbridge_nats.spark._options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    parse_offsets,
    parse_read_options,
    parse_write_options,
)
from liftbridge_nats.spark._planning import (
    OffsetRange,
    cap_offsets,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    resolve_bounds,
    split_range,
)

BASE = {"brokers": "127.0.0.1:9292, 10.0.0.2:9293", "stream": "orders"}


def test_read_defaults_batch_and_streaming() -> None:
    batch = parse_read_options(BASE, streaming=False)
    assert batch.brokers == ("127.0.0.1:9292", "10.0.0.2:9293")
    assert batch.stream == "orders"
    assert batch.starting == OffsetSpec(EARLIEST)
    assert batch.ending == OffsetSpec(LATEST)
    assert batch.starting_timestamp_ms is None
    assert batch.max_offsets_per_split == 100_000
    stream = parse_read_options(BASE, streaming=True)
    assert stream.starting == OffsetSpec(LATEST)


def test_option_names_ignore_case_and_underscores() -> None:
    opts = parse_read_options(
        {**BASE, "STARTING_OFFSETS": "earliest", "maxoffsetspersplit": "7"}, streaming=True
    )
    assert opts.starting == OffsetSpec(EARLIEST)
    assert opts.max_offsets_per_split == 7
    w = parse_write_options(
        {"natsUrl": "nats://a:1,nats://b:2", "subject": "x", "AckPolicy": "leader"}
    )
    assert w.nats_servers == ("nats://a:1", "nats://b:2")
    assert w.ack_policy is AckPolicy.LEADER


def test_offsets_json() -> None:
    spec = parse_offsets(
        '{"orders":{"0":12,"1":-2}}',
        option="startingOffsets",
        stream="orders",
        default=EARLIEST,
        allowed=(EARLIEST, LATEST),
    )
    assert spec.for_partition(0) == 12
    assert spec.for_partition(1) == EARLIEST
    assert spec.for_partition(2) == EARLIEST
    assert pickle.loads(pickle.dumps(spec)) == spec


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"stream": "orders"}, "'brokers' is missing"),
        ({**BASE, "brokers": "nohost"}, "'brokers'.*host:port"),
        ({**BASE, "brokers": "h:99999"}, "'brokers'"),
        ({"brokers": "h:1"}, "'stream' is missing"),
        ({**BASE, "startingOffsets": "{oops"}, "'startingOffsets'.*JSON"),
        ({**BASE, "startingOffsets": "[1]"}, "'startingOffsets'"),
        ({**BASE, "startingOffsets": '{"other":{"0":1}}'}, "'startingOffsets' names stream"),
        ({**BASE, "startingOffsets": '{"orders":{"x":1}}'}, "'startingOffsets' has partition"),
        ({**BASE, "startingOffsets": '{"orders":{"0":-3}}'}, "'startingOffsets' has -3"),
        ({**BASE, "startingOffsets": '{"orders":{"0":1.5}}'}, "'startingOffsets' has 1.5"),
        ({**BASE, "startingOffsets": "latest"}, "'startingOffsets' cannot be 'latest'"),
        ({**BASE, "startingOffsets": '{"orders":{"0":-1}}'}, "'startingOffsets' cannot use -1"),
        ({**BASE, "endingOffsets": "earliest"}, "'endingOffsets' cannot be 'earliest'"),
        ({**BASE, "endingOffsets": '{"orders":{"0":-2}}'}, "'endingOffsets' cannot use -2"),
        ({**BASE, "startingTimestamp": "yesterday"}, "'startingTimestamp'"),
        ({**BASE, "startingTimestamp": "1", "startingOffsets": "earliest"}, "both set"),
        ({**BASE, "maxOffsetsPerSplit": "0"}, "'maxOffsetsPerSplit'"),
        ({**BASE, "maxOffsetsPerTrigger": "5"}, "'maxOffsetsPerTrigger' is for streaming"),
        ({**BASE, "timeout": "-1"}, "'timeout'"),
        ({**BASE, "resumePaused": "yes"}, "'resumePaused' must be true or false"),
    ],
)
def test_batch_read_option_errors(options: dict[str, str], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        parse_read_options(options, streaming=False)


def test_streaming_read_option_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="'endingOffsets' is for batch"):
        parse_read_options({**BASE, "endingOffsets": "latest"}, streaming=True)
    assert (
        parse_read_options(
            {**BASE, "maxOffsetsPerTrigger": "5"}, streaming=True
        ).max_offsets_per_trigger
        == 5
    )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"stream": "s", "brokers": "h:1"}, "'nats_url' is missing"),
        ({"nats_url": "nats://h:1"}, "exactly one of the options 'stream'"),
        ({"nats_url": "nats://h:1", "stream": "s", "subject": "s"}, "exactly one"),
        ({"nats_url": "nats://h:1", "stream": "s"}, "'brokers' is missing"),
        ({"nats_url": "nats://h:1", "subject": "s", "ack_policy": "most"}, "'ack_policy'"),
        ({"nats_url": "nats://h:1", "subject": "s", "max_inflight": "x"}, "'max_inflight'"),
        ({"nats_url": "nats://h:1", "subject": "s", "ack_timeout": "inf"}, "'ack_timeout'"),
    ],
)
def test_write_option_errors(options: dict[str, str], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        parse_write_options(options)


def test_write_defaults() -> None:
    w = parse_write_options({"nats_url": "nats://h:1", "stream": "s", "brokers": "h:2"})
    assert w.ack_policy is AckPolicy.ALL
    assert w.stream == "s" and w.subject is None and w.brokers == ("h:2",)


def test_resolve_bounds_defaults_and_json() -> None:
    hws = {0: 9, 1: -1, 2: 4}
    assert resolve_bounds(hws, OffsetSpec(EARLIEST), OffsetSpec(LATEST)) == {
        0: (0, 10),
        1: (0, 0),
        2: (0, 5),
    }
    start = OffsetSpec(EARLIEST, {0: 3, 2: LATEST})
    end = OffsetSpec(LATEST, {0: 7, 2: 100})
    assert resolve_bounds(hws, start, end) == {0: (3, 7), 1: (0, 0), 2: (5, 5)}
    # A timestamp-resolved start replaces the offsets spec.
    assert resolve_bounds(
        hws, OffsetSpec(EARLIEST), OffsetSpec(LATEST), starting_override={0: 8, 1: 0, 2: 5}
    ) == {
        0: (8, 10),
        1: (0, 0),
        2: (5, 5),
    }


def test_resolve_bounds_errors() -> None:
    with pytest.raises(InvalidArgumentError, match=r"'startingOffsets' names partition\(s\) \[5\]"):
        resolve_bounds({0: 1}, OffsetSpec(EARLIEST, {5: 1}), OffsetSpec(LATEST))
    with pytest.raises(InvalidArgumentError, match=r"'endingOffsets' names partition"):
        resolve_bounds({0: 1}, OffsetSpec(EARLIEST), OffsetSpec(LATEST, {3: 1}))
    with pytest.raises(InvalidArgumentError, match="is after option 'endingOffsets'"):
        resolve_bounds({0: 10}, OffsetSpec(EARLIEST, {0: 5}), OffsetSpec(LATEST, {0: 2}))


def test_split_and_plan() -> None:
    assert split_range("s", 0, 0, 0, 3) == []
    assert [(r.from_offset, r.until_offset) for r in split_range("s", 1, 2, 10, 3)] == [
        (2, 5),
        (5, 8),
        (8, 10),
    ]
    ranges = plan_ranges("s", {1: (0, 2), 0: (5, 5), 2: (0, 4)}, 2)
    assert ranges == [
        OffsetRange("s", 1, 0, 2),
        OffsetRange("s", 2, 0, 2),
        OffsetRange("s", 2, 2, 4),
    ]
    assert sum(r.count for r in ranges) == 6
    assert pickle.loads(pickle.dumps(ranges[0])) == ranges[0]


def test_cap_offsets_is_fair_and_bounded() -> None:
    start = {0: 0, 1: 10, 2: 5}
    available = {0: 100, 1: 12, 2: 5}
    assert cap_offsets(start, available, None) == available
    capped = cap_offsets(start, available, 10)
    assert capped == {0: 8, 1: 12, 2: 5}
    assert sum(capped[p] - start[p] for p in start) <= 10
    # Progress even with a budget smaller than the number of partitions.
    one = cap_offsets({0: 0, 1: 0, 2: 0}, {0: 5, 1: 5, 2: 5}, 1)
    assert sum(one.values()) == 1
    # An end never goes backwards.
    assert cap_offsets({0: 7}, {0: 3}, None) == {0: 7}


def test_streaming_offsets_json_round_trip() -> None:
    doc = offsets_to_json("orders", {1: 5, 0: 12})
    assert doc == {"orders": {"0": 12, "1": 5}}
    assert offsets_from_json("orders", doc) == {0: 12, 1: 5}
    with pytest.raises(InvalidArgumentError, match="checkpointLocation"):
        offsets_from_json("payments", doc)


def test_redact_url_hides_credentials() -> None:
    from liftbridge_nats.spark._io import redact_url

    assert redact_url("nats://app:s3cret@127.0.0.1:4222") == "nats://***@127.0.0.1:4222"
    assert redact_url("tls://token@h:1") == "tls://***@h:1"
    assert redact_url("nats://h:1") == "nats://h:1"
