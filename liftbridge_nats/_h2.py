"""HTTP/2 (RFC 9113) client side for gRPC server-streaming calls, sans-IO.

Why our own: Liftbridge streams a partition as one gRPC message per stored message,
and grpcio's Python layer, or a general HTTP/2 library, costs more CPU per message
than all the rest of the read path (the subscribe peers of ``make bench`` measure
grpcio; ``make bench-micro`` compares it with python-hyper's ``h2`` on a recorded
stream, ``h2.receive.*``). Read straight off the socket, a message is a frame header, a
slice and a protobuf parse, on the event loop, with every call to a broker
multiplexed on one connection and no thread.

This module knows no sockets and no asyncio. :class:`H2Connection` takes the bytes a
connection received (:meth:`~H2Connection.receive`) and leaves the bytes to send in
:attr:`~H2Connection.outbox`. Each call has an owner (:class:`CallOwner`) that gets
the call's gRPC messages (bodies, without their 5-byte prefix) appended to its buffer,
one wake-up per received chunk, and the call's end as a gRPC status code and message.

What it supports is what a gRPC client of server-streaming calls needs: a request is
a HEADERS frame and its DATA frames; responses may use any HPACK feature, padding,
CONTINUATION frames and informational (1xx) responses; PING and SETTINGS are
answered; GOAWAY drains the connection. Flow control is left to the owners on the
receive side (they return window as their consumer takes messages, see
:meth:`~H2Connection.grant`), while the connection window is kept wide open: per-call
windows bound memory, and one slow call must not hold back the others sharing the
connection. On the send side the server's windows and frame size are honoured: a
request that does not fit waits for the server's WINDOW_UPDATE.

Nothing the server sends is trusted. What RFC 9113 calls a connection error raises
:class:`H2ProtocolError` from :meth:`~H2Connection.receive` after queueing a GOAWAY
with its error code and ending every call (UNAVAILABLE); the connection reads nothing
more. A stream error resets that call (RST_STREAM with its code) and ends it
(INTERNAL); the other calls go on. Either way :attr:`Status.violation` carries the
error code. Enforced, among the rules of RFC 9113:

- frames larger than the SETTINGS_MAX_FRAME_SIZE we advertise (the default, 16 KiB),
  as soon as their header is read (FRAME_SIZE_ERROR); frames of a wrong length for
  their type (RST_STREAM, WINDOW_UPDATE, PING, SETTINGS, a SETTINGS ACK with a
  payload, GOAWAY, a padded DATA or HEADERS frame without its pad length, a
  prioritized HEADERS frame too short for its fields: FRAME_SIZE_ERROR; PRIORITY: a
  stream error); padding longer than the payload (PROTOCOL_ERROR);
- header blocks: SETTINGS_MAX_HEADER_LIST_SIZE (64 KiB by default) is advertised
  and enforced while decoding (name, value and 32 bytes per field, RFC 7541 4.1); a
  block's compressed bytes are capped (twice that size) and so is its number of
  CONTINUATION frames (:data:`MAX_CONTINUATIONS`), so an endless header block ends
  early with bounded memory (ENHANCE_YOUR_CALM); a block interrupted by any other
  frame, a CONTINUATION out of place (PROTOCOL_ERROR); HPACK errors
  (COMPRESSION_ERROR, see :mod:`._hpack`);
- flow control: data beyond the window we granted, on a call or on the connection
  (FLOW_CONTROL_ERROR); WINDOW_UPDATE increments of 0 (PROTOCOL_ERROR) or that take
  a window past 2**31-1 (FLOW_CONTROL_ERROR); our own grants never exceed it;
- stream states: SETTINGS, PING and GOAWAY on a stream; DATA, HEADERS, RST_STREAM or
  PRIORITY on stream 0; DATA, HEADERS, RST_STREAM or WINDOW_UPDATE on a stream we
  never opened (idle); PUSH_PROMISE (we disable push); a connection preface that does
  not start with SETTINGS (PROTOCOL_ERROR); frames on closed streams as RFC 9113 5.1
  says (after END_STREAM: a STREAM_CLOSED connection error, but for WINDOW_UPDATE,
  RST_STREAM and PRIORITY; after the server's RST_STREAM: a STREAM_CLOSED stream
  error; after ours: ignored, DATA still counted, header blocks still decoded);
  unknown frame types are ignored, but not inside a header block;
- SETTINGS values: ENABLE_PUSH other than 0, MAX_FRAME_SIZE outside
  16384..16777215, ENABLE_CONNECT_PROTOCOL above 1 (PROTOCOL_ERROR),
  INITIAL_WINDOW_SIZE above 2**31-1 or moving a window past it (FLOW_CONTROL_ERROR);
- malformed responses (RFC 9113 8.1.1, a stream error PROTOCOL_ERROR): a :status
  that is not three ASCII digits, missing or repeated, pseudo-headers other than
  :status, after a regular field or in trailers, field names or values with
  forbidden characters, connection-specific fields, DATA before the response headers,
  a second header block without END_STREAM, a content-length that does not match.

``grpc-status`` is read as ASCII digits only (anything else ends the call UNKNOWN),
and ``max_message`` is enforced on every message, however it arrives (a larger one
ends its call locally, RESOURCE_EXHAUSTED). Buffering is linear: a frame split
across reads is assembled once, in a buffer of at most one frame.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable
from typing import Final, Protocol
from urllib.parse import unquote

from ._hpack import HeaderListTooLarge, HpackDecoder, HpackError, encode_headers

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

_TYPE_NAMES: Final = (
    "DATA",
    "HEADERS",
    "PRIORITY",
    "RST_STREAM",
    "SETTINGS",
    "PUSH_PROMISE",
    "PING",
    "GOAWAY",
    "WINDOW_UPDATE",
    "CONTINUATION",
)

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
SETTINGS_MAX_HEADER_LIST_SIZE: Final = 0x6
SETTINGS_ENABLE_CONNECT_PROTOCOL: Final = 0x8

# Error codes.
NO_ERROR: Final = 0x0
PROTOCOL_ERROR: Final = 0x1
INTERNAL_ERROR: Final = 0x2
FLOW_CONTROL_ERROR: Final = 0x3
SETTINGS_TIMEOUT: Final = 0x4
STREAM_CLOSED: Final = 0x5
FRAME_SIZE_ERROR: Final = 0x6
REFUSED_STREAM: Final = 0x7
CANCEL: Final = 0x8
COMPRESSION_ERROR: Final = 0x9
CONNECT_ERROR: Final = 0xA
ENHANCE_YOUR_CALM: Final = 0xB
INADEQUATE_SECURITY: Final = 0xC
HTTP_1_1_REQUIRED: Final = 0xD

_ERROR_NAMES: Final = (
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
)

DEFAULT_WINDOW: Final = 65_535
MAX_WINDOW: Final = 2**31 - 1
DEFAULT_MAX_FRAME: Final = 16_384
MAX_FRAME_LIMIT: Final = 2**24 - 1
MAX_STREAM_ID: Final = 2**31 - 1
_STREAM_MASK: Final = 0x7FFFFFFF

MAX_FRAME: Final = DEFAULT_MAX_FRAME
"""The largest frame payload we accept (our SETTINGS_MAX_FRAME_SIZE: the default)."""
MAX_HEADER_LIST: Final = 64 * 1024
"""The SETTINGS_MAX_HEADER_LIST_SIZE we advertise and enforce, by default."""
MAX_CONTINUATIONS: Final = 64
"""CONTINUATION frames one header block may take."""
_CLOSED_KEPT: Final = 4096
"""Closed streams whose way of closing is remembered (older ones: frames ignored)."""

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

# How a stream we no longer track was closed (RFC 9113 5.1 treats frames on it by that).
_BY_END: Final = 1  # the server's END_STREAM
_BY_PEER_RESET: Final = 2  # the server's RST_STREAM
_BY_US: Final = 3  # our RST_STREAM, or a call the server never processed (GOAWAY)

# RFC 9113 8.2.1: a field name has no character in 0x00-0x20, A-Z, 0x7f-0xff, and no
# colon but the one that starts a pseudo-header; a value has no NUL, CR or LF and no
# whitespace at either end.
_BAD_NAME: Final = re.compile(r"[^\x21-\x39\x3b-\x40\x5b-\x7e]")
_BAD_VALUE: Final = re.compile(r"[\x00\n\r]|\A[ \t]|[ \t]\Z")
# RFC 9113 8.2.2: connection-specific fields.
_CONNECTION_FIELDS: Final = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}
)


def error_name(code: int) -> str:
    """The name of an HTTP/2 error code (RFC 9113 7)."""
    if 0 <= code < len(_ERROR_NAMES):
        return _ERROR_NAMES[code]
    return f"error 0x{code:x}"


class H2ProtocolError(Exception):
    """The peer broke HTTP/2 (a connection error): the connection must be dropped.

    ``code`` is the HTTP/2 error code sent in our GOAWAY.
    """

    def __init__(self, message: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code

    @property
    def code_name(self) -> str:
        """The error code's name, such as ``FRAME_SIZE_ERROR``."""
        return error_name(self.code)


