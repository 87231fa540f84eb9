"""Envelope payloads: publish messages out, acks (and published messages) in.

Sans-IO like :mod:`liftbridge_nats.envelope`. Publish messages are assembled directly
as protobuf bytes by :class:`PublishEncoder`, the one Message encoder of the package:
the schema is small and fixed, and building bytes skips a protobuf object per message
on the hot path. The test suite checks the result against
the protobuf library, an independent implementation of the same schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, SupportsIndex

from google.protobuf.message import DecodeError

from ._errors import EnvelopeError
from ._messages import Ack, AckError, AckPolicy, Message
from ._proto import api_pb2
from .envelope import MsgType, decode, header

__all__ = [
    "NO_OFFSET_CHECK",
    "PublishEncoder",
    "PublishedMessage",
    "ack_from_proto",
    "ack_view",
    "decode_ack",
    "decode_ack_payload",
    "decode_publish",
    "encode_publish",
    "header_fields",
    "message_from_proto",
    "partition_of",
    "varint",
]

NO_OFFSET_CHECK = -1
"""The expected offset that means "no check", sent unless the caller asks for an offset
(proto3's default 0 would mean "store only at offset 0")."""
_UINT64 = 1 << 64


def varint(value: int) -> bytes:
    """Protobuf base-128 varint; negative int64 values take their 64-bit two's complement."""
    if value < 0:
        value += _UINT64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_NO_CHECK_FIELD = b"\x08" + varint(NO_OFFSET_CHECK)


_TAG_OFFSET = b"\x08"
_TAG_KEY = b"\x12"
_TAG_VALUE = b"\x1a"
_TAG_HEADER = b"\x4a"
_TAG_HEADER_NAME = b"\x0a"
_TAG_HEADER_VALUE = b"\x12"
_TAG_ACK_INBOX = b"\x52"
_TAG_CORRELATION_ID = b"\x5a"
_TAG_ACK_POLICY = b"\x60"

# Single-byte varints cover every length below 128, the common case for keys and
# correlation ids (and for small values).
_SMALL_VARINTS = tuple(bytes((n,)) for n in range(128))
# Longer lengths repeat too (a publisher's values often share a size): remember them.
_VARINT_CACHE: dict[int, bytes] = {}
_VARINT_CACHE_LIMIT = 4096


def _length(n: int) -> bytes:
    if n < 128:
        return _SMALL_VARINTS[n]
    encoded = _VARINT_CACHE.get(n)
    if encoded is None:
        if len(_VARINT_CACHE) >= _VARINT_CACHE_LIMIT:
            _VARINT_CACHE.clear()
        encoded = _VARINT_CACHE[n] = varint(n)
    return encoded


def _field(tag: bytes, data: bytes) -> bytes:
    return tag + _length(len(data)) + data


_join = b"".join
_PLAIN_HEADER = header(MsgType.PUBLISH)


class PublishEncoder:
    """The one encoder of type-0 envelopes (protobuf ``Message``), for one ack inbox.

    A publisher sends every message with the same ack inbox and, almost always, with
    no expected offset: those bytes (envelope header, the ``offset = -1`` field, the
    ack-inbox field, the ack-policy field) are computed once, so encoding a plain
    message is one ``bytes.join`` of its pieces (one allocation, each piece copied
    once). ``crc`` adds the CRC-32C.
    """

    __slots__ = (
        "_cid_lead",
        "_crc",
        "_inbox_field",
        "_key_lead",
        "_plain_prefix",
        "_policy_fields",
        "_value_lead",
    )

    def __init__(self, ack_inbox: str = "", *, crc: bool = False) -> None:
        self._crc = crc
        self._inbox_field = _field(_TAG_ACK_INBOX, ack_inbox.encode()) if ack_inbox else b""
        # Without a CRC the header is constant and can lead the precomputed prefix.
        self._plain_prefix = (b"" if crc else _PLAIN_HEADER) + _NO_CHECK_FIELD
        # The constant bytes before a plain message's value length and before its
        # correlation id's length (fields in schema order: offset, value, ack inbox,
        # correlation id).
        self._value_lead = self._plain_prefix + _TAG_VALUE
        self._key_lead = self._plain_prefix + _TAG_KEY
        self._cid_lead = self._inbox_field + _TAG_CORRELATION_ID
        # proto3 omits a field holding its default (LEADER = 0).
        self._policy_fields = {
            policy: (_TAG_ACK_POLICY + varint(int(policy)) if policy else b"")
            for policy in AckPolicy
        }

    def encode(
        self,
        value: bytes,
        correlation_id: bytes,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
    ) -> bytes:
        """Return the whole envelope for one message (header included)."""
        if key or headers or not value or not correlation_id or expected_offset is not None:
            body = self._general_body(
                value, correlation_id, key, headers, ack_policy, expected_offset
            )
        else:
            body = self._common_body(value, correlation_id, ack_policy)
        if self._crc:
            return header(MsgType.PUBLISH, body, crc=True) + body
        return body

    def encode_plain(self, value: bytes, correlation_id: bytes, ack_policy: AckPolicy) -> bytes:
        """:meth:`encode` for a message with a value, a correlation id and nothing else."""
        if self._crc or not value or not correlation_id:
            return self.encode(value, correlation_id, ack_policy=ack_policy)
        return self._common_body(value, correlation_id, ack_policy)

    def encode_keyed(
        self,
        value: bytes,
        correlation_id: bytes,
        key: bytes | None,
        header_fields: bytes,
        ack_policy: AckPolicy,
    ) -> bytes:
        """:meth:`encode` for a message with a value, a correlation id, a key and/or
        headers already encoded by :func:`header_fields` (no CRC: see :meth:`encode`)."""
        if self._crc or not value or not correlation_id:
            raise ValueError("encode_keyed takes a value and a correlation id, without CRC")
        size = len(value)
        cid_size = len(correlation_id)
        if key:
            key_size = len(key)
            lead = self._key_lead
            key_length = _SMALL_VARINTS[key_size] if key_size < 128 else _length(key_size)
        else:
            lead, key_length, key = self._plain_prefix, b"", b""
        return _join(
            (
                lead,
                key_length,
                key,
                _TAG_VALUE,
                _SMALL_VARINTS[size] if size < 128 else _length(size),
                value,
                header_fields,
                self._cid_lead,
                _SMALL_VARINTS[cid_size] if cid_size < 128 else _length(cid_size),
                correlation_id,
                self._policy_fields[ack_policy],
            )
        )

    def _common_body(self, value: bytes, correlation_id: bytes, ack_policy: AckPolicy) -> bytes:
        size = len(value)
        cid_size = len(correlation_id)
        return _join(
            (
                self._value_lead,
                _SMALL_VARINTS[size] if size < 128 else _length(size),
                value,
                self._cid_lead,
                _SMALL_VARINTS[cid_size] if cid_size < 128 else _length(cid_size),
                correlation_id,
                self._policy_fields[ack_policy],
            )
        )

    def _general_body(
        self,
        value: bytes,
        correlation_id: bytes,
        key: bytes | None,
        headers: Mapping[str, bytes] | None,
        ack_policy: AckPolicy,
        expected_offset: int | None,
    ) -> bytes:
        # Field order follows the schema numbers, as protobuf serialisers write them:
        # offset 1, key 2, value 3, headers 9, inbox 10, correlation id 11, policy 12.
        if expected_offset is None:
            parts = [self._plain_prefix]
        else:
            start = b"" if self._crc else _PLAIN_HEADER
            parts = [start + _TAG_OFFSET + varint(expected_offset)]
        if key:
            parts.append(_field(_TAG_KEY, key))
        if value:
            parts.append(_field(_TAG_VALUE, value))
        if headers:
            parts.append(header_fields(headers))
        parts.append(self._inbox_field)
        if correlation_id:
            parts.append(_field(_TAG_CORRELATION_ID, correlation_id))
        parts.append(self._policy_fields[ack_policy])
        return b"".join(parts)


def header_fields(headers: Mapping[str, bytes]) -> bytes:
    """The protobuf fields of a Message's headers map (names and values unchecked)."""
    out = b""
    for name, data in headers.items():
        encoded = name.encode()
        n, d = len(encoded), len(data)
        # A map entry is a message of two fields (name 1, value 2) behind its own tag
        # and length. Below 128 bytes every length is one byte and the entry's length
        # is known at once: one join per header, no intermediate pieces.
        if n + d < 124:
            out += _join(
                (
                    _TAG_HEADER,
                    _SMALL_VARINTS[n + d + 4],
                    _TAG_HEADER_NAME,
                    _SMALL_VARINTS[n],
                    encoded,
                    _TAG_HEADER_VALUE,
                    _SMALL_VARINTS[d],
                    data,
                )
            )
        else:
            entry = _field(_TAG_HEADER_NAME, encoded) + _field(_TAG_HEADER_VALUE, data)
            out += _field(_TAG_HEADER, entry)
    return out


def encode_publish(
    value: bytes,
    *,
    key: bytes | None = None,
    headers: Mapping[str, bytes] | None = None,
    ack_inbox: str = "",
    correlation_id: str = "",
    ack_policy: AckPolicy = AckPolicy.LEADER,
    expected_offset: int | None = None,
    crc: bool = False,
) -> bytes:
    """Build a complete type-0 envelope carrying a protobuf ``Message``.

    ``expected_offset`` None sends -1 ("no check") so that streams with optimistic
    concurrency control accept the message; proto3's default 0 would mean "expect 0".
    (:class:`PublishEncoder` does the work; a publisher keeps one per ack inbox.)
    """
    return PublishEncoder(ack_inbox, crc=crc).encode(
        value, correlation_id.encode(), key, headers, ack_policy, expected_offset
    )


def _parse(message: api_pb2.Ack | api_pb2.Message, payload: bytes | memoryview, what: str) -> None:
    try:
        message.ParseFromString(payload)  # type: ignore[arg-type]  # accepts any buffer
    except DecodeError as exc:
        raise EnvelopeError(f"{what} payload is not a valid protobuf {what}: {exc}") from None


_POLICIES = tuple(AckPolicy)
_ERRORS = tuple(AckError)
_POLICY_COUNT = len(_POLICIES)
_ERROR_COUNT = len(_ERRORS)

# Ack is a frozen dataclass with slots. Filling its slots through their descriptors
# skips the frozen __setattr__ guard the generated __init__ goes through field by field;
# the result is an ordinary, equal, immutable Ack, built in a fraction of the time: this
# runs once per acked message on the publish path.
_new_ack = object.__new__
(
    _set_stream,
    _set_partition,
    _set_partition_subject,
    _set_message_subject,
    _set_offset,
    _set_ack_inbox,
    _set_correlation_id,
    _set_ack_policy,
    _set_reception_timestamp,
    _set_commit_timestamp,
    _set_error,
) = (getattr(Ack, name).__set__ for name in Ack.__slots__)
assert Ack.__slots__ == (
    "stream",
    "partition",
    "partition_subject",
    "message_subject",
    "offset",
    "ack_inbox",
    "correlation_id",
    "ack_policy",
    "reception_timestamp",
    "commit_timestamp",
    "error",
), "messages.Ack changed its fields: update wire.ack_from_proto"


def ack_from_proto(
    pb: api_pb2.Ack, correlation_id: str | None = None, ack_inbox: str | None = None
) -> Ack:
    """Build the public :class:`Ack` from a parsed protobuf ack.

    Lenient about enum values from a newer server (unknown policy reads as LEADER,
    unknown error as UNKNOWN); :func:`decode_ack_payload` is the strict decoder.
    ``correlation_id`` and ``ack_inbox``: values the caller already holds (equal to the
    protobuf's), which spares reading them again on the publisher's hot path.
    """
    ack: Ack = _new_ack(Ack)
    _fill(
        ack,
        pb,
        pb.correlationId if correlation_id is None else correlation_id,
        pb.ackInbox if ack_inbox is None else ack_inbox,
    )
    return ack


def partition_of(stream_subject: str, message_subject: str) -> int:
    """The partition number of a stream recording ``stream_subject`` that a message
    published on ``message_subject`` went to.

    Partition 0 listens on the stream's subject, partition N on ``<subject>.N``; with
    a ``*`` wildcard the subjects have as many tokens (partition 0), or one more whose
    last token is N. A stream whose subject ends in ``>`` has one partition.
    """
    if message_subject == stream_subject:
        return 0
    head, dot, tail = message_subject.rpartition(".")
    if (
        dot
        and tail.isdigit()
        and tail.isascii()
        and head.count(".") == stream_subject.count(".")
        and not stream_subject.endswith(">")
    ):
        return int(tail)
    return 0


def _fill(ack: Ack, pb: api_pb2.Ack, correlation_id: str, ack_inbox: str) -> None:
    policy = pb.ackPolicy
    error = pb.ackError
    # v1.9.0 sends the stream's subject as partitionSubject, for every partition.
    stream_subject = pb.partitionSubject
    message_subject = pb.msgSubject
    _set_stream(ack, pb.stream)
    _set_partition(ack, partition_of(stream_subject, message_subject))
    _set_partition_subject(ack, stream_subject)
    _set_message_subject(ack, message_subject)
    _set_offset(ack, pb.offset)
    _set_ack_inbox(ack, ack_inbox)
    _set_correlation_id(ack, correlation_id)
    _set_ack_policy(ack, _POLICIES[policy] if 0 <= policy < _POLICY_COUNT else AckPolicy.LEADER)
    _set_reception_timestamp(ack, pb.receptionTimestamp)
    _set_commit_timestamp(ack, pb.commitTimestamp)
    _set_error(ack, _ERRORS[error] if 0 <= error < _ERROR_COUNT else AckError.UNKNOWN)


class _AckView(Ack):
    """An :class:`Ack` whose fields are read from its protobuf (or its bytes) on first access.

    The publisher resolves a future with one for every ack: many callers never look
    at the ack, and filling its fields costs about as much as parsing the protobuf.
    The protobuf (or its bytes) waits in the first slot; the first access of any field
    (or equality, hash, repr, pickling, copying) fills every slot from it and turns the
    object into a plain :class:`Ack` (same layout, so ``__class__`` can change), which
    it then stays.

    The publisher keeps the bytes, not the protobuf its ack listener parsed: callers
    keep their acks (``asyncio.gather`` holds all of a burst's until the last one), and
    a parsed protobuf is one more object per ack for the garbage collector to scan,
    again and again while they live; bytes are not scanned. A caller that reads the ack
    pays a second parse instead, on its first field read (``ack.view_read`` of ``make
    bench-micro``).
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        _materialize(self)
        return self == other

    def __hash__(self) -> int:
        _materialize(self)
        return hash(self)

    def __repr__(self) -> str:
        _materialize(self)
        return repr(self)

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        _materialize(self)
        return self.__reduce_ex__(protocol)


_get_source = vars(Ack)["stream"].__get__  # the slot itself, under _AckView's property
_parse_ack = api_pb2.Ack.FromString


def _materialize(view: Ack) -> None:
    if type(view) is _AckView:
        source = _get_source(view)
        pb = _parse_ack(source) if type(source) is bytes else source
        _fill(view, pb, pb.correlationId, pb.ackInbox)
        object.__setattr__(view, "__class__", Ack)


def _field_reader(name: str) -> property:
    def read(self: Ack) -> Any:
        _materialize(self)
        return getattr(self, name)

    return property(read, doc=f"The ack's {name} (read from the protobuf on first access).")


for _name in Ack.__slots__:
    setattr(_AckView, _name, _field_reader(_name))


def ack_view(source: api_pb2.Ack | bytes) -> Ack:
    """An :class:`Ack` for a parsed protobuf ``Ack`` (handed over for good: not to be
    parsed into again) or its serialized bytes (which must parse: parse them first to
    check), whose fields are read on first access; until then only ``type()`` tells it
    from :func:`ack_from_proto`'s. Bytes are parsed again then, and until then the
    garbage collector has no protobuf object to scan."""
    view: Ack = _new_ack(_AckView)
    _set_stream(view, source)
    return view


def decode_ack_payload(payload: bytes | memoryview) -> Ack:
    """Parse the protobuf ``Ack`` carried by a type-1 envelope; unknown enum values
    raise :class:`EnvelopeError`."""
    pb = api_pb2.Ack()
    _parse(pb, payload, "Ack")
    if not (0 <= pb.ackPolicy < _POLICY_COUNT and 0 <= pb.ackError < _ERROR_COUNT):
        raise EnvelopeError(
            f"Ack carries an unknown enum value: ackPolicy={pb.ackPolicy}, ackError={pb.ackError}"
        )
    return ack_from_proto(pb)


def decode_ack(data: bytes | bytearray | memoryview) -> Ack:
    """Decode a whole type-1 envelope into an :class:`Ack`; EnvelopeError otherwise."""
    env = decode(data)
    if env.msg_type is not MsgType.ACK:
        raise EnvelopeError(f"expected an ACK envelope, got {env.msg_type.name}")
    return decode_ack_payload(env.payload)


# The same for Message, built once per message a subscription reads.
_new_message = object.__new__
(
    _set_msg_stream,
    _set_msg_partition,
    _set_msg_offset,
    _set_msg_value,
    _set_msg_key,
    _set_msg_timestamp,
    _set_msg_subject,
    _set_msg_reply_subject,
    _set_msg_headers,
) = (getattr(Message, name).__set__ for name in Message.__slots__)
assert Message.__slots__ == (
    "stream",
    "partition",
    "offset",
    "value",
    "key",
    "timestamp",
    "subject",
    "reply_subject",
    "headers",
), "messages.Message changed its fields: update wire.message_from_proto"


def message_from_proto(pb: api_pb2.Message) -> Message:
    """Turn a protobuf ``Message`` (as Subscribe streams it) into a public :class:`Message`."""
    msg: Message = _new_message(Message)
    _set_msg_stream(msg, pb.stream)
    _set_msg_partition(msg, pb.partition)
    _set_msg_offset(msg, pb.offset)
    _set_msg_value(msg, pb.value)
    _set_msg_key(msg, pb.key or None)
    _set_msg_timestamp(msg, pb.timestamp)
    _set_msg_subject(msg, pb.subject)
    _set_msg_reply_subject(msg, pb.replySubject)
    headers = pb.headers
    # The server adds headers to every message; a comprehension copies the protobuf
    # map in half the time dict() takes.
    _set_msg_headers(msg, {name: headers[name] for name in headers} if headers else {})
    return msg


@dataclass(frozen=True, slots=True)
class PublishedMessage:
    """What a type-0 envelope carries, as a publisher sent it."""

    message: Message
    ack_inbox: str
    correlation_id: str
    ack_policy: AckPolicy
    expected_offset: int


def decode_publish(data: bytes | bytearray | memoryview) -> PublishedMessage:
    """Decode a type-0 envelope. Used by tests and tools that inspect what publishers send."""
    env = decode(data)
    if env.msg_type is not MsgType.PUBLISH:
        raise EnvelopeError(f"expected a PUBLISH envelope, got {env.msg_type.name}")
    pb = api_pb2.Message()
    _parse(pb, env.payload, "Message")
    try:
        policy = AckPolicy(pb.ackPolicy)
    except ValueError as exc:
        raise EnvelopeError(f"Message carries an unknown ack policy: {exc}") from None
    return PublishedMessage(
        message_from_proto(pb), pb.ackInbox, pb.correlationId, policy, pb.offset
    )
