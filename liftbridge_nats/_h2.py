"""HTTP/2 (RFC 9113) client side for gRPC server-streaming calls, sans-IO.

Why our own: Liftbridge streams a partition as one gRPC message per stored message,
and grpcio's Python layer alone costs about 5 us of CPU per message (a synchronous
call iterated by a thread of its own) to about 20 us (grpc.aio), before anything is
done with it (the subscribe peers of ``make bench`` measure both). Read straight off
the socket, a message is a frame header, a slice and a protobuf parse: the SDK
delivers one in about half the CPU the bare synchronous call needs, on the event
loop, with every call to a broker multiplexed on one connection and no thread.

This module knows no sockets and no asyncio. :class:`H2Connection` takes the bytes a
connection received (:meth:`~H2Connection.receive`) and leaves the bytes to send in
:attr:`~H2Connection.outbox`. Each call has an owner (:class:`CallOwner`) that gets
the call's gRPC messages (bodies, without their 5-byte prefix) appended to its buffer,
one wake-up per received chunk, and the call's end as a gRPC status code and message.

What it supports is what a gRPC client of server-streaming calls needs: a request is
a HEADERS frame and one DATA frame; responses may use any HPACK feature, padding,
CONTINUATION frames; PING and SETTINGS are answered; GOAWAY drains the connection.
Flow control is left to the owners on the receive side (they return window as their
consumer takes messages, see :meth:`~H2Connection.grant`), while the connection
window is kept wide open: per-call windows bound memory, and one slow call must not
hold back the others sharing the connection.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final, Protocol
from urllib.parse import unquote

from ._hpack import HpackDecoder, HpackError, encode_headers

__all__ = [
    "CallOwner",
    "H2Connection",
    "H2ProtocolError",
    "Status",
]

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types.
DATA: Final = 0x0
HEADERS: Final = 0x1
PRIORITY: Final = 0x2
RST_STREAM: Final = 0x3
SETTINGS: Final = 0x4
PUSH_PROMISE: Final = 0x5
PING: Final = 0x6
GOAWAY: Final = 0x7
WINDOW_UPDATE: Final = 0x8
CONTINUATION: Final = 0x9

# Flags.
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY_FLAG: Final = 0x20

# Settings.
SETTINGS_HEADER_TABLE_SIZE: Final = 0x1
SETTINGS_ENABLE_PUSH: Final = 0x2
SETTINGS_MAX_CONCURRENT_STREAMS: Final = 0x3
SETTINGS_INITIAL_WINDOW_SIZE: Final = 0x4
SETTINGS_MAX_FRAME_SIZE: Final = 0x5

# Error codes.
NO_ERROR: Final = 0x0
PROTOCOL_ERROR: Final = 0x1
INTERNAL_ERROR: Final = 0x2
FLOW_CONTROL_ERROR: Final = 0x3
REFUSED_STREAM: Final = 0x7
CANCEL: Final = 0x8
COMPRESSION_ERROR: Final = 0x9
ENHANCE_YOUR_CALM: Final = 0xB
INADEQUATE_SECURITY: Final = 0xC

DEFAULT_WINDOW: Final = 65_535
MAX_WINDOW: Final = 2**31 - 1
DEFAULT_MAX_FRAME: Final = 16_384
MAX_STREAM_ID: Final = 2**31 - 1

# gRPC status codes (as numbers: this module imports no gRPC).
OK: Final = 0
CANCELLED: Final = 1
UNKNOWN: Final = 2
RESOURCE_EXHAUSTED: Final = 8
INTERNAL: Final = 13
UNAVAILABLE: Final = 14
UNAUTHENTICATED: Final = 16
PERMISSION_DENIED: Final = 7
UNIMPLEMENTED: Final = 12

_FRAME: Final = struct.Struct(">IBL")  # length (24 bits) + type, flags, stream id
_U32: Final = struct.Struct(">L")
_SETTING: Final = struct.Struct(">HL")
_GOAWAY: Final = struct.Struct(">LL")

# How RST_STREAM codes read as gRPC statuses (gRPC's HTTP/2 mapping, except that
# ENHANCE_YOUR_CALM reads as UNAVAILABLE: a reader takes RESOURCE_EXHAUSTED for "the
# stop position was reached", and being told to calm down is no reason to stop).
_RESET_STATUS: Final = {
    NO_ERROR: INTERNAL,
    REFUSED_STREAM: UNAVAILABLE,
    CANCEL: CANCELLED,
    ENHANCE_YOUR_CALM: UNAVAILABLE,
    INADEQUATE_SECURITY: PERMISSION_DENIED,
}
# gRPC's mapping of HTTP statuses for a response that is not 200.
_HTTP_STATUS: Final = {
    400: INTERNAL,
    401: UNAUTHENTICATED,
    403: PERMISSION_DENIED,
    404: UNIMPLEMENTED,
    429: UNAVAILABLE,
    502: UNAVAILABLE,
    503: UNAVAILABLE,
    504: UNAVAILABLE,
}


class H2ProtocolError(Exception):
    """The peer broke HTTP/2 (a connection error): the connection must be dropped."""

    def __init__(self, message: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


class Status:
    """How a call ended: a gRPC status code (a number) and message.

    ``local`` marks a call this side ended because it could not read what the server
    sent (a compressed or oversized message): no retry will read it either.
    """

    __slots__ = ("code", "details", "local")

    def __init__(self, code: int, details: str, *, local: bool = False) -> None:
        self.code = code
        self.details = details
        self.local = local

    def __repr__(self) -> str:
        return f"Status({self.code}, {self.details!r}, local={self.local})"


class CallOwner(Protocol):
    """What a call's owner gives the connection."""

    def h2_append(self, body: bytes) -> None:
        """Take one gRPC message body (called once per message, in order)."""

    def h2_wake(self) -> None:
        """Messages were appended during the current :meth:`H2Connection.receive`."""

    def h2_need(self, size: int) -> None:
        """A message of ``size`` bytes (prefix included) is arriving in pieces: the
        window must let all of it through once the buffer is drained."""

    def h2_end(self, status: Status) -> None:
        """The call ended (called once, after its last message)."""


