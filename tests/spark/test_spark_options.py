"""Option parsing and offset planning of the Spark source: pure, no Spark session."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from liftbridge_nats import AckPolicy, InvalidArgumentError
from liftbridge_nats.spark._options import (
    StreamSelection,
    parse_read_options,
    parse_write_options,
)
from liftbridge_nats.spark._planning import (
    Lookup,
    OffsetRange,
    cap_offsets,
    lookups_needed,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    resolve_bounds,
    split_range,
)
from liftbridge_nats.spark._positions import (
    EARLIEST,
    LATEST,
    At,
    Position,
    PositionSpec,
    parse_offsets,
)
from liftbridge_nats.spark._security import Secret

BASE = {"brokers": "127.0.0.1:9292, 10.0.0.2:9293", "stream": "orders"}


def test_read_defaults_batch_and_streaming() -> None:
    batch = parse_read_options(BASE, streaming=False)
    assert batch.brokers == ("127.0.0.1:9292", "10.0.0.2:9293")
    assert batch.selection == StreamSelection(names=("orders",))
    assert batch.starting == PositionSpec(EARLIEST)
    assert batch.ending == PositionSpec(LATEST)
    assert batch.max_offsets_per_split == 100_000
    assert batch.fail_on_data_loss and batch.include_headers and batch.tls is None
    stream = parse_read_options(BASE, streaming=True)
    assert stream.starting == PositionSpec(LATEST)


def test_option_names_ignore_case_and_underscores() -> None:
    opts = parse_read_options(
        {**BASE, "STARTING_OFFSETS": "earliest", "maxoffsetspersplit": "7"}, streaming=True
    )
    assert opts.starting == PositionSpec(EARLIEST)
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
        selected=lambda name: name == "orders",
        example_streams=["orders"],
        default=EARLIEST,
        allowed=(EARLIEST, LATEST),
    )
    assert spec.position("orders", 0) == 12
    assert spec.position("orders", 1) == EARLIEST
    assert spec.position("orders", 2) == EARLIEST
    assert spec.position("other", 0) == EARLIEST
    assert pickle.loads(pickle.dumps(spec)) == spec


def test_stream_selection() -> None:
    listed = parse_read_options(
        {"brokers": "h:1", "streams": "orders, payments,orders"}, streaming=False
    )
    assert listed.selection == StreamSelection(names=("orders", "payments"))
    assert listed.selection.matches("payments") and not listed.selection.matches("order")
    pattern = parse_read_options(
        {"brokers": "h:1", "streamPattern": "orders-[0-9]+"}, streaming=True
    ).selection
    assert pattern.matches("orders-12")
    assert not pattern.matches("orders-12x")  # the whole name must match
    assert not pattern.matches("xorders-1")
    # Liftbridge's internal streams never match a pattern.
    assert not StreamSelection(pattern=".*").matches("__cursors")
    assert StreamSelection(pattern=".*").matches("orders")


def test_timestamp_options() -> None:
    start = parse_read_options({**BASE, "startingTimestamp": "1700000000000"}, streaming=False)
    assert start.starting == PositionSpec(At(1700000000000))
    by_partition = parse_read_options(
        {
            "brokers": "h:1",
            "streams": "a,b",
            "startingOffsetsByTimestamp": '{"a": {"0": 5, "2": 7}}',
            "endingOffsetsByTimestamp": '{"b": {"1": 9}}',
        },
        streaming=False,
    )
    assert by_partition.starting.position("a", 0) == At(5)
    assert by_partition.starting.position("a", 1) == EARLIEST
    assert by_partition.starting.position("b", 0) == EARLIEST
    assert by_partition.ending.position("b", 1) == At(9)
    assert by_partition.ending.position("a", 0) == LATEST
    end = parse_read_options({**BASE, "endingTimestamp": "12"}, streaming=False)
    assert end.ending == PositionSpec(At(12)) and end.ending.uses_time


def test_security_options_and_secrets(tmp_path: Path) -> None:
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    for f in (ca, cert, key):
        f.write_text("pem")
    read = parse_read_options(
        {**BASE, "tls.ca": str(ca), "tls.cert": str(cert), "tls.key": str(key)}, streaming=False
    )
    assert read.tls is not None and read.tls.ca_file == str(ca) and read.tls.key_file == str(key)
    assert parse_read_options({**BASE, "tls": "true"}, streaming=False).tls is not None
    write = parse_write_options(
        {
            "nats.url": "tls://h:1",
            "subject": "s",
            "nats.user": "app",
            "nats.password": "pw-very-secret",
            "nats.tls.ca": str(ca),
        }
    )
    auth = write.nats_auth
    assert auth.user == "app" and auth.password == Secret("pw-very-secret") and auth.tls
    # The settings travel to executors by pickle and may be printed: never the secret.
    assert pickle.loads(pickle.dumps(write)) == write
    for text in (repr(write), str(write), repr(auth.password), str(auth.password)):
        assert "pw-very-secret" not in text
    # The NKey seed and the creds file stay files: nats-py reads them when it connects.
    for option, argument in (
        ("nats.nkeySeedFile", "nkeys_seed"),
        ("nats.credsFile", "user_credentials"),
    ):
        auth = parse_write_options(
            {"nats_url": "nats://h:1", "subject": "s", option: str(ca)}
        ).nats_auth
        assert auth.connect_options() == {argument: str(ca)}
    token = parse_write_options({"nats_url": "nats://h:1", "subject": "s", "nats.token": "t0k"})
    assert token.nats_auth.token is not None and "t0k" not in repr(token)
    assert token.nats_auth.connect_options() == {"token": "t0k"}


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"stream": "orders"}, "'brokers' is missing"),
        ({**BASE, "brokers": "nohost"}, "'brokers'.*host:port"),
        ({**BASE, "brokers": "h:99999"}, "'brokers'"),
        ({"brokers": "h:1"}, "no stream to read: set 'stream'"),
        ({**BASE, "streams": "a,b"}, "options 'stream', 'streams' are all set; keep one"),
        ({"brokers": "h:1", "streams": " , "}, "option 'streams' is"),
        ({"brokers": "h:1", "streamPattern": "orders-("}, "'streamPattern' is not a valid"),
        ({**BASE, "startingOffsets": "{oops"}, "'startingOffsets'.*JSON"),
        ({**BASE, "startingOffsets": "[1]"}, "'startingOffsets'"),
        ({**BASE, "startingOffsets": "soon"}, "'startingOffsets' is 'soon'"),
        ({**BASE, "startingOffsets": '{"other":{"0":1}}'}, "'startingOffsets' names stream"),
        ({**BASE, "startingOffsets": '{"orders":{"x":1}}'}, "'startingOffsets' has partition"),
        ({**BASE, "startingOffsets": '{"orders":{"0":-3}}'}, "'startingOffsets' has -3"),
        ({**BASE, "startingOffsets": '{"orders":{"0":1.5}}'}, "'startingOffsets' has 1.5"),
        ({**BASE, "startingOffsets": "latest"}, "'startingOffsets' cannot be 'latest'"),
        ({**BASE, "startingOffsets": '{"orders":{"0":-1}}'}, "'startingOffsets' cannot use -1"),
        ({**BASE, "endingOffsets": "earliest"}, "'endingOffsets' cannot be 'earliest'"),
        ({**BASE, "endingOffsets": '{"orders":{"0":-2}}'}, "'endingOffsets' cannot use -2"),
        ({**BASE, "startingTimestamp": "yesterday"}, "'startingTimestamp'"),
        ({**BASE, "endingTimestamp": "-5"}, "'endingTimestamp' must be milliseconds"),
        ({**BASE, "startingTimestamp": "1", "startingOffsets": "earliest"}, "keep one"),
        (
            {**BASE, "startingOffsetsByTimestamp": '{"orders":{"0":1}}', "startingTimestamp": "1"},
            "keep one",
        ),
        ({**BASE, "startingOffsetsByTimestamp": '{"orders":{"0":"x"}}'}, "has 'x' for 'orders'"),
        (
            {**BASE, "endingOffsetsByTimestamp": '{"nope":{"0":1}}'},
            r"names stream\(s\) \['nope'\]",
        ),
        ({**BASE, "maxOffsetsPerSplit": "0"}, "'maxOffsetsPerSplit'"),
        ({**BASE, "maxOffsetsPerTrigger": "5"}, "'maxOffsetsPerTrigger' is for streaming"),
        ({**BASE, "timeout": "-1"}, "'timeout'"),
        ({**BASE, "resumePaused": "yes"}, "'resumePaused' must be true or false"),
        ({**BASE, "failOnDataLoss": "no"}, "'failOnDataLoss' must be true or false"),
        ({**BASE, "includeHeaders": "1"}, "'includeHeaders' must be true or false"),
        ({**BASE, "tls.ca": "/no/such/ca.pem"}, "'tls.ca': cannot read the file"),
        ({**BASE, "tls": "false", "tls.serverName": "x"}, "option 'tls' is false"),
    ],
)
def test_batch_read_option_errors(options: dict[str, str], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        parse_read_options(options, streaming=False)


def test_streaming_read_option_errors() -> None:
    ends = {"endingOffsets": "latest", "endingTimestamp": "5", "endingOffsetsByTimestamp": "{}"}
    for option, value in ends.items():
        with pytest.raises(InvalidArgumentError, match=f"'{option}' is for batch"):
            parse_read_options({**BASE, option: value}, streaming=True)
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
        ({"nats_url": "nats://h:1", "subject": "s", "nats.user": "u"}, "go together"),
        (
            {
                "nats_url": "nats://h:1",
                "subject": "s",
                "nats.token": "t",
                "nats.user": "u",
                "nats.password": "p",
            },
            "NATS takes one kind of credentials",
        ),
        (
            {"nats_url": "nats://u:p@h:1", "subject": "s", "nats.token": "t"},
            "carries credentials",
        ),
        ({"nats_url": "nats://h:1", "subject": "s", "nats.credsFile": "/nope"}, "cannot read"),
        ({"nats_url": "nats://h:1", "subject": "s", "nats.tls.cert": __file__}, "go together"),
    ],
)
def test_write_option_errors(options: dict[str, str], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        parse_write_options(options)


def test_write_defaults() -> None:
    w = parse_write_options({"nats_url": "nats://h:1", "stream": "s", "brokers": "h:2"})
    assert w.ack_policy is AckPolicy.ALL
    assert w.stream == "s" and w.subject is None and w.brokers == ("h:2",)


def _spec(default: Position, partitions: dict[int, Position]) -> PositionSpec:
    """A spec for stream "s" only."""
    return PositionSpec(default, {"s": partitions})


def test_resolve_bounds_defaults_and_json() -> None:
    hws = {"s": {0: 9, 1: -1, 2: 4}}
    oldest: dict[Lookup, int] = {("s", 0, EARLIEST): 0, ("s", 2, EARLIEST): 0}
    assert lookups_needed(hws, PositionSpec(EARLIEST)) == set(oldest)
    assert resolve_bounds(hws, PositionSpec(EARLIEST), PositionSpec(LATEST), oldest) == {
        "s": {0: (0, 10), 1: (0, 0), 2: (0, 5)}
    }
    start = _spec(EARLIEST, {0: 3, 2: LATEST})
    end = _spec(LATEST, {0: 7, 2: 100})
    assert resolve_bounds(hws, start, end, {("s", 2, EARLIEST): 0}) == {
        "s": {0: (3, 7), 1: (0, 0), 2: (5, 5)}
    }
    # Retention removed offsets 0-5 of partition 0: earliest is the oldest stored.
    assert resolve_bounds(
        hws, PositionSpec(EARLIEST), PositionSpec(LATEST), {**oldest, ("s", 0, EARLIEST): 6}
    )["s"][0] == (6, 10)
    # Times resolve to the first offset at or after them, for starts and ends alike.
    t1, t2 = At(1000), At(2000)
    assert lookups_needed(hws, PositionSpec(t1), _spec(LATEST, {0: t2})) == {
        ("s", 0, t1),
        ("s", 2, t1),
        ("s", 0, t2),
    }
    found: dict[Lookup, int] = {("s", 0, t1): 4, ("s", 2, t1): 5, ("s", 0, t2): 8}
    assert resolve_bounds(hws, PositionSpec(t1), _spec(LATEST, {0: t2}), found) == {
        "s": {0: (4, 8), 1: (0, 0), 2: (5, 5)}
    }


def test_resolve_bounds_errors() -> None:
    with pytest.raises(InvalidArgumentError, match=r"names partition\(s\) \[5\] of stream 's'"):
        resolve_bounds({"s": {0: 1}}, _spec(EARLIEST, {5: 1}), PositionSpec(LATEST), {})
    with pytest.raises(InvalidArgumentError, match=r"'endingOffsets' names partition"):
        resolve_bounds({"s": {0: 1}}, PositionSpec(0), _spec(LATEST, {3: 1}), {})
    with pytest.raises(InvalidArgumentError, match=r"'startingOffsets' names stream\(s\)"):
        resolve_bounds({"s": {0: 1}}, PositionSpec(0, {"t": {0: 1}}), PositionSpec(LATEST), {})
    with pytest.raises(InvalidArgumentError, match="is after option 'endingOffsets'"):
        resolve_bounds({"s": {0: 10}}, _spec(EARLIEST, {0: 5}), _spec(LATEST, {0: 2}), {})


def test_split_and_plan() -> None:
    assert split_range("s", 0, 0, 0, 3) == []
    assert [(r.from_offset, r.until_offset) for r in split_range("s", 1, 2, 10, 3)] == [
        (2, 5),
        (5, 8),
        (8, 10),
    ]
    ranges = plan_ranges({"t": {0: (0, 1)}, "s": {1: (0, 2), 0: (5, 5), 2: (0, 4)}}, 2)
    assert ranges == [
        OffsetRange("s", 1, 0, 2),
        OffsetRange("s", 2, 0, 2),
        OffsetRange("s", 2, 2, 4),
        OffsetRange("t", 0, 0, 1),
    ]
    assert sum(r.count for r in ranges) == 7
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
    # Partitions of several streams share one budget.
    two = cap_offsets({("a", 0): 0, ("b", 0): 0}, {("a", 0): 10, ("b", 0): 1}, 5)
    assert two == {("a", 0): 4, ("b", 0): 1}


def test_streaming_offsets_json_round_trip() -> None:
    doc = offsets_to_json({"orders": {1: 5, 0: 12}, "a": {0: 1}})
    assert doc == {"a": {"0": 1}, "orders": {"0": 12, "1": 5}}
    assert list(doc) == ["a", "orders"]  # sorted: equal offsets give equal JSON
    assert offsets_from_json(doc) == {"orders": {0: 12, 1: 5}, "a": {0: 1}}