class Status:
    """How a call ended: a gRPC status code (a number) and message.

    ``local`` marks a call this side ended because it could not read what the server
    sent (a compressed or oversized message): no retry will read it either.
    ``violation`` is the HTTP/2 error code when the call ended because the server
    broke the protocol (a connection error, UNAVAILABLE, or a stream error, INTERNAL),
    None otherwise.
    """

    __slots__ = ("code", "details", "local", "violation")

    def __init__(
        self, code: int, details: str, *, local: bool = False, violation: int | None = None
    ) -> None:
        self.code = code
        self.details = details
        self.local = local
        self.violation = violation

    def __repr__(self) -> str:
        extra = "" if self.violation is None else f", violation={error_name(self.violation)}"
        return f"Status({self.code}, {self.details!r}, local={self.local}{extra})"


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


# A call's response state.
_AWAITING: Final = 0  # no final response headers yet
_RESPONDED: Final = 1  # response headers read: messages, then trailers


class _Call:
    __slots__ = (
        "append",
        "body_received",
        "content_length",
        "fast",
        "id",
        "owner",
        "partial",
        "request",
        "send_offset",
        "sent",
        "state",
        "window",
        "woken",
    )

    def __init__(self, stream_id: int, owner: CallOwner) -> None:
        self.id = stream_id
        self.owner = owner
        self.append: Callable[[bytes], None] = owner.h2_append
        # Bytes of a gRPC message split across DATA frames.
        self.partial = bytearray()
        self.state = _AWAITING
        # Whether the next DATA frame may take the fast path: response headers read,
        # no message in pieces, no content-length to count.
        self.fast = False
        self.content_length = -1  # -1: none given
        self.body_received = 0
        self.woken = False
        self.window = 0  # what the server may still send (our receive window)
        # What we may still send (the server's window on the call), less the server's
        # SETTINGS_INITIAL_WINDOW_SIZE: a change of that setting moves every window
        # and touches no call.
        self.send_offset = 0
        self.request = b""  # the request's bytes (prefix included) ...
        self.sent = 0  # ... of which this many are sent


