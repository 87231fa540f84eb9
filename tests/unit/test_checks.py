"""One rule, one check: the Publisher (NATS) and the Client (gRPC) refuse the same
message arguments with the same error, and a subject's NATS limits read the same
whether it is published on or recorded by a stream."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from liftbridge_nats import AckPolicy, InvalidArgumentError, _checks
from liftbridge_nats._checks import (
    MAX_SUBJECT_BYTES,
    check_duration,
    check_message,
    check_stream_subject,
    check_subject,
    check_value,
)
from liftbridge_nats._ids import CorrelationIds
from liftbridge_nats._requests import message_fields, publish_request

# (argument, bad value) pairs; the other arguments of a message are valid.
BAD_MESSAGE_ARGS: list[tuple[str, Any]] = [
    ("value", "text"),
    ("value", None),
    ("key", "k"),
    ("headers", [("a", b"b")]),
    ("headers", {"a": "b"}),
    ("headers", {1: b"b"}),
    ("headers", {"": b"b"}),
    ("ack_policy", 1),
    ("expected_offset", -2),
    ("expected_offset", 1.5),
    ("correlation_id", ""),
    ("correlation_id", 7),
    ("correlation_id", "\ud800"),
]


def _raised(call: Any) -> tuple[type[BaseException], str]:
    with pytest.raises((TypeError, InvalidArgumentError)) as info:
        call()
    return type(info.value), str(info.value)


@pytest.mark.parametrize(("argument", "bad"), BAD_MESSAGE_ARGS)
def test_publisher_and_client_refuse_a_message_alike(argument: str, bad: Any) -> None:
    args: dict[str, Any] = {
        "value": b"v",
        "key": None,
        "headers": None,
        "ack_policy": AckPolicy.LEADER,
        "expected_offset": None,
        "correlation_id": None,
        argument: bad,
    }
    cid = args.pop("correlation_id")

    def nats() -> None:
        check_message(**args, timeout=None)
        if cid is not None:
            _checks.check_correlation_id(cid)

    def grpc() -> None:
        offset = args["expected_offset"]
        fields = {k: v for k, v in args.items() if k != "expected_offset"}
        publish_request(
            "s",
            partition=0,
            correlation_id=cid,
            expected_offset=offset,
            new_id=CorrelationIds().new,
            **fields,
        )

    publisher, client = _raised(nats), _raised(grpc)
    assert publisher == client
    assert argument.removesuffix("s") in client[1]


@pytest.mark.parametrize(
    ("subject", "words"),
    [
        ("a" * (MAX_SUBJECT_BYTES + 1), "NATS protocol line"),
        ("a\tb", "whitespace or a control character"),
        ("a\x00b", "whitespace or a control character"),
        ("a\ud800", "lone surrogate"),
    ],
)
def test_nats_limits_of_a_subject_read_the_same_on_both_sides(subject: str, words: str) -> None:
    published = _raised(lambda: check_subject(subject))
    recorded = _raised(lambda: check_stream_subject(subject))
    assert published == recorded and words in published[1]


def test_wildcards_are_for_streams_only() -> None:
    for subject in ("a.*", "a.>"):
        with pytest.raises(InvalidArgumentError, match="wildcards"):
            check_subject(subject)
        assert check_stream_subject(subject) == subject
    with pytest.raises(InvalidArgumentError, match="one partition only"):
        check_stream_subject("a.>", 2)
    with pytest.raises(InvalidArgumentError, match="last token"):
        check_stream_subject("a.>.b")


def test_checks_return_what_they_checked() -> None:
    assert check_value(bytearray(b"v")) == b"v" and type(check_value(memoryview(b"v"))) is bytes
    assert check_duration(timedelta(seconds=1.5), "d") == 1500 and check_duration(None, "d") is None
    ids = CorrelationIds()
    fields = message_fields(
        bytearray(b"v"), bytearray(b"k"), {"h": b"1"}, AckPolicy.ALL, None, ids.new
    )
    assert fields["value"] == b"v" and fields["key"] == b"k"
    assert fields["correlationId"] == ids.prefix + "1"
