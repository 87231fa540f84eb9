"""The Liftbridge envelope: a sans-IO codec for the header that wraps every Liftbridge
message carried over NATS.

No sockets, no asyncio: bytes in, bytes or frozen objects out. Layout (big-endian)::

    0-3  magic  B9 0E 43 B4
    4    version (only 0 exists)
    5    HeaderLen: offset of the payload, 8, or 12 with a CRC
    6    flags: bit 0 = CRC-32C present
    7    MsgType
    8-11 CRC-32C (Castagnoli) of the payload, when flagged

A NATS message without the magic number is a plain value, not an envelope.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import crc32c as _crc32c

from ._errors import EnvelopeError

__all__ = [
    "CRC_HEADER_LEN",
    "HEADER_LEN",
    "MAGIC",
    "VERSION",
    "Envelope",
    "EnvelopeError",
    "MsgType",
    "decode",
    "encode",
    "header",
    "looks_like_envelope",
]

MAGIC = b"\xb9\x0e\x43\xb4"
"""The four bytes that open every envelope; a NATS message without them is a plain value."""
VERSION = 0
"""The envelope version: 0 is the only one, and :func:`decode` refuses any other."""
HEADER_LEN = 8
"""Length of a header without a CRC-32C: where the payload starts."""
CRC_HEADER_LEN = 12
"""Length of a header with a CRC-32C of the payload."""
FLAG_CRC = 0x01

_CRC = struct.Struct(">I")


class MsgType(IntEnum):
    """Envelope message types. Only PUBLISH and ACK are meant for clients."""

    PUBLISH = 0
    ACK = 1
    REPLICATION_REQUEST = 2
    REPLICATION_RESPONSE = 3
    RAFT_JOIN_REQUEST = 4
    RAFT_JOIN_RESPONSE = 5
    LEADER_EPOCH_OFFSET_REQUEST = 6
    LEADER_EPOCH_OFFSET_RESPONSE = 7
    PROPAGATED_REQUEST = 8
    PROPAGATED_RESPONSE = 9
    SERVER_INFO_REQUEST = 10
    SERVER_INFO_RESPONSE = 11
    PARTITION_STATUS_REQUEST = 12
    PARTITION_STATUS_RESPONSE = 13
    PARTITION_NOTIFICATION = 14

    @property
    def is_internal(self) -> bool:
        """True for the types that Liftbridge servers exchange among themselves."""
        return self > MsgType.ACK


_MAX_TYPE = max(MsgType)
# The header of a CRC-less envelope depends only on the type, so it is built once.
_PLAIN_HEADERS = {t: MAGIC + bytes((VERSION, HEADER_LEN, 0, t)) for t in MsgType}
_CRC_PREFIXES = {t: MAGIC + bytes((VERSION, CRC_HEADER_LEN, FLAG_CRC, t)) for t in MsgType}


@dataclass(frozen=True, slots=True)
class Envelope:
    """A decoded envelope. ``payload`` is a memoryview into the decoded bytes."""

    version: int
    header_len: int
    flags: int
    msg_type: MsgType
    crc: int | None
    payload: memoryview


def header(
    msg_type: MsgType, payload: bytes | memoryview | None = None, *, crc: bool = False
) -> bytes:
    """Return just the header bytes for ``payload`` (CRC-32C included when ``crc``)."""
    try:
        if not crc:
            return _PLAIN_HEADERS[msg_type]
        prefix = _CRC_PREFIXES[msg_type]
    except KeyError:
        raise EnvelopeError(f"unknown envelope message type {msg_type!r}; use a MsgType") from None
    if payload is None:
        raise EnvelopeError("a CRC header needs the payload to checksum")
    return prefix + _CRC.pack(_crc32c.crc32c(payload))


def encode(msg_type: MsgType, payload: bytes | memoryview, *, crc: bool = False) -> bytes:
    """Wrap ``payload`` in an envelope of type ``msg_type``; ``crc`` adds a CRC-32C."""
    return header(msg_type, payload, crc=crc) + payload


def looks_like_envelope(data: bytes | bytearray | memoryview) -> bool:
    """Tell an enveloped message from a plain NATS payload (which Liftbridge stores as is)."""
    return len(data) >= HEADER_LEN and data[:4] == MAGIC


def decode(data: bytes | bytearray | memoryview) -> Envelope:
    """Parse an envelope; raise :class:`EnvelopeError` naming the cause when it is invalid."""
    n = len(data)
    if n < HEADER_LEN:
        raise EnvelopeError(f"envelope too short: {n} bytes, the header alone is {HEADER_LEN}")
    if data[:4] != MAGIC:
        raise EnvelopeError("not a Liftbridge envelope: wrong magic number")
    version, header_len, flags, raw_type = data[4], data[5], data[6], data[7]
    if version != VERSION:
        raise EnvelopeError(f"unsupported envelope version {version}; only version 0 exists")
    if header_len < HEADER_LEN:
        raise EnvelopeError(f"envelope HeaderLen {header_len} is below the minimum of {HEADER_LEN}")
    if header_len > n:
        raise EnvelopeError(f"envelope HeaderLen {header_len} points past the end ({n} bytes)")
    if raw_type > _MAX_TYPE:
        raise EnvelopeError(f"unknown envelope message type {raw_type}")
    view = memoryview(data)
    payload = view[header_len:]
    checksum: int | None = None
    if flags & FLAG_CRC:
        if header_len != CRC_HEADER_LEN:
            raise EnvelopeError(
                f"envelope has the CRC flag but HeaderLen {header_len}; it must be {CRC_HEADER_LEN}"
            )
        checksum = _CRC.unpack_from(view, HEADER_LEN)[0]
        actual = _crc32c.crc32c(payload)
        if actual != checksum:
            raise EnvelopeError(
                f"envelope CRC-32C mismatch: header says {checksum:#010x}, payload has {actual:#010x}"
            )
    return Envelope(version, header_len, flags, MsgType(raw_type), checksum, payload)
