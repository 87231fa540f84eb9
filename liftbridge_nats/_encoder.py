"""The publisher's envelope encoder: :func:`liftbridge_nats.wire.encode_publish`, specialised.

A publisher sends every message with the same ack inbox and, almost always, with no
expected offset. Those bytes (envelope header, the ``offset = -1`` field, the ack-inbox
field, the ack-policy field) are computed once per publisher, so encoding one message
is a single ``bytes`` formatting call. The result is byte-for-byte what
``encode_publish`` produces for the same arguments (the unit tests check it, and parse
it back with the protobuf library).
"""

from __future__ import annotations

from collections.abc import Mapping

from .envelope import MsgType, header
from .messages import AckPolicy
from .wire import NO_OFFSET_CHECK, varint

__all__ = ["PublishEncoder"]

# Single-byte varints cover every length below 128, the common case for keys and
# correlation ids (and for small values).
_SMALL_VARINTS = tuple(bytes((n,)) for n in range(128))

_TAG_OFFSET = b"\x08"
_TAG_KEY = b"\x12"
_TAG_VALUE = b"\x1a"
_TAG_HEADER = b"\x4a"
_TAG_ACK_INBOX = b"\x52"
_TAG_CORRELATION_ID = b"\x5a"
_TAG_ACK_POLICY = b"\x60"


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


# prefix (header + offset -1), value, ack inbox, correlation id, ack policy.
_COMMON_BODY = b"%b" + _TAG_VALUE + b"%b%b%b" + _TAG_CORRELATION_ID + b"%b%b%b"


class PublishEncoder:
    """Encodes type-0 envelopes for one ack inbox; ``crc`` adds the CRC-32C."""

    __slots__ = ("_crc", "_inbox_field", "_plain_prefix", "_policy_fields")

    def __init__(self, ack_inbox: str, *, crc: bool = False) -> None:
        self._crc = crc
        self._inbox_field = _field(_TAG_ACK_INBOX, ack_inbox.encode()) if ack_inbox else b""
        offset_field = _TAG_OFFSET + varint(NO_OFFSET_CHECK)
        # Without a CRC the header is constant and can lead the precomputed prefix.
        self._plain_prefix = (b"" if crc else header(MsgType.PUBLISH)) + offset_field
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

    def _common_body(self, value: bytes, correlation_id: bytes, ack_policy: AckPolicy) -> bytes:
        size = len(value)
        cid_size = len(correlation_id)
        return _COMMON_BODY % (
            self._plain_prefix,
            _SMALL_VARINTS[size] if size < 128 else _length(size),
            value,
            self._inbox_field,
            _SMALL_VARINTS[cid_size] if cid_size < 128 else _length(cid_size),
            correlation_id,
            self._policy_fields[ack_policy],
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
        # Field order follows the schema numbers, as protobuf serialisers (and
        # encode_publish) write them: offset 1, key 2, value 3, headers 9, inbox 10,
        # correlation id 11, ack policy 12.
        if expected_offset is None:
            parts = [self._plain_prefix]
        else:
            start = b"" if self._crc else header(MsgType.PUBLISH)
            parts = [start + _TAG_OFFSET + varint(expected_offset)]
        if key:
            parts.append(_field(_TAG_KEY, key))
        if value:
            parts.append(_field(_TAG_VALUE, value))
        if headers:
            for name, data in headers.items():
                entry = _field(b"\x0a", name.encode()) + _field(b"\x12", data)
                parts.append(_field(_TAG_HEADER, entry))
        parts.append(self._inbox_field)
        if correlation_id:
            parts.append(_field(_TAG_CORRELATION_ID, correlation_id))
        parts.append(self._policy_fields[ack_policy])
        return b"".join(parts)