def frame(ftype: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame: header and payload."""
    return _FRAME.pack((len(payload) << 8) | ftype, flags, stream_id) + payload


def message(body: bytes) -> bytes:
    """A gRPC length-prefixed message (uncompressed)."""
    return b"\x00" + _U32.pack(len(body)) + body


class _Call:
    __slots__ = ("append", "block", "headers_seen", "id", "owner", "partial", "woken")

    def __init__(self, stream_id: int, owner: CallOwner) -> None:
        self.id = stream_id
        self.owner = owner
        self.append: Callable[[bytes], None] = owner.h2_append
        # Bytes of a gRPC message split across DATA frames.
        self.partial = bytearray()
        self.headers_seen = False
        self.block = bytearray()  # a header block waiting for CONTINUATION frames
        self.woken = False


class H2Connection:
    """One HTTP/2 connection carrying gRPC server-streaming calls (client side).

    ``authority`` and ``scheme`` go into every request. ``max_message`` bounds one
    gRPC message (a larger one ends its call, see :class:`Status`). Every call starts
    with ``initial_window`` and is opened to the window its owner asks for at once.
    """

    def __init__(
        self,
        authority: str,
        *,
        scheme: str = "http",
        max_message: int = 64 * 1024 * 1024,
        user_agent: str = "liftbridge-nats",
        initial_window: int = 16 * 1024,
    ) -> None:
        self.outbox = bytearray()
        self._initial_window = initial_window
        self._authority = authority
        self._scheme = scheme
        self._max_message = max_message
        self._user_agent = user_agent
        self._calls: dict[int, _Call] = {}
        self._next_id = 1
        self._rest = b""
        self._decoder = HpackDecoder()
        self._peer_max_frame = DEFAULT_MAX_FRAME
        self._peer_max_streams = 2**32
        # Continuation of a header block: the call it belongs to, or -1 for a block
        # of a call we no longer track (it must still be decoded: HPACK has state).
        self._continuing: int | None = None
        self._orphan_block = bytearray()
        self._block_end = False
        self._received_since_update = 0
        self._woken: list[_Call] = []
        self.goaway: tuple[int, int] | None = None  # (last stream id, error code)
        self.closed = False

    # ------------------------------------------------------------------ state

    @property
    def open_calls(self) -> int:
        """Calls started and not yet ended."""
        return len(self._calls)

    @property
    def can_start(self) -> bool:
        """Whether a new call may go on this connection."""
        return (
            not self.closed
            and self.goaway is None
            and self._next_id <= MAX_STREAM_ID
            and len(self._calls) < self._peer_max_streams
        )

    # ------------------------------------------------------------------ sending

    def initiate(self) -> None:
        """Queue the connection preface: our settings and a wide connection window."""
        settings = _SETTING.pack(SETTINGS_ENABLE_PUSH, 0) + _SETTING.pack(
            SETTINGS_INITIAL_WINDOW_SIZE, self._initial_window
        )
        self.outbox += PREFACE
        self.outbox += frame(SETTINGS, 0, 0, settings)
        self.outbox += frame(WINDOW_UPDATE, 0, 0, _U32.pack(MAX_WINDOW - DEFAULT_WINDOW))

    def start_call(self, path: str, request: bytes, owner: CallOwner, *, window: int) -> int:
        """Queue a call of ``path`` (``/package.Service/Method``) sending ``request``.

        ``window`` is the call's receive window (the bytes the server may send before
        the owner grants more), at least the connection's initial window. Returns the
        call's stream id.
        """
        if not self.can_start:
            raise H2ProtocolError("the connection takes no new calls", INTERNAL_ERROR)
        stream_id = self._next_id
        self._next_id += 2
        block = encode_headers(
            [
                (":method", "POST"),
                (":scheme", self._scheme),
                (":path", path),
                (":authority", self._authority),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("user-agent", self._user_agent),
            ]
        )
        self.outbox += frame(HEADERS, END_HEADERS, stream_id, block)
        if window > self._initial_window:
            increment = min(window, MAX_WINDOW) - self._initial_window
            self.outbox += frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(increment))
        body = message(request)
        step = self._peer_max_frame
        for start in range(0, len(body), step):
            last = start + step >= len(body)
            self.outbox += frame(
                DATA, END_STREAM if last else 0, stream_id, body[start : start + step]
            )
        self._calls[stream_id] = _Call(stream_id, owner)
        return stream_id

    def grant(self, stream_id: int, increment: int) -> None:
        """Let the server send ``increment`` more bytes on a call (no-op once it ended)."""
        if increment > 0 and stream_id in self._calls:
            self.outbox += frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(increment))

    def cancel(self, stream_id: int) -> None:
        """Reset a call (RST_STREAM CANCEL); its owner hears nothing more."""
        if self._calls.pop(stream_id, None) is not None and not self.closed:
            self.outbox += frame(RST_STREAM, 0, stream_id, _U32.pack(CANCEL))

    def close(self) -> None:
        """Queue a GOAWAY; the connection is closed for calls."""
        if not self.closed:
            self.closed = True
            self.outbox += frame(GOAWAY, 0, 0, _GOAWAY.pack(0, NO_ERROR))

    def connection_lost(self, details: str) -> None:
        """The transport is gone: end every call with UNAVAILABLE."""
        self.closed = True
        calls, self._calls = self._calls, {}
        for call in calls.values():
            call.owner.h2_end(Status(UNAVAILABLE, details))

    # ------------------------------------------------------------------ receiving

    def receive(self, data: bytes) -> None:
        """Process received bytes; raises :class:`H2ProtocolError` on a connection error."""
        if self._rest:
            data = self._rest + data
        pos = 0
        end = len(data)
        calls = self._calls
        unpack = _FRAME.unpack_from
        woken = self._woken
        while end - pos >= 9:
            length_type, flags, stream_id = unpack(data, pos)
            length = length_type >> 8
            start = pos + 9
            stop = start + length
            if stop > end:
                break
            pos = stop
            if length_type & 0xFF == DATA:
                if self._continuing is not None:
                    raise H2ProtocolError("header block interrupted by a DATA frame")
                stream_id &= 0x7FFFFFFF
                self._received_since_update += length
                call = calls.get(stream_id)
                if call is None:
                    continue  # a call we cancelled: its bytes only count for the connection
                if flags & PADDED:
                    padded = stop - start
                    start, stop = self._unpad(data, start, stop)
                    # Padding takes window that no message will give back: return it.
                    self.grant(stream_id, padded - (stop - start))
                # Fast path: the frame holds exactly one whole message, as the server
                # writes them.
                if (
                    not call.partial
                    and stop - start >= 5
                    and data[start] == 0
                    and _U32.unpack_from(data, start + 1)[0] == stop - start - 5
                ):
                    call.append(data[start + 5 : stop])
                else:
                    self._data_slow(call, data[start:stop])
                    if call.id not in calls:
                        continue  # ended by a bad message
                if not call.woken:
                    call.woken = True
                    woken.append(call)
                if flags & END_STREAM:
                    self._end(call, Status(INTERNAL, "the server ended the call without a status"))
            else:
                self._frame(length_type & 0xFF, flags, stream_id & 0x7FFFFFFF, data, start, stop)
        self._rest = data[pos:] if pos < end else b""
        if self._received_since_update >= MAX_WINDOW // 4:
            self.outbox += frame(WINDOW_UPDATE, 0, 0, _U32.pack(self._received_since_update))
            self._received_since_update = 0
        if woken:
            self._woken = []
            for call in woken:
                call.woken = False
                call.owner.h2_wake()

    def _unpad(self, data: bytes, start: int, stop: int) -> tuple[int, int]:
        if start >= stop:
            raise H2ProtocolError("padded frame without a pad length")
        pad = data[start]
        start += 1
        if pad > stop - start:
            raise H2ProtocolError("padding longer than the frame")
        return start, stop - pad

    def _data_slow(self, call: _Call, chunk: bytes) -> None:
        buf = call.partial
        buf += chunk
        pos = 0
        while len(buf) - pos >= 5:
            if buf[pos] != 0:
                self._end(
                    call,
                    Status(INTERNAL, "the server sent a compressed message unasked", local=True),
                )
                self.cancel_ended(call.id)
                return
            size = _U32.unpack_from(buf, pos + 1)[0]
            if size > self._max_message:
                self._end(
                    call,
                    Status(
                        RESOURCE_EXHAUSTED,
                        f"a message of {size} bytes is above the {self._max_message} bytes "
                        "this client reads",
                        local=True,
                    ),
                )
                self.cancel_ended(call.id)
                return
            if len(buf) - pos - 5 < size:
                break
            call.append(bytes(buf[pos + 5 : pos + 5 + size]))
            pos += 5 + size
        del buf[:pos]
        if len(buf) >= 5:
            call.owner.h2_need(_U32.unpack_from(buf, 1)[0] + 5)

    def cancel_ended(self, stream_id: int) -> None:
        """Reset a call that already ended on our side (the server may still send)."""
        if not self.closed:
            self.outbox += frame(RST_STREAM, 0, stream_id, _U32.pack(CANCEL))

    def _end(self, call: _Call, status: Status) -> None:
        if self._calls.pop(call.id, None) is not None:
            if call.woken:  # h2_end wakes the owner
                call.woken = False
                self._woken.remove(call)
            call.owner.h2_end(status)

    def _frame(
        self, ftype: int, flags: int, stream_id: int, data: bytes, start: int, stop: int
    ) -> None:
        if self._continuing is not None and ftype != CONTINUATION:
            raise H2ProtocolError("header block interrupted by another frame")
        if ftype == HEADERS:
            if flags & PADDED:
                start, stop = self._unpad(data, start, stop)
            if flags & PRIORITY_FLAG:
                start += 5
            self._header_fragment(stream_id, data[start:stop], flags, first=True)
        elif ftype == CONTINUATION:
            if self._continuing != stream_id:
                raise H2ProtocolError("unexpected CONTINUATION frame")
            self._header_fragment(stream_id, data[start:stop], flags, first=False)
        elif ftype == SETTINGS:
            self._settings(flags, data[start:stop])
        elif ftype == PING:
            if stop - start != 8:
                raise H2ProtocolError("PING frame must carry 8 bytes", 0x6)
            if not flags & ACK:
                self.outbox += frame(PING, ACK, 0, data[start:stop])
        elif ftype == RST_STREAM:
            call = self._calls.get(stream_id)
            if call is not None:
                code = _U32.unpack_from(data, start)[0] if stop - start >= 4 else INTERNAL_ERROR
                status = _RESET_STATUS.get(code, INTERNAL)
                self._end(call, Status(status, f"stream reset by the server (HTTP/2 error {code})"))
        elif ftype == GOAWAY:
            if stop - start < 8:
                raise H2ProtocolError("short GOAWAY frame")
            last, code = _GOAWAY.unpack_from(data, start)
            last &= 0x7FFFFFFF
            self.goaway = (last, code)
            # Calls above the last one the server processed were never seen by it.
            for call in [c for sid, c in self._calls.items() if sid > last]:
                self._end(call, Status(UNAVAILABLE, "the broker is going away (GOAWAY)"))
        elif ftype == PUSH_PROMISE:
            raise H2ProtocolError("PUSH_PROMISE although push is disabled")
        # WINDOW_UPDATE: requests are one small frame, sent before any window matters;
        # PRIORITY and unknown types: nothing to do.

    def _settings(self, flags: int, payload: bytes) -> None:
        if flags & ACK:
            return
        if len(payload) % 6:
            raise H2ProtocolError("SETTINGS length not a multiple of 6", 0x6)
        for pos in range(0, len(payload), 6):
            key, value = _SETTING.unpack_from(payload, pos)
            if key == SETTINGS_MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value <= 2**24 - 1:
                    raise H2ProtocolError(f"invalid MAX_FRAME_SIZE {value}")
                self._peer_max_frame = value
            elif key == SETTINGS_MAX_CONCURRENT_STREAMS:
                self._peer_max_streams = value
            elif key == SETTINGS_INITIAL_WINDOW_SIZE and value > MAX_WINDOW:
                raise H2ProtocolError("invalid INITIAL_WINDOW_SIZE", FLOW_CONTROL_ERROR)
        self.outbox += frame(SETTINGS, ACK, 0)

    def _header_fragment(self, stream_id: int, fragment: bytes, flags: int, *, first: bool) -> None:
        call = self._calls.get(stream_id)
        if first:
            self._block_end = bool(flags & END_STREAM)
            if call is not None:
                call.block = bytearray(fragment)
            else:
                self._orphan_block = bytearray(fragment)
        elif call is not None:
            call.block += fragment
        else:
            self._orphan_block += fragment
        if not flags & END_HEADERS:
            self._continuing = stream_id
            return
        self._continuing = None
        end_stream = self._block_end
        if call is None:
            block, self._orphan_block = self._orphan_block, bytearray()
            self._decode(bytes(block))  # keep the HPACK state in step
            return
        block, call.block = call.block, bytearray()
        headers = self._decode(bytes(block))
        self._on_headers(call, headers, end_stream)

    def _decode(self, block: bytes) -> list[tuple[str, str]]:
        try:
            return self._decoder.decode(block)
        except HpackError as exc:
            raise H2ProtocolError(f"bad header block: {exc}", COMPRESSION_ERROR) from None

    def _on_headers(self, call: _Call, headers: list[tuple[str, str]], end_stream: bool) -> None:
        fields = dict(headers)
        if not call.headers_seen:
            call.headers_seen = True
            http_status = fields.get(":status", "")
            if http_status != "200":
                code = _HTTP_STATUS.get(int(http_status) if http_status.isdigit() else 0, UNKNOWN)
                self._end(call, Status(code, f"HTTP status {http_status or 'missing'}"))
                self.cancel_ended(call.id)
                return
            if not end_stream:
                return  # response headers; the trailers come after the messages
        elif not end_stream:
            raise H2ProtocolError("a second header block without END_STREAM")
        self._end(call, _status_of(fields))


def _status_of(trailers: dict[str, str]) -> Status:
    raw = trailers.get("grpc-status")
    if raw is None or not raw.isdigit():
        return Status(UNKNOWN, "the server sent no gRPC status")
    # grpc-message is percent-encoded UTF-8.
    details = unquote(trailers.get("grpc-message", ""), encoding="utf-8", errors="replace")
    return Status(int(raw), details)
