"""Public API argument errors: clear errors before anything goes on the wire.

Each bad call must raise ``InvalidArgumentError`` (or ``TypeError`` for a wrong type)
with a message naming the argument, and must send nothing: the Publisher's NATS
connection counts no outgoing message, and the Client's error is raised by the SDK
itself (not a server refusal: no ``RpcError``), with no stream created.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeAlias

import pytest
from nats.aio.client import Client as NATS

from liftbridge_nats import (
    AckPolicy,
    Client,
    InvalidArgumentError,
    MaxPayloadExceededError,
    NoSuchStreamError,
    Publisher,
    PublisherClosedError,
    RpcError,
    StartPosition,
    StopPosition,
)
from liftbridge_nats.testing import LocalCluster

ARG_ERRORS = (InvalidArgumentError, TypeError)
# The tables below hold values of the wrong type on purpose, since the SDK must refuse them
# at run time: Any is how they get past its typed signatures.
BadArg: TypeAlias = Any
BadArgs: TypeAlias = dict[str, BadArg]
INT64_MAX = 2**63 - 1


def _assert_clear(exc: BaseException, *words: str) -> None:
    """A local (not server) error whose message names the culprit."""
    assert not isinstance(exc, RpcError), f"the server refused it, the SDK did not: {exc!r}"
    text = str(exc).lower()
    assert text, "the error has no message"
    assert any(w.lower() in text for w in words), f"{exc!r} names none of {words}"


# ------------------------------------------------------------------ Publisher


@pytest.fixture
async def pub(nats_client: NATS) -> AsyncIterator[Publisher]:
    async with Publisher(nats_client, ack_timeout=5) as publisher:
        yield publisher


PUBLISH_CASES: list[tuple[str, BadArgs, tuple[str, ...]]] = [
    ("empty subject", {"subject": ""}, ("subject",)),
    ("subject not str", {"subject": b"orders"}, ("subject",)),
    ("subject None", {"subject": None}, ("subject",)),
    ("subject with space", {"subject": "a b"}, ("subject",)),
    ("subject wildcard *", {"subject": "a.*"}, ("subject",)),
    ("subject wildcard >", {"subject": "a.>"}, ("subject",)),
    ("subject empty token", {"subject": "a..b"}, ("subject",)),
    ("subject leading dot", {"subject": ".a"}, ("subject",)),
    ("value str", {"value": "text"}, ("value",)),
    ("value None", {"value": None}, ("value",)),
    ("value int", {"value": 42}, ("value",)),
    ("key str", {"key": "k"}, ("key",)),
    ("headers not mapping", {"headers": [("a", b"b")]}, ("header",)),
    ("header value str", {"headers": {"a": "b"}}, ("header",)),
    ("header name not str", {"headers": {1: b"b"}}, ("header",)),
    ("ack_policy int", {"ack_policy": 1}, ("ack_policy",)),
    ("ack_policy str", {"ack_policy": "ALL"}, ("ack_policy",)),
    ("expected_offset -2", {"expected_offset": -2}, ("expected_offset",)),
    ("expected_offset float", {"expected_offset": 1.5}, ("expected_offset",)),
    ("expected_offset bool", {"expected_offset": True}, ("expected_offset",)),
    ("expected_offset above int64", {"expected_offset": 2**63}, ("expected_offset",)),
    ("timeout 0", {"timeout": 0}, ("timeout",)),
    ("timeout negative", {"timeout": -1}, ("timeout",)),
    ("timeout nan", {"timeout": float("nan")}, ("timeout",)),
    ("correlation_id empty", {"correlation_id": ""}, ("correlation_id",)),
    ("correlation_id int", {"correlation_id": 7}, ("correlation_id",)),
]


@pytest.mark.parametrize(
    ("case", "override", "words"), PUBLISH_CASES, ids=[c[0] for c in PUBLISH_CASES]
)
@pytest.mark.parametrize("method", ["publish", "publish_async"])
async def test_publish_argument_errors(
    pub: Publisher,
    nats_client: NATS,
    method: str,
    case: str,
    override: BadArgs,
    words: tuple[str, ...],
) -> None:
    kwargs: BadArgs = {"subject": "args-orders", "value": b"v", **override}
    subject, value = kwargs.pop("subject"), kwargs.pop("value")
    send = pub.publish if method == "publish" else pub.publish_async
    out_before = nats_client.stats["out_msgs"]
    with pytest.raises(ARG_ERRORS) as info:
        await send(subject, value, **kwargs)
    _assert_clear(info.value, *words)
    assert nats_client.stats["out_msgs"] == out_before, "something was sent"
    assert pub.pending == 0 and pub.stats.published == 0


async def test_publish_too_large_is_refused_before_sending(
    pub: Publisher, nats_client: NATS
) -> None:
    out_before = nats_client.stats["out_msgs"]
    with pytest.raises(MaxPayloadExceededError) as info:
        await pub.publish("args-orders", b"x" * (nats_client.max_payload + 1))
    _assert_clear(info.value, "max_payload", "larger", "too large")
    assert nats_client.stats["out_msgs"] == out_before
    assert pub.pending == 0


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"ack_timeout": 0}, "ack_timeout"),
        ({"ack_timeout": -1.0}, "ack_timeout"),
        ({"ack_timeout": float("nan")}, "ack_timeout"),
        ({"ack_timeout": "5"}, "ack_timeout"),
        ({"max_inflight": 0}, "max_inflight"),
        ({"max_inflight": 1.5}, "max_inflight"),
        ({"retry_deadline": 0}, "retry_deadline"),
        ({"retry_deadline": -3}, "retry_deadline"),
        ({"max_buffered_bytes": -1}, "max_buffered_bytes"),
    ],
)
def test_publisher_constructor_errors(nats_client: NATS, kwargs: BadArgs, word: str) -> None:
    with pytest.raises(ARG_ERRORS) as info:
        Publisher(nats_client, **kwargs)
    _assert_clear(info.value, word)


async def test_publish_batch_argument_errors_send_nothing(
    pub: Publisher, nats_client: NATS
) -> None:
    out_before = nats_client.stats["out_msgs"]
    with pytest.raises(ARG_ERRORS):
        await pub.publish_batch("args-orders", ["not bytes"])  # type: ignore[list-item]
    with pytest.raises(ARG_ERRORS):
        await pub.publish_batch("", [b"v"])
    assert nats_client.stats["out_msgs"] == out_before
    assert pub.pending == 0


async def test_publish_to_stream_argument_errors(
    nats_client: NATS, liftbridge_cluster: LocalCluster
) -> None:
    async with Publisher(nats_client) as no_client:
        with pytest.raises(InvalidArgumentError, match="client"):
            await no_client.publish_to_stream("s", b"v")
    async with Client(liftbridge_cluster.brokers) as client:
        name = "args-pts-stream"
        await client.create_stream(name, name, partitions=2)
        try:
            async with Publisher(nats_client, client=client) as pub:
                out_before = nats_client.stats["out_msgs"]
                with pytest.raises(InvalidArgumentError, match="partition"):
                    await pub.publish_to_stream(name, b"v", partition=-1)
                with pytest.raises(InvalidArgumentError, match="partition"):
                    await pub.publish_to_stream(name, b"v", partition=5)
                assert nats_client.stats["out_msgs"] == out_before
        finally:
            await client.delete_stream(name)


async def test_publish_on_unstarted_or_closed_publisher(nats_client: NATS) -> None:
    pub = Publisher(nats_client)
    with pytest.raises(PublisherClosedError, match="not started"):
        await pub.publish("args-orders", b"v")
    await pub.start()
    await pub.close()
    await pub.close()  # idempotent
    with pytest.raises(PublisherClosedError, match="closed"):
        await pub.publish("args-orders", b"v")


# ------------------------------------------------------------------ Client


@pytest.mark.parametrize(
    ("brokers", "kwargs"),
    [
        ([], {}),
        ("", {}),
        (["localhost"], {}),
        (["127.0.0.1:notaport"], {}),
        ([":9292"], {}),
        (["127.0.0.1:9292"], {"timeout": 0}),
        (["127.0.0.1:9292"], {"timeout": -1}),
        (["127.0.0.1:9292"], {"timeout": float("nan")}),
        (12345, {}),
        (["127.0.0.1:9292"], {"read_ahead_messages": 0}),
        (["127.0.0.1:9292"], {"read_ahead_messages": 1.5}),
        (["127.0.0.1:9292"], {"read_ahead_bytes": 1024}),
    ],
)
def test_client_constructor_errors(brokers: BadArg, kwargs: BadArgs) -> None:
    with pytest.raises(ARG_ERRORS) as info:
        Client(brokers, **kwargs)
    _assert_clear(info.value, "broker", "timeout", "host:port", "address", "read_ahead")


@pytest.fixture
async def client(liftbridge_cluster: LocalCluster) -> AsyncIterator[Client]:
    async with Client(liftbridge_cluster.brokers, timeout=5) as c:
        yield c


CREATE_CASES: list[tuple[str, tuple[BadArg, BadArg], BadArgs, tuple[str, ...]]] = [
    ("empty subject", ("", "NAME"), {}, ("subject",)),
    ("empty name", ("SUBJ", ""), {}, ("name",)),
    ("subject not str", (b"x", "NAME"), {}, ("subject",)),
    ("name not str", ("SUBJ", 5), {}, ("name",)),
    # A wildcard subject is valid: Liftbridge streams may record "a.*".
    ("subject empty token", ("a..b", "NAME"), {}, ("subject",)),
    ("subject with space", ("a b", "NAME"), {}, ("subject",)),
    ("partitions 0", ("SUBJ", "NAME"), {"partitions": 0}, ("partitions",)),
    ("partitions negative", ("SUBJ", "NAME"), {"partitions": -3}, ("partitions",)),
    ("partitions str", ("SUBJ", "NAME"), {"partitions": "3"}, ("partitions",)),
    ("partitions above int32", ("SUBJ", "NAME"), {"partitions": 2**31}, ("partitions",)),
    ("replication 0", ("SUBJ", "NAME"), {"replication_factor": 0}, ("replication",)),
    ("replication -2", ("SUBJ", "NAME"), {"replication_factor": -2}, ("replication",)),
    (
        "replication above int32",
        ("SUBJ", "NAME"),
        {"replication_factor": 2**31},
        ("replication",),
    ),
    ("retention bytes -1", ("SUBJ", "NAME"), {"retention_max_bytes": -1}, ("retention",)),
    ("retention msgs -1", ("SUBJ", "NAME"), {"retention_max_messages": -1}, ("retention",)),
    (
        "retention bytes above int64",
        ("SUBJ", "NAME"),
        {"retention_max_bytes": INT64_MAX + 1},
        ("retention",),
    ),
    ("retention age -1", ("SUBJ", "NAME"), {"retention_max_age": -1}, ("retention",)),
    (
        "retention age negative timedelta",
        ("SUBJ", "NAME"),
        {"retention_max_age": timedelta(seconds=-1)},
        ("retention",),
    ),
    ("segment bytes -1", ("SUBJ", "NAME"), {"segment_max_bytes": -1}, ("segment",)),
    ("segment age -1", ("SUBJ", "NAME"), {"segment_max_age": -5}, ("segment",)),
    ("min isr -1", ("SUBJ", "NAME"), {"min_isr": -1}, ("isr",)),
    ("auto pause -1", ("SUBJ", "NAME"), {"auto_pause_time": -1}, ("pause",)),
]


@pytest.mark.parametrize(
    ("case", "args", "kwargs", "words"), CREATE_CASES, ids=[c[0] for c in CREATE_CASES]
)
async def test_create_stream_argument_errors(
    client: Client,
    unique_name: Callable[[str], str],
    case: str,
    args: tuple[BadArg, BadArg],
    kwargs: BadArgs,
    words: tuple[str, ...],
) -> None:
    name = unique_name("args")
    subject, stream = (name if a == "SUBJ" else name if a == "NAME" else a for a in args)
    with pytest.raises(ARG_ERRORS) as info:
        await client.create_stream(subject, stream, **kwargs)
    _assert_clear(info.value, *words)
    # Nothing reached the server: no stream of that name exists.
    if isinstance(stream, str) and stream:
        with pytest.raises(NoSuchStreamError):
            await client.stream_info(stream, refresh=True)


SUBSCRIBE_CASES: list[tuple[str, BadArgs, tuple[str, ...]]] = [
    ("empty stream", {"stream": ""}, ("stream",)),
    ("stream not str", {"stream": 3}, ("stream",)),
    ("partition -1", {"partition": -1}, ("partition",)),
    ("partition str", {"partition": "0"}, ("partition",)),
    ("start_offset -1", {"start_offset": -1}, ("start_offset",)),
    (
        "OFFSET without offset",
        {"start_position": StartPosition.OFFSET},
        ("start_offset",),
    ),
    ("start_position str", {"start_position": "EARLIEST"}, ("start_position",)),
    ("stop_offset -5", {"stop_offset": -5}, ("stop_offset",)),
    ("stop_position str", {"stop_position": "LATEST"}, ("stop_position",)),
    (
        "stop OFFSET without offset",
        {"stop_position": StopPosition.OFFSET},
        ("stop_offset",),
    ),
    ("start_offset above int64", {"start_offset": INT64_MAX + 1}, ("start_offset",)),
]


@pytest.mark.parametrize(
    ("case", "kwargs", "words"), SUBSCRIBE_CASES, ids=[c[0] for c in SUBSCRIBE_CASES]
)
async def test_subscribe_argument_errors(
    client: Client, case: str, kwargs: BadArgs, words: tuple[str, ...]
) -> None:
    kwargs = {"stream": "args-subscribe", **kwargs}
    stream = kwargs.pop("stream")
    with pytest.raises(ARG_ERRORS) as info:
        sub = client.subscribe(stream, **kwargs)
        await sub.start()
    _assert_clear(info.value, *words)


async def test_other_client_calls_check_their_arguments(client: Client) -> None:
    calls: list[tuple[Callable[[], Awaitable[object]], tuple[str, ...]]] = [
        (lambda: client.delete_stream(""), ("name", "stream")),
        (lambda: client.fetch_partition_metadata("args-x", -1), ("partition",)),
        (lambda: client.fetch_partition_metadata("", 0), ("stream",)),
        (lambda: client.set_cursor("", "args-x", 0, 1), ("cursor",)),
        (lambda: client.set_cursor("c", "args-x", -1, 1), ("partition",)),
        (lambda: client.set_cursor("c", "args-x", 0, -2), ("offset",)),
        (lambda: client.fetch_cursor("c", "", 0), ("stream",)),
        (lambda: client.pause_stream(""), ("name", "stream")),
        (lambda: client.fetch_metadata(streams="one-string"), ("list", "streams")),
    ]
    for call, words in calls:
        with pytest.raises(ARG_ERRORS) as info:
            await call()
        _assert_clear(info.value, *words)


async def test_publish_over_grpc_argument_errors(client: Client) -> None:
    cases: list[tuple[BadArgs, tuple[str, ...]]] = [
        ({"stream": "", "value": b"v"}, ("stream",)),
        ({"stream": "args-x", "value": "str"}, ("value",)),
        ({"stream": "args-x", "value": b"v", "partition": -1}, ("partition",)),
        ({"stream": "args-x", "value": b"v", "ack_policy": 7}, ("ack_policy",)),
    ]
    for kwargs, words in cases:
        with pytest.raises(ARG_ERRORS) as info:
            await client.publish_to_stream(**kwargs)
        _assert_clear(info.value, *words)


def test_ack_policy_values_are_the_wire_values() -> None:
    # A guard for the "ack_policy int" cases above: the int 1 *is* ALL on the wire,
    # and the SDK still asks for the enum so that typos cannot pass as policies.
    assert int(AckPolicy.ALL) == 1
