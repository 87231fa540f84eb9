"""Publish messages and acks, checked against the protobuf library: an independent
implementation of the same schema."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_nats import Ack, AckError, AckPolicy, EnvelopeError, MsgType, envelope, wire
from liftbridge_nats._proto import api_pb2

header_names = st.text(min_size=1, max_size=12)
headers = st.dictionaries(header_names, st.binary(max_size=16), max_size=4)


def parse_message(data: bytes) -> api_pb2.Message:
    env = envelope.decode(data)
    assert env.msg_type is MsgType.PUBLISH
    pb = api_pb2.Message()
    pb.ParseFromString(bytes(env.payload))
    return pb


def test_defaults_send_no_offset_check_and_leader_policy() -> None:
    pb = parse_message(wire.encode_publish(b"value"))
    assert pb.offset == -1
    assert pb.value == b"value"
    assert pb.ackPolicy == api_pb2.LEADER
    assert pb.ackInbox == "" and pb.correlationId == ""


def test_bytes_equal_protobuf_serialisation_without_headers() -> None:
    ours = wire.encode_publish(
        b"v" * 100,
        key=b"cust-7",
        ack_inbox="_INBOX.abc",
        correlation_id="c-1",
        ack_policy=AckPolicy.ALL,
        expected_offset=41,
    )
    pb = api_pb2.Message(
        offset=41,
        key=b"cust-7",
        value=b"v" * 100,
        ackInbox="_INBOX.abc",
        correlationId="c-1",
        ackPolicy=api_pb2.ALL,
    )
    assert ours == envelope.encode(MsgType.PUBLISH, pb.SerializeToString())


@given(
    value=st.binary(max_size=300),
    key=st.one_of(st.none(), st.binary(max_size=40)),
    hdrs=headers,
    inbox=st.text(max_size=30),
    cid=st.text(max_size=30),
    policy=st.sampled_from(list(AckPolicy)),
    expected=st.one_of(st.none(), st.integers(-1, 2**63 - 1)),
    crc=st.booleans(),
)
def test_protobuf_parses_what_we_build(
    value: bytes,
    key: bytes | None,
    hdrs: dict[str, bytes],
    inbox: str,
    cid: str,
    policy: AckPolicy,
    expected: int | None,
    crc: bool,
) -> None:
    data = wire.encode_publish(
        value,
        key=key,
        headers=hdrs,
        ack_inbox=inbox,
        correlation_id=cid,
        ack_policy=policy,
        expected_offset=expected,
        crc=crc,
    )
    pb = parse_message(data)
    assert pb.value == value
    assert pb.key == (key or b"")
    assert dict(pb.headers) == hdrs
    assert (pb.ackInbox, pb.correlationId, pb.ackPolicy) == (inbox, cid, int(policy))
    assert pb.offset == (-1 if expected is None else expected)
    published = wire.decode_publish(data)
    assert published.message.value == value
    assert published.ack_inbox == inbox and published.correlation_id == cid
    assert published.ack_policy is policy


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 2**31, 2**63 - 1, -1, -(2**63)])
def test_varint_matches_protobuf(n: int) -> None:
    pb = api_pb2.Message(offset=n)
    assert pb.SerializeToString() == (b"\x08" + wire.varint(n) if n else b"")


def make_ack(**fields: object) -> bytes:
    return envelope.encode(MsgType.ACK, api_pb2.Ack(**fields).SerializeToString())  # type: ignore[arg-type]


def test_decode_ack_reads_every_field() -> None:
    ack = wire.decode_ack(
        make_ack(
            stream="orders",
            partitionSubject="orders",  # the stream's subject, as v1.9.0 sends it
            msgSubject="orders.1",
            offset=77,
            ackInbox="_INBOX.x",
            correlationId="c-9",
            ackPolicy=api_pb2.ALL,
            receptionTimestamp=1_700_000_000_000_000_000,
            commitTimestamp=1_700_000_000_100_000_000,
            ackError=api_pb2.Ack.INCORRECT_OFFSET,
        )
    )
    assert ack.stream == "orders" and ack.partition == 1
    assert ack.partition_subject == "orders" and ack.message_subject == "orders.1"
    assert ack.offset == 77
    assert ack.ack_inbox == "_INBOX.x" and ack.correlation_id == "c-9"
    assert ack.ack_policy is AckPolicy.ALL
    assert ack.error is AckError.INCORRECT_OFFSET
    assert ack.commit_time.year == 2023
    assert (ack.commit_timestamp - ack.reception_timestamp) == 100_000_000


@pytest.mark.parametrize(
    ("stream_subject", "message_subject", "partition"),
    [
        ("orders", "orders", 0),
        ("orders", "orders.1", 1),
        ("orders", "orders.12", 12),
        ("a.b", "a.b.3", 3),
        # Wildcards: partition 0 listens on "eu.*", partition N on "eu.*.N".
        ("eu.*", "eu.paris", 0),
        ("eu.*", "eu.7", 0),
        ("eu.*", "eu.paris.2", 2),
        # A subject ending in ">" allows one partition, whatever the message's tail.
        ("logs.>", "logs.app.3", 0),
        # Nothing that names a partition: 0.
        ("orders", "orders.x", 0),
        ("orders", "orders.٣", 0),  # a digit, but not an ASCII one
        ("orders", "", 0),
    ],
)
def test_an_acks_partition_is_read_from_its_subjects(
    stream_subject: str, message_subject: str, partition: int
) -> None:
    assert wire.partition_of(stream_subject, message_subject) == partition
    pb = api_pb2.Ack(stream="s", partitionSubject=stream_subject, msgSubject=message_subject)
    assert wire.ack_from_proto(pb).partition == partition
    assert wire.ack_view(api_pb2.Ack.FromString(pb.SerializeToString())).partition == partition
    assert wire.ack_view(pb.SerializeToString()).partition == partition


def test_decode_ack_refuses_other_types_and_bad_payloads() -> None:
    with pytest.raises(EnvelopeError, match="expected an ACK envelope"):
        wire.decode_ack(wire.encode_publish(b"v"))
    with pytest.raises(EnvelopeError, match="not a valid protobuf Ack"):
        wire.decode_ack(envelope.encode(MsgType.ACK, b"\xff\xff\xff"))
    with pytest.raises(EnvelopeError, match="unknown enum"):
        wire.decode_ack(envelope.encode(MsgType.ACK, b"\x50\x09"))  # ackError = 9
    # Negative enum values (found by hypothesis): refused, not an IndexError.
    with pytest.raises(EnvelopeError, match="unknown enum"):
        wire.decode_ack(envelope.encode(MsgType.ACK, b"P\x80\x80\x80\x80\x08"))
    with pytest.raises(EnvelopeError, match="unknown enum"):
        wire.decode_ack(envelope.encode(MsgType.ACK, b"8\xff\xff\xff\xff\x0f"))


def test_lenient_ack_builder_maps_unknown_enums() -> None:
    pb = api_pb2.Ack()
    pb.ParseFromString(b"P\x80\x80\x80\x80\x08" + b"8\xff\xff\xff\xff\x0f")
    assert pb.ackError < 0 and pb.ackPolicy < 0
    ack = wire.ack_from_proto(pb)
    assert ack.error is AckError.UNKNOWN and ack.ack_policy is AckPolicy.LEADER


@settings(max_examples=3000)
@given(st.binary(max_size=96))
def test_random_ack_payloads_raise_only_envelope_error(payload: bytes) -> None:
    for decoder in (wire.decode_ack, wire.decode_publish):
        for data in (
            envelope.encode(MsgType.ACK, payload),
            envelope.encode(MsgType.PUBLISH, payload),
        ):
            with contextlib.suppress(EnvelopeError):
                decoder(data)


@pytest.mark.parametrize("from_bytes", [False, True], ids=["protobuf", "bytes"])
def test_an_ack_view_is_the_same_ack_read_on_first_access(from_bytes: bool) -> None:
    import copy
    import dataclasses
    import pickle

    from liftbridge_nats import LiftbridgeError

    pb = api_pb2.Ack(
        stream="s",
        partitionSubject="s",
        msgSubject="s.1",
        offset=41,
        ackInbox="_INBOX.x.ack",
        correlationId="c-1",
        ackPolicy=api_pb2.AckPolicy.ALL,
        receptionTimestamp=5,
        commitTimestamp=6,
    )
    data = pb.SerializeToString()
    eager = wire.ack_from_proto(api_pb2.Ack.FromString(data))

    def view() -> Ack:
        if from_bytes:
            return wire.ack_view(data)
        return wire.ack_view(api_pb2.Ack.FromString(data))

    assert isinstance(view(), Ack)
    assert view() == eager and eager == view() and hash(view()) == hash(eager)
    assert repr(view()) == repr(eager)
    assert pickle.loads(pickle.dumps(view())) == eager
    assert copy.copy(view()) == eager and copy.deepcopy(view()) == eager
    assert dataclasses.asdict(view()) == dataclasses.asdict(eager)
    assert dataclasses.replace(view(), offset=7).offset == 7
    assert view().partition == 1 == eager.partition
    read = view()
    assert read.offset == 41 and read.ack_policy is AckPolicy.ALL
    assert type(read) is Ack  # a plain Ack once read
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.offset = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        view().offset = 1  # type: ignore[misc]
    assert not isinstance(view(), LiftbridgeError)
