"""The one Message encoder (wire.PublishEncoder, behind encode_publish too) and the ack
decoder, checked against the protobuf library (an independent implementation of the
same schema)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liftbridge_nats import Ack, AckError, AckPolicy
from liftbridge_nats._proto import api_pb2
from liftbridge_nats.envelope import MsgType, decode, encode
from liftbridge_nats.wire import (
    PublishEncoder,
    ack_from_proto,
    decode_ack,
    decode_publish,
    encode_publish,
    header_fields,
)

INBOX = "_INBOX.abcdefghijklmnopqrstuv.ack"

CASES = list(
    itertools.product(
        [b"", b"v", b"x" * 100, b"y" * 127, b"z" * 128, b"w" * 70_000],
        [None, b"", b"k", b"key" * 50],
        [None, {}, {"h": b"v"}, {"a": b"", "long": b"x" * 300}],
        list(AckPolicy),
        [None, -1, 0, 5, 2**40],
        [b"", b"c-1", b"c" * 200],
        [False, True],
    )
)


@pytest.mark.parametrize(
    ("value", "key", "headers", "policy", "offset", "cid", "crc"),
    CASES[:: max(1, len(CASES) // 600)],
)
def test_encoder_matches_protobuf_and_encode_publish(
    value: bytes,
    key: bytes | None,
    headers: dict[str, bytes] | None,
    policy: AckPolicy,
    offset: int | None,
    cid: bytes,
    crc: bool,
) -> None:
    ours = PublishEncoder(INBOX, crc=crc).encode(
        value, cid, key=key, headers=headers, ack_policy=policy, expected_offset=offset
    )
    reference = encode_publish(
        value,
        key=key,
        headers=headers,
        ack_inbox=INBOX,
        correlation_id=cid.decode(),
        ack_policy=policy,
        expected_offset=offset,
        crc=crc,
    )
    assert ours == reference
    env = decode(ours)  # checks the CRC when flagged
    # Byte for byte where protobuf's output is fixed: several map entries may come in
    # any order, and an expected offset of 0 is written out where proto3 omits it.
    if (not headers or len(headers) == 1) and offset != 0:
        independent = api_pb2.Message(
            offset=-1 if offset is None else offset,
            key=key or b"",
            value=value,
            headers=headers or {},
            ackInbox=INBOX,
            correlationId=cid.decode(),
            ackPolicy=int(policy),  # type: ignore[arg-type]
        )
        assert bytes(env.payload) == independent.SerializeToString(deterministic=True)
    assert env.msg_type is MsgType.PUBLISH
    assert (env.crc is not None) == crc
    pb = api_pb2.Message()
    pb.ParseFromString(bytes(env.payload))
    assert pb.value == value
    assert pb.key == (key or b"")
    assert dict(pb.headers) == (headers or {})
    assert pb.ackInbox == INBOX
    assert pb.correlationId == cid.decode()
    assert pb.ackPolicy == int(policy)
    assert pb.offset == (-1 if offset is None else offset)


@given(
    value=st.binary(max_size=400),
    key=st.one_of(st.none(), st.binary(max_size=200)),
    headers=st.one_of(
        st.none(), st.dictionaries(st.text(min_size=1, max_size=20), st.binary(max_size=50))
    ),
    policy=st.sampled_from(list(AckPolicy)),
    offset=st.one_of(st.none(), st.integers(min_value=-1, max_value=2**62)),
    cid=st.text(alphabet="abcdef0123456789-", max_size=40),
    crc=st.booleans(),
)
def test_encoder_round_trips_through_protobuf(
    value: bytes,
    key: bytes | None,
    headers: dict[str, bytes] | None,
    policy: AckPolicy,
    offset: int | None,
    cid: str,
    crc: bool,
) -> None:
    data = PublishEncoder(INBOX, crc=crc).encode(value, cid.encode(), key, headers, policy, offset)
    sent = decode_publish(data)
    assert sent.message.value == value
    assert sent.message.key == (key or None)
    assert dict(sent.message.headers) == (headers or {})
    assert sent.correlation_id == cid
    assert sent.ack_policy is policy
    assert sent.expected_offset == (-1 if offset is None else offset)
    assert sent.ack_inbox == INBOX


def _ack_pb(**fields: object) -> api_pb2.Ack:
    base: dict[str, object] = {
        "stream": "orders",
        "partitionSubject": "orders.1",
        "msgSubject": "orders.1",
        "offset": 41,
        "ackInbox": INBOX,
        "correlationId": "abc-7",
        "ackPolicy": 1,
        "receptionTimestamp": 1_700_000_000_000_000_001,
        "commitTimestamp": 1_700_000_000_000_000_002,
        "ackError": 0,
    }
    base.update(fields)
    return api_pb2.Ack(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"ackError": 2, "offset": 0},
        {"ackError": 3},
        {"ackError": 4, "ackPolicy": 0},
        {"stream": "", "offset": 0, "correlationId": ""},
    ],
)
def test_fast_ack_equals_wire_decode_ack(fields: dict[str, object]) -> None:
    pb = _ack_pb(**fields)
    data = encode(MsgType.ACK, pb.SerializeToString())
    fast = ack_from_proto(pb)
    reference = decode_ack(data)
    assert fast == reference
    assert type(fast) is Ack
    assert hash(fast) == hash(reference)
    assert repr(fast) == repr(reference)
    assert fast.ack_policy is reference.ack_policy
    assert fast.error is reference.error
    with pytest.raises(AttributeError):
        fast.offset = 3  # type: ignore[misc]


def test_fast_ack_maps_unknown_enum_values() -> None:
    pb = _ack_pb(ackError=99, ackPolicy=7)
    ack = ack_from_proto(pb)
    assert ack.error is AckError.UNKNOWN
    assert ack.ack_policy is AckPolicy.LEADER


@pytest.mark.parametrize("crc", [False, True])
@pytest.mark.parametrize("policy", list(AckPolicy))
@pytest.mark.parametrize("value", [b"", b"v", b"x" * 127, b"z" * 128, b"w" * 70_000])
@pytest.mark.parametrize("cid", [b"", b"c-1", b"c" * 200])
def test_encode_plain_equals_encode(value: bytes, cid: bytes, policy: AckPolicy, crc: bool) -> None:
    encoder = PublishEncoder(INBOX, crc=crc)
    assert encoder.encode_plain(value, cid, policy) == encoder.encode(value, cid, ack_policy=policy)


@pytest.mark.parametrize("key", [None, b"", b"k", b"key" * 50])
@pytest.mark.parametrize("headers", [None, {"h": b"v"}, {"a": b"", "long": b"x" * 300}])
@pytest.mark.parametrize("value", [b"v", b"x" * 200])
@pytest.mark.parametrize("policy", list(AckPolicy))
def test_the_keyed_path_encodes_what_encode_does(
    key: bytes | None, headers: dict[str, bytes] | None, value: bytes, policy: AckPolicy
) -> None:
    encoder = PublishEncoder(INBOX)
    fields = header_fields(headers) if headers else b""
    assert encoder.encode_keyed(value, b"c-7", key, fields, policy) == encoder.encode(
        value, b"c-7", key, headers, policy
    )


@pytest.mark.parametrize("name", ["h", "n" * 60, "\u00e9" * 30, "x" * 123, "y" * 200])
@pytest.mark.parametrize("size", [0, 1, 61, 62, 63, 64, 122, 123, 124, 200])
def test_header_fields_are_protobufs_bytes_on_both_sides_of_one_byte_lengths(
    name: str, size: int
) -> None:
    # A map entry's own length takes one byte below 128: header_fields computes it from
    # the name's and value's sizes there, and encodes the entry first above that.
    headers = {name: b"v" * size}
    assert header_fields(headers) == api_pb2.Message(headers=headers).SerializeToString()
