"""The envelope codec against byte vectors written by hand from the wire spec."""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_nats import envelope
from liftbridge_nats.envelope import EnvelopeError, MsgType

MAGIC = bytes.fromhex("b90e43b4")


def test_every_message_type_has_its_wire_number() -> None:
    expected = [
        "PUBLISH",
        "ACK",
        "REPLICATION_REQUEST",
        "REPLICATION_RESPONSE",
        "RAFT_JOIN_REQUEST",
        "RAFT_JOIN_RESPONSE",
        "LEADER_EPOCH_OFFSET_REQUEST",
        "LEADER_EPOCH_OFFSET_RESPONSE",
        "PROPAGATED_REQUEST",
        "PROPAGATED_RESPONSE",
        "SERVER_INFO_REQUEST",
        "SERVER_INFO_RESPONSE",
        "PARTITION_STATUS_REQUEST",
        "PARTITION_STATUS_RESPONSE",
        "PARTITION_NOTIFICATION",
    ]
    assert [t.name for t in MsgType] == expected
    assert [int(t) for t in MsgType] == list(range(15))
    assert [t.name for t in MsgType if not t.is_internal] == ["PUBLISH", "ACK"]


@pytest.mark.parametrize("msg_type", list(MsgType))
def test_encode_without_crc_matches_hand_written_bytes(msg_type: MsgType) -> None:
    payload = b"\x0a\x03abc"
    expected = MAGIC + bytes([0x00, 0x08, 0x00, int(msg_type)]) + payload
    assert envelope.encode(msg_type, payload) == expected


@pytest.mark.parametrize("msg_type", list(MsgType))
def test_encode_with_crc_matches_hand_written_bytes(msg_type: MsgType) -> None:
    payload = b"hello liftbridge"
    checksum = crc32c.crc32c(payload)
    expected = (
        MAGIC + bytes([0x00, 0x0C, 0x01, int(msg_type)]) + struct.pack(">I", checksum) + payload
    )
    assert envelope.encode(msg_type, payload, crc=True) == expected


def test_crc32c_is_castagnoli() -> None:
    # The standard CRC-32C check value of "123456789".
    assert crc32c.crc32c(b"123456789") == 0xE3069283
    data = envelope.encode(MsgType.PUBLISH, b"123456789", crc=True)
    assert data[8:12] == bytes.fromhex("e3069283")


def test_decode_plain_and_crc_envelopes() -> None:
    plain = envelope.decode(MAGIC + bytes([0, 8, 0, 1]) + b"payload")
    assert (plain.version, plain.header_len, plain.flags, plain.msg_type, plain.crc) == (
        0,
        8,
        0,
        MsgType.ACK,
        None,
    )
    assert bytes(plain.payload) == b"payload"
    with_crc = envelope.decode(envelope.encode(MsgType.PUBLISH, b"xyz", crc=True))
    assert with_crc.crc == crc32c.crc32c(b"xyz")
    assert with_crc.header_len == 12 and with_crc.flags == 1
    assert bytes(with_crc.payload) == b"xyz"


def test_payload_is_a_view_not_a_copy() -> None:
    data = envelope.encode(MsgType.PUBLISH, b"x" * 1_000_000)
    env = envelope.decode(data)
    assert isinstance(env.payload, memoryview)
    assert env.payload.obj is data


def test_header_len_above_minimum_without_crc_skips_the_extra_bytes() -> None:
    env = envelope.decode(MAGIC + bytes([0, 10, 0, 0]) + b"--" + b"body")
    assert bytes(env.payload) == b"body"


def test_empty_payload_is_valid() -> None:
    assert bytes(envelope.decode(envelope.encode(MsgType.ACK, b"")).payload) == b""


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"", "too short"),
        (MAGIC + b"\x00\x08\x00", "too short"),
        (b"\x00\x0e\x43\xb4\x00\x08\x00\x00", "magic"),
        (MAGIC + bytes([1, 8, 0, 0]), "version 1"),
        (MAGIC + bytes([0, 7, 0, 0]), "below the minimum"),
        (MAGIC + bytes([0, 9, 0, 0]), "past the end"),
        (MAGIC + bytes([0, 8, 1, 0]) + b"\x00" * 8, "CRC flag but HeaderLen 8"),
        (MAGIC + bytes([0, 12, 1, 0]) + b"\x00\x00\x00\x00" + b"abc", "CRC-32C mismatch"),
        (MAGIC + bytes([0, 8, 0, 15]), "unknown envelope message type 15"),
        (MAGIC + bytes([0, 8, 0, 255]), "unknown envelope message type 255"),
    ],
)
def test_malformed_envelopes_name_the_cause(data: bytes, cause: str) -> None:
    with pytest.raises(EnvelopeError, match=cause):
        envelope.decode(data)


def test_envelope_error_is_a_value_error_and_a_liftbridge_error() -> None:
    from liftbridge_nats import LiftbridgeError

    assert issubclass(EnvelopeError, ValueError)
    assert issubclass(EnvelopeError, LiftbridgeError)


def test_looks_like_envelope() -> None:
    assert envelope.looks_like_envelope(envelope.encode(MsgType.PUBLISH, b"v"))
    assert not envelope.looks_like_envelope(b"plain nats payload")
    assert not envelope.looks_like_envelope(MAGIC)  # shorter than a header
    assert not envelope.looks_like_envelope(b"")


@given(
    msg_type=st.sampled_from(list(MsgType)),
    payload=st.binary(max_size=2048),
    crc=st.booleans(),
)
def test_round_trip(msg_type: MsgType, payload: bytes, crc: bool) -> None:
    env = envelope.decode(envelope.encode(msg_type, payload, crc=crc))
    assert env.msg_type is msg_type
    assert bytes(env.payload) == payload
    assert (env.crc is not None) is crc
    assert env.header_len == (12 if crc else 8)


@given(payload=st.binary(min_size=1, max_size=256), flip=st.integers(min_value=0))
def test_any_corrupted_payload_byte_fails_the_crc(payload: bytes, flip: int) -> None:
    data = bytearray(envelope.encode(MsgType.PUBLISH, payload, crc=True))
    index = 12 + flip % len(payload)
    data[index] ^= 0xFF
    with pytest.raises(EnvelopeError, match="CRC-32C mismatch"):
        envelope.decode(bytes(data))


@settings(max_examples=3000)
@given(st.binary(max_size=64))
def test_random_bytes_raise_only_envelope_error(data: bytes) -> None:
    with contextlib.suppress(EnvelopeError):
        envelope.decode(data)


@settings(max_examples=3000)
@given(
    version=st.integers(0, 255),
    header_len=st.integers(0, 255),
    flags=st.integers(0, 255),
    msg_type=st.integers(0, 255),
    rest=st.binary(max_size=32),
)
def test_garbage_after_valid_magic_raises_only_envelope_error(
    version: int, header_len: int, flags: int, msg_type: int, rest: bytes
) -> None:
    data = MAGIC + bytes([version, header_len, flags, msg_type]) + rest
    try:
        envelope.decode(data)
    except EnvelopeError:
        return
    assert version == 0 and 8 <= header_len <= len(data) and msg_type < 15


def test_encode_refuses_unknown_types() -> None:
    with pytest.raises(EnvelopeError, match="unknown envelope message type 99"):
        envelope.encode(99, b"x")  # type: ignore[arg-type]
    # A plain int that names a known type is accepted too, though the signature asks for
    # a MsgType.
    assert envelope.encode(1, b"x") == envelope.encode(MsgType.ACK, b"x")  # type: ignore[arg-type]