class H2Connection:
    """One HTTP/2 connection carrying gRPC server-streaming calls (client side).

    ``authority`` and ``scheme`` go into every request. ``max_message`` bounds one
    gRPC message (a larger one ends its call, see :class:`Status`). Every call starts
    with ``initial_window`` and is opened to the window its owner asks for at once.
    ``max_header_list_size`` is the SETTINGS_MAX_HEADER_LIST_SIZE we advertise and
    enforce.
    """

    def __init__(
        self,
        authority: str,
        *,
        scheme: str = "http",
        max_message: int = 64 * 1024 * 1024,
        user_agent: str = "liftbridge-nats",
        initial_window: int = 16 * 1024,
        max_header_list_size: int = MAX_HEADER_LIST,
    ) -> None:
        self.outbox = bytearray()
        self._initial_window = max(0, min(initial_window, MAX_WINDOW))
        self._authority = authority
        self._scheme = scheme
        self._max_message = max_message
        self._user_agent = user_agent
        self._max_header_list = max_header_list_size
        self._max_block = 2 * max_header_list_size
        # Whether a message that is a whole DATA frame may skip the max_message check.
        self._fast_ok = max_message >= MAX_FRAME - 5
        self._calls: dict[int, _Call] = {}
        # What the receive loop looks calls up in for the fast path: the calls, or no
        # call while a header block is open (every frame then takes the slow path).
        self._fast_calls: dict[int, _Call] = self._calls
        self._closed: dict[int, int] = {}  # stream id -> _BY_*
        self._next_id = 1
        self._initiated = False
        self._preface_seen = False
        self._failed = False
        # The start of a frame that the next chunk completes.
        self._buf = bytearray()
        self._decoder = HpackDecoder(max_header_list_size=max_header_list_size)
        # An open header block (HEADERS without END_HEADERS, then CONTINUATIONs).
        self._block_id = 0  # its stream; 0: none open
        self._block = bytearray()
        self._block_frames = 0
        self._block_end_stream = False
        self._block_dependency = -1
        # Our receive window on the connection: bytes received since the last
        # WINDOW_UPDATE we sent (the window is MAX_WINDOW minus this).
        self._received = 0
        # The server's side: its settings and our send window on the connection.
        self._peer_max_frame = DEFAULT_MAX_FRAME
        self._peer_max_streams = 2**32
        self._peer_initial_window = DEFAULT_WINDOW
        self._send_window = DEFAULT_WINDOW
        # At least the largest send_offset of the calls (exact when recomputed).
        self._send_offset_bound = 0
        self._sending: dict[int, _Call] = {}  # calls whose request waits for window
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

    @property
    def buffered(self) -> int:
        """Bytes this connection holds that no owner took yet: the start of a frame,
        an open header block, messages arriving in pieces (for tests of the bounds)."""
        return len(self._buf) + len(self._block) + sum(len(c.partial) for c in self._calls.values())

    # ------------------------------------------------------------------ sending

    def initiate(self) -> None:
        """Queue the connection preface: our settings and a wide connection window."""
        if self._initiated:
            return
        self._initiated = True
        settings = (
            _SETTING.pack(SETTINGS_ENABLE_PUSH, 0)
            + _SETTING.pack(SETTINGS_INITIAL_WINDOW_SIZE, self._initial_window)
            + _SETTING.pack(SETTINGS_MAX_HEADER_LIST_SIZE, self._max_header_list)
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
        self.initiate()
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
        step = self._peer_max_frame
        self.outbox += frame(
            HEADERS, END_HEADERS if len(block) <= step else 0, stream_id, block[:step]
        )
        for start in range(step, len(block), step):
            last = start + step >= len(block)
            self.outbox += frame(
                CONTINUATION, END_HEADERS if last else 0, stream_id, block[start : start + step]
            )
        call = _Call(stream_id, owner)
        call.window = self._initial_window
        if window > self._initial_window:
            target = min(window, MAX_WINDOW)
            self.outbox += frame(
                WINDOW_UPDATE, 0, stream_id, _U32.pack(target - self._initial_window)
            )
            call.window = target
        call.request = message(request)
        self._calls[stream_id] = call
        self._send_request(call)
        return stream_id

    def _send_request(self, call: _Call) -> None:
        """Send as much of a call's request as the server's windows let through."""
        body = call.request
        sent = call.sent
        while sent < len(body):
            room = min(
                self._send_window,
                self._peer_initial_window + call.send_offset,
                self._peer_max_frame,
            )
            if room <= 0:
                self._sending[call.id] = call
                call.sent = sent
                return
            piece = body[sent : sent + room]
            sent += len(piece)
            self.outbox += frame(DATA, END_STREAM if sent == len(body) else 0, call.id, piece)
            self._send_window -= len(piece)
            call.send_offset -= len(piece)
        call.sent = sent
        call.request = b""
        self._sending.pop(call.id, None)

    def _send_waiting(self) -> None:
        for call in list(self._sending.values()):
            self._send_request(call)

    def grant(self, stream_id: int, increment: int) -> None:
        """Let the server send ``increment`` more bytes on a call (no-op once it ended).

        The call's window never goes past 2**31-1: what would take it further is not
        granted.
        """
        call = self._calls.get(stream_id)
        if call is None or increment <= 0:
            return
        increment = min(increment, MAX_WINDOW - call.window)
        if increment > 0:
            call.window += increment
            self.outbox += frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(increment))

    def cancel(self, stream_id: int) -> None:
        """Reset a call (RST_STREAM CANCEL); its owner hears nothing more."""
        call = self._calls.pop(stream_id, None)
        if call is not None:
            self._forget(call)
            self._reset(stream_id, CANCEL)

    def close(self) -> None:
        """Queue a GOAWAY; the connection is closed for calls."""
        if not self.closed:
            self.closed = True
            self.outbox += frame(GOAWAY, 0, 0, _GOAWAY.pack(0, NO_ERROR))

    def connection_lost(self, details: str) -> None:
        """The transport is gone: end every call with UNAVAILABLE."""
        self.closed = True
        self._end_all(Status(UNAVAILABLE, details))

    def _end_all(self, status: Status) -> None:
        calls = self._calls
        self._calls = self._fast_calls = {}
        self._sending = {}
        self._woken = []
        for call in calls.values():
            call.woken = False
            call.owner.h2_end(status)

    def cancel_ended(self, stream_id: int) -> None:
        """Reset a call that already ended on our side (the server may still send)."""
        self._reset(stream_id, CANCEL)

    def _reset(self, stream_id: int, code: int) -> None:
        """Queue a RST_STREAM; frames on the stream are ignored from now on."""
        self._record_closed(stream_id, _BY_US)
        if not self._failed and not (self.closed and code == CANCEL):
            self.outbox += frame(RST_STREAM, 0, stream_id, _U32.pack(code))

    def _record_closed(self, stream_id: int, how: int) -> None:
        closed = self._closed
        closed[stream_id] = how
        if len(closed) > _CLOSED_KEPT:
            del closed[next(iter(closed))]

    # ------------------------------------------------------------------ receiving

    def receive(self, data: bytes | bytearray | memoryview) -> None:
        """Process received bytes.

        On a connection error this queues a GOAWAY, ends every call and raises
        :class:`H2ProtocolError`; the connection then reads nothing more.
        """
        if self._failed:
            return
        if not isinstance(data, bytes):
            data = bytes(data)
        try:
            self._receive(data)
        except H2ProtocolError as exc:
            self._fail(exc)
            raise
        if self._received >= MAX_WINDOW // 4:
            self.outbox += frame(WINDOW_UPDATE, 0, 0, _U32.pack(self._received))
            self._received = 0
        woken = self._woken
        if woken:
            self._woken = []
            for call in woken:
                call.woken = False
                call.owner.h2_wake()

    def _fail(self, exc: H2ProtocolError) -> None:
        """A connection error: GOAWAY, and every call ends."""
        self._failed = True
        self.closed = True
        debug = str(exc).encode("ascii", "replace")[:256]
        self.outbox += frame(GOAWAY, 0, 0, _GOAWAY.pack(0, exc.code) + debug)
        self._buf = bytearray()
        self._block = bytearray()
        self._end_all(
            Status(
                UNAVAILABLE,
                f"the broker broke the HTTP/2 protocol ({exc.code_name}): {exc}",
                violation=exc.code,
            )
        )

    def _receive(self, data: bytes) -> None:
        pos = 0
        buf = self._buf
        if buf:
            # A frame begun in an earlier chunk: complete it (its header too, maybe).
            if len(buf) < 9:
                pos = 9 - len(buf)
                buf += data[:pos]
                if len(buf) < 9:
                    return
                length = int.from_bytes(buf[:3], "big")
                if length > MAX_FRAME:
                    raise _too_large(length)
            need = 9 + int.from_bytes(buf[:3], "big") - len(buf)
            if len(data) - pos < need:
                buf += memoryview(data)[pos:]
                return
            buf += memoryview(data)[pos : pos + need]
            pos += need
            whole = bytes(buf)
            buf.clear()
            self._frames(whole, 0)
        pos = self._frames(data, pos)
        if pos < len(data):
            self._buf += memoryview(data)[pos:]

    def _frames(self, data: bytes, pos: int) -> int:
        """Process the whole frames of ``data`` from ``pos``; the position after them."""
        end = len(data)
        unpack = _FRAME.unpack_from
        u32 = _U32.unpack_from
        calls = self._fast_calls
        woken = self._woken
        received = self._received
        while end - pos >= 9:
            length_type, flags, stream_id = unpack(data, pos)
            length = length_type >> 8
            if length > MAX_FRAME:
                raise _too_large(length)
            start = pos + 9
            stop = start + length
            if stop > end:
                break
            pos = stop
            if length_type & 0xFF == DATA:
                received += length
                call = calls.get(stream_id)
                # Fast path: an open call past its response headers, a frame within its
                # window, no flag, holding exactly one whole message (as servers write
                # them).
                if call is not None and not flags & 0x9 and call.fast and call.window >= length:
                    call.window -= length
                    if length >= 5 and data[start] == 0 and u32(data, start + 1)[0] == length - 5:
                        call.append(data[start + 5 : stop])
                    else:
                        self._data_slow(call, data[start:stop])
                        if call.id not in self._calls:
                            continue  # ended by a bad message
                    if not call.woken:
                        call.woken = True
                        woken.append(call)
                else:
                    self._received = received
                    self._data_frame(flags, stream_id & _STREAM_MASK, data, start, stop)
                    calls = self._fast_calls
                    woken = self._woken
            else:
                self._received = received
                self._frame(length_type & 0xFF, flags, stream_id & _STREAM_MASK, data, start, stop)
                calls = self._fast_calls
                woken = self._woken
        self._received = received
        if received > MAX_WINDOW:
            raise H2ProtocolError(
                "the server sent more than the connection's window", FLOW_CONTROL_ERROR
            )
        return pos

    def _unpad(self, data: bytes, start: int, stop: int, what: str) -> tuple[int, int]:
        if start >= stop:
            raise H2ProtocolError(f"padded {what} frame without a pad length", FRAME_SIZE_ERROR)
        pad = data[start]
        start += 1
        if pad > stop - start:
            raise H2ProtocolError(f"{what} frame's padding is longer than its payload")
        return start, stop - pad

    def _data_frame(self, flags: int, stream_id: int, data: bytes, start: int, stop: int) -> None:
        """A DATA frame that the fast path does not take."""
        length = stop - start
        if self._block_id:
            raise _interrupted(self._block_id, DATA)
        if not self._preface_seen:
            raise _no_preface(DATA)
        if not stream_id:
            raise H2ProtocolError("DATA frame on stream 0")
        if self._received > MAX_WINDOW:
            raise H2ProtocolError(
                "the server sent more than the connection's window", FLOW_CONTROL_ERROR
            )
        if flags & PADDED:
            start, stop = self._unpad(data, start, stop, "DATA")
        call = self._calls.get(stream_id)
        if call is None:
            self._not_open(stream_id, DATA)
            return
        if call.window < length:
            raise H2ProtocolError(
                f"the server sent {length} bytes on stream {stream_id}, "
                f"beyond the {call.window} its window allowed",
                FLOW_CONTROL_ERROR,
            )
        call.window -= length
        if call.state != _RESPONDED:
            self._stream_error(call, PROTOCOL_ERROR, "DATA before the response headers")
            return
        body = stop - start
        if call.content_length >= 0:
            call.body_received += body
            if call.body_received > call.content_length:
                self._stream_error(call, PROTOCOL_ERROR, "more DATA than its content-length")
                return
        if body:
            if (
                call.fast
                and body >= 5
                and data[start] == 0
                and _U32.unpack_from(data, start + 1)[0] == body - 5
            ):
                call.append(data[start + 5 : stop])
            else:
                self._data_slow(call, data[start:stop])
                if call.id not in self._calls:
                    return  # ended by a bad message
            if not call.woken:
                call.woken = True
                self._woken.append(call)
        if length > body:
            # Padding takes window that no message will give back: return it.
            self.grant(stream_id, length - body)
        if flags & END_STREAM:
            if call.content_length >= 0 and call.body_received != call.content_length:
                self._stream_error(call, PROTOCOL_ERROR, "less DATA than its content-length")
                return
            detail = (
                "the server ended the call in the middle of a message"
                if call.partial
                else "the server ended the call without a status"
            )
            self._end(call, Status(INTERNAL, detail), _BY_END)

    def _data_slow(self, call: _Call, chunk: bytes) -> None:
        buf = call.partial
        buf += chunk
        pos = 0
        while len(buf) - pos >= 5:
            if buf[pos] != 0:
                self._end(
                    call,
                    Status(INTERNAL, "the server sent a compressed message unasked", local=True),
                    _BY_US,
                )
                self._reset(call.id, CANCEL)
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
                    _BY_US,
                )
                self._reset(call.id, CANCEL)
                return
            if len(buf) - pos - 5 < size:
                break
            call.append(bytes(buf[pos + 5 : pos + 5 + size]))
            pos += 5 + size
        del buf[:pos]
        self._refresh_fast(call)
        if len(buf) >= 5:
            call.owner.h2_need(_U32.unpack_from(buf, 1)[0] + 5)

    def _refresh_fast(self, call: _Call) -> None:
        call.fast = (
            self._fast_ok
            and call.state == _RESPONDED
            and not call.partial
            and call.content_length < 0
        )

    def _end(self, call: _Call, status: Status, how: int) -> None:
        if self._calls.pop(call.id, None) is not None:
            self._forget(call)
            if how == _BY_END and call.sent < len(call.request):
                # The server is done before our request was: stop sending it.
                self._reset(call.id, CANCEL)
            else:
                self._record_closed(call.id, how)
            call.owner.h2_end(status)

    def _forget(self, call: _Call) -> None:
        self._sending.pop(call.id, None)
        if call.woken:  # h2_end wakes the owner; a cancelled call needs no wake-up
            call.woken = False
            self._woken.remove(call)

    def _stream_error(self, call: _Call, code: int, problem: str) -> None:
        """End a call for a stream error: RST_STREAM with ``code``."""
        self._end(
            call,
            Status(
                INTERNAL,
                f"the broker broke the HTTP/2 protocol on this call ({error_name(code)}): "
                f"{problem}",
                violation=code,
            ),
            _BY_US,
        )
        self._reset(call.id, code)

    def _stream_error_at(self, stream_id: int, code: int, problem: str) -> None:
        """A stream error on any stream: one we never opened makes it a connection error."""
        call = self._calls.get(stream_id)
        if call is not None:
            self._stream_error(call, code, problem)
        elif self._idle(stream_id):
            raise H2ProtocolError(f"{problem} (stream {stream_id}, never opened)", code)
        elif self._closed.get(stream_id, _BY_US) != _BY_US:
            self._reset(stream_id, code)

    def _idle(self, stream_id: int) -> bool:
        # Push is disabled: the server opens no stream, every even id stays idle.
        return stream_id >= self._next_id or not stream_id & 1

    def _not_open(self, stream_id: int, ftype: int) -> None:
        """A frame for a stream that is not an open call (RFC 9113 5.1). Returns when the
        frame is to be ignored."""
        what = _TYPE_NAMES[ftype]
        if self._idle(stream_id):
            raise H2ProtocolError(f"{what} frame on stream {stream_id}, which was never opened")
        how = self._closed.get(stream_id, _BY_US)
        if how == _BY_END:
            if ftype in (WINDOW_UPDATE, RST_STREAM, PRIORITY):
                return  # may cross the end of the stream
            raise H2ProtocolError(
                f"{what} frame on stream {stream_id} after its END_STREAM", STREAM_CLOSED
            )
        if how == _BY_PEER_RESET and ftype not in (RST_STREAM, PRIORITY):
            self._reset(stream_id, STREAM_CLOSED)
        # Reset by us: the server may have sent it before it saw our RST_STREAM.

    def _frame(
        self, ftype: int, flags: int, stream_id: int, data: bytes, start: int, stop: int
    ) -> None:
        if self._block_id:
            if ftype != CONTINUATION or stream_id != self._block_id:
                raise _interrupted(self._block_id, ftype)
            self._continuation(flags, data, start, stop)
            return
        if not self._preface_seen and (ftype != SETTINGS or flags & ACK):
            raise _no_preface(ftype)
        length = stop - start
        if ftype == HEADERS:
            self._headers(flags, stream_id, data, start, stop)
        elif ftype == SETTINGS:
            if stream_id:
                raise H2ProtocolError(f"SETTINGS frame on stream {stream_id}")
            self._settings(flags, data, start, stop)
        elif ftype == WINDOW_UPDATE:
            if length != 4:
                raise H2ProtocolError(
                    f"WINDOW_UPDATE frame of {length} bytes (4 expected)", FRAME_SIZE_ERROR
                )
            self._window_update(stream_id, _U32.unpack_from(data, start)[0] & _STREAM_MASK)
        elif ftype == PING:
            if stream_id:
                raise H2ProtocolError(f"PING frame on stream {stream_id}")
            if length != 8:
                raise H2ProtocolError(
                    f"PING frame of {length} bytes (8 expected)", FRAME_SIZE_ERROR
                )
            if not flags & ACK:
                self.outbox += frame(PING, ACK, 0, data[start:stop])
        elif ftype == RST_STREAM:
            if not stream_id:
                raise H2ProtocolError("RST_STREAM frame on stream 0")
            if length != 4:
                raise H2ProtocolError(
                    f"RST_STREAM frame of {length} bytes (4 expected)", FRAME_SIZE_ERROR
                )
            call = self._calls.get(stream_id)
            if call is None:
                self._not_open(stream_id, RST_STREAM)
                return
            code = _U32.unpack_from(data, start)[0]
            status = _RESET_STATUS.get(code, INTERNAL)
            self._end(
                call,
                Status(status, f"stream reset by the server (HTTP/2 {error_name(code)})"),
                _BY_PEER_RESET,
            )
        elif ftype == GOAWAY:
            if stream_id:
                raise H2ProtocolError(f"GOAWAY frame on stream {stream_id}")
            if length < 8:
                raise H2ProtocolError(
                    f"GOAWAY frame of {length} bytes (8 at least)", FRAME_SIZE_ERROR
                )
            last, code = _GOAWAY.unpack_from(data, start)
            last &= _STREAM_MASK
            if self.goaway is not None and last >= self.goaway[0]:
                return  # the last stream may only go down
            self.goaway = (last, code)
            # Calls above the last one the server processed were never seen by it.
            for call in [c for sid, c in self._calls.items() if sid > last]:
                self._end(call, Status(UNAVAILABLE, "the broker is going away (GOAWAY)"), _BY_US)
        elif ftype == PRIORITY:
            if not stream_id:
                raise H2ProtocolError("PRIORITY frame on stream 0")
            if length != 5:
                self._stream_error_at(
                    stream_id, FRAME_SIZE_ERROR, f"PRIORITY frame of {length} bytes (5 expected)"
                )
            elif _U32.unpack_from(data, start)[0] & _STREAM_MASK == stream_id:
                self._stream_error_at(stream_id, PROTOCOL_ERROR, "a stream depending on itself")
        elif ftype == PUSH_PROMISE:
            raise H2ProtocolError("PUSH_PROMISE frame, although push is disabled")
        elif ftype == CONTINUATION:
            raise H2ProtocolError(
                f"CONTINUATION frame on stream {stream_id} outside a header block"
            )
        # Unknown frame types are ignored (RFC 9113 5.5).

    def _settings(self, flags: int, data: bytes, start: int, stop: int) -> None:
        length = stop - start
        if flags & ACK:
            if length:
                raise H2ProtocolError(f"SETTINGS ACK with {length} bytes", FRAME_SIZE_ERROR)
            return
        if length % 6:
            raise H2ProtocolError(
                f"SETTINGS frame of {length} bytes, not a multiple of 6", FRAME_SIZE_ERROR
            )
        for pos in range(start, stop, 6):
            key, value = _SETTING.unpack_from(data, pos)
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise H2ProtocolError(
                        f"SETTINGS_INITIAL_WINDOW_SIZE {value} above 2**31-1", FLOW_CONTROL_ERROR
                    )
                if value + self._send_offset_bound > MAX_WINDOW:
                    # Maybe a window goes past 2**31-1: look at every call (once; the
                    # bound is exact then).
                    self._send_offset_bound = max(
                        (c.send_offset for c in self._calls.values()), default=0
                    )
                    if value + self._send_offset_bound > MAX_WINDOW:
                        raise H2ProtocolError(
                            "SETTINGS_INITIAL_WINDOW_SIZE takes a window above 2**31-1",
                            FLOW_CONTROL_ERROR,
                        )
                self._peer_initial_window = value
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value <= MAX_FRAME_LIMIT:
                    raise H2ProtocolError(f"SETTINGS_MAX_FRAME_SIZE {value} out of range")
                self._peer_max_frame = value
            elif key == SETTINGS_ENABLE_PUSH:
                if value != 0:  # RFC 9113 6.5.2: a server may only send 0
                    raise H2ProtocolError(f"SETTINGS_ENABLE_PUSH {value} from a server")
            elif key == SETTINGS_MAX_CONCURRENT_STREAMS:
                self._peer_max_streams = value
            elif key == SETTINGS_ENABLE_CONNECT_PROTOCOL and value > 1:
                raise H2ProtocolError(f"SETTINGS_ENABLE_CONNECT_PROTOCOL {value}")
            # HEADER_TABLE_SIZE and MAX_HEADER_LIST_SIZE bind our encoder, which indexes
            # nothing and sends a handful of short fields; unknown settings are ignored.
        self._preface_seen = True
        self.outbox += frame(SETTINGS, ACK, 0)
        if self._sending:
            self._send_waiting()

    def _window_update(self, stream_id: int, increment: int) -> None:
        if not stream_id:
            if not increment:
                raise H2ProtocolError("WINDOW_UPDATE of 0 on the connection")
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise H2ProtocolError(
                    "WINDOW_UPDATE takes the connection's window above 2**31-1",
                    FLOW_CONTROL_ERROR,
                )
            if self._sending:
                self._send_waiting()
            return
        call = self._calls.get(stream_id)
        if call is None:
            self._not_open(stream_id, WINDOW_UPDATE)
            return
        if not increment:
            self._stream_error(call, PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            return
        call.send_offset += increment
        if call.send_offset > self._send_offset_bound:
            self._send_offset_bound = call.send_offset
        if self._peer_initial_window + call.send_offset > MAX_WINDOW:
            self._stream_error(
                call, FLOW_CONTROL_ERROR, "WINDOW_UPDATE takes the window above 2**31-1"
            )
            return
        if call.sent < len(call.request):
            self._send_request(call)

    # ------------------------------------------------------------------ header blocks

    def _headers(self, flags: int, stream_id: int, data: bytes, start: int, stop: int) -> None:
        if not stream_id:
            raise H2ProtocolError("HEADERS frame on stream 0")
        pad = 0
        if flags & PADDED:
            if start >= stop:
                raise H2ProtocolError("padded HEADERS frame without a pad length", FRAME_SIZE_ERROR)
            pad = data[start]
            start += 1
        dependency = -1
        if flags & PRIORITY_FLAG:
            if stop - start < 5:
                raise H2ProtocolError(
                    "HEADERS frame too short for its priority fields", FRAME_SIZE_ERROR
                )
            dependency = _U32.unpack_from(data, start)[0] & _STREAM_MASK
            start += 5
        if pad > stop - start:
            raise H2ProtocolError("HEADERS frame's padding is longer than its payload")
        stop -= pad
        if stream_id not in self._calls:
            if self._idle(stream_id):
                raise H2ProtocolError(
                    f"HEADERS frame on stream {stream_id}, which was never opened"
                )
            if self._closed.get(stream_id) == _BY_END:
                raise H2ProtocolError(
                    f"HEADERS frame on stream {stream_id} after its END_STREAM", STREAM_CLOSED
                )
        end_stream = bool(flags & END_STREAM)
        if flags & END_HEADERS:
            self._header_block(stream_id, data[start:stop], end_stream, dependency)
            return
        self._block_id = stream_id
        self._block = bytearray(memoryview(data)[start:stop])
        self._block_frames = 0
        self._block_end_stream = end_stream
        self._block_dependency = dependency
        self._fast_calls = {}  # every frame goes the slow way until the block ends

    def _continuation(self, flags: int, data: bytes, start: int, stop: int) -> None:
        self._block_frames += 1
        if self._block_frames > MAX_CONTINUATIONS:
            raise H2ProtocolError(
                f"a header block of more than {MAX_CONTINUATIONS} CONTINUATION frames",
                ENHANCE_YOUR_CALM,
            )
        block = self._block
        block += memoryview(data)[start:stop]
        if len(block) > self._max_block:
            raise H2ProtocolError(
                f"a header block of more than {self._max_block} bytes", ENHANCE_YOUR_CALM
            )
        if flags & END_HEADERS:
            stream_id = self._block_id
            self._block_id = 0
            self._block = bytearray()
            self._fast_calls = self._calls
            self._header_block(
                stream_id, bytes(block), self._block_end_stream, self._block_dependency
            )

    def _header_block(
        self, stream_id: int, block: bytes, end_stream: bool, dependency: int
    ) -> None:
        """A complete header block: decoded whatever the stream (HPACK has state)."""
        try:
            headers = self._decoder.decode(block)
        except HeaderListTooLarge as exc:
            raise H2ProtocolError(f"header block too large: {exc}", ENHANCE_YOUR_CALM) from None
        except HpackError as exc:
            raise H2ProtocolError(f"bad header block: {exc}", COMPRESSION_ERROR) from None
        call = self._calls.get(stream_id)
        if call is None:
            if self._closed.get(stream_id, _BY_US) == _BY_PEER_RESET:
                self._reset(stream_id, STREAM_CLOSED)
            return  # a call we reset: its headers only keep HPACK in step
        if dependency == stream_id:
            self._stream_error(call, PROTOCOL_ERROR, "a stream depending on itself")
            return
        self._on_headers(call, headers, end_stream)

    def _on_headers(self, call: _Call, headers: list[tuple[str, str]], end_stream: bool) -> None:
        if call.state == _AWAITING:
            problem = _malformed(headers, response=True)
            if problem is not None:
                self._stream_error(call, PROTOCOL_ERROR, f"malformed response headers: {problem}")
                return
            http_status = headers[0][1]
            if http_status[0] == "1":
                # Informational (1xx): the final response follows; 101 does not exist
                # in HTTP/2 (RFC 9113 8.6).
                if end_stream or http_status == "101":
                    self._stream_error(
                        call, PROTOCOL_ERROR, f"informational response {http_status} misused"
                    )
                return
            fields = dict(headers)
            if http_status != "200":
                code = _HTTP_STATUS.get(int(http_status), UNKNOWN)
                self._end(
                    call,
                    Status(code, f"HTTP status {http_status}"),
                    _BY_END if end_stream else _BY_US,
                )
                if not end_stream:
                    self._reset(call.id, CANCEL)
                return
            length = fields.get("content-length")
            if length is not None:
                if not (length.isascii() and length.isdigit() and len(length) <= 18):
                    self._stream_error(
                        call,
                        PROTOCOL_ERROR,
                        f"malformed response headers: invalid content-length {length[:20]!r}",
                    )
                    return
                call.content_length = int(length)
            call.state = _RESPONDED
            if not end_stream:
                self._refresh_fast(call)
                return
            # A response without messages: its trailers are these headers.
            if call.content_length > 0:
                self._stream_error(call, PROTOCOL_ERROR, "less DATA than its content-length")
                return
            self._end(call, _status_of(fields), _BY_END)
            return
        if not end_stream:
            self._stream_error(call, PROTOCOL_ERROR, "a second header block without END_STREAM")
            return
        problem = _malformed(headers, response=False)
        if problem is not None:
            self._stream_error(call, PROTOCOL_ERROR, f"malformed trailers: {problem}")
            return
        if call.content_length >= 0 and call.body_received != call.content_length:
            self._stream_error(call, PROTOCOL_ERROR, "less DATA than its content-length")
            return
        status = _status_of(dict(headers))
        if call.partial and status.code == OK:
            status = Status(INTERNAL, "the server ended the call in the middle of a message")
        self._end(call, status, _BY_END)


def _too_large(length: int) -> H2ProtocolError:
    return H2ProtocolError(
        f"a frame of {length} bytes, above the {MAX_FRAME} bytes allowed", FRAME_SIZE_ERROR
    )


def _interrupted(stream_id: int, ftype: int) -> H2ProtocolError:
    what = _TYPE_NAMES[ftype] if ftype < len(_TYPE_NAMES) else f"type 0x{ftype:x}"
    return H2ProtocolError(f"the header block of stream {stream_id} interrupted by a {what} frame")


def _no_preface(ftype: int) -> H2ProtocolError:
    what = _TYPE_NAMES[ftype] if ftype < len(_TYPE_NAMES) else f"type 0x{ftype:x}"
    return H2ProtocolError(f"the server's preface must start with SETTINGS, not {what}")


def _malformed(headers: Iterable[tuple[str, str]], *, response: bool) -> str | None:
    """Why a header block is malformed (RFC 9113 8.2, 8.3), or None. A response's
    block must start with its one :status (three ASCII digits); trailers have no
    pseudo-header."""
    status: str | None = None
    regular = False
    for name, value in headers:
        if name[:1] == ":":
            if not response:
                return f"pseudo-header {name!r} in trailers"
            if name != ":status":
                return f"pseudo-header {name!r} in a response"
            if regular:
                return ":status after a regular field"
            if status is not None:
                return "two :status fields"
            status = value
            if not (len(value) == 3 and value.isascii() and value.isdigit()):
                return f"invalid :status {value[:20]!r}"
        else:
            regular = True
            if not name or _BAD_NAME.search(name):
                return f"invalid field name {name[:40]!r}"
            if name in _CONNECTION_FIELDS:
                return f"connection-specific field {name!r}"
            if name == "te" and value.lower() != "trailers":
                return f"te: {value[:20]!r}"
            if _BAD_VALUE.search(value):
                return f"invalid value of field {name[:40]!r}"
    if response and status is None:
        return "no :status"
    return None


def _status_of(trailers: dict[str, str]) -> Status:
    raw = trailers.get("grpc-status")
    if raw is None:
        return Status(UNKNOWN, "the server sent no gRPC status")
    if not (0 < len(raw) <= 10 and raw.isascii() and raw.isdigit()):
        return Status(UNKNOWN, f"the server sent an invalid gRPC status {raw[:20]!r}")
    # grpc-message is percent-encoded UTF-8.
    details = unquote(trailers.get("grpc-message", ""), encoding="utf-8", errors="replace")
    return Status(int(raw), details)
