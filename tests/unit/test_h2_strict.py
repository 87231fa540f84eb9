"""Our HTTP/2 client (liftbridge_nats._h2) against servers that break RFC 9113.

Every case builds the bytes a broken server sends, feeds them to
:meth:`H2Connection.receive` and checks the ending RFC 9113 asks for: a connection
error (H2ProtocolError with its code, a GOAWAY with that code queued, every call
ended, nothing more read) or a stream error (a RST_STREAM with its code queued, that
call ended, the others going on). Valid streams are checked against the h2 package in
test_h2_differential.py; the HPACK decoder's own errors in test_hpack.py.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from liftbridge_nats._h2 import (
    ACK,
    CANCEL,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    INTERNAL,
    MAX_CONTINUATIONS,
    MAX_FRAME,
    MAX_WINDOW,
    NO_ERROR,
    OK,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    RESOURCE_EXHAUSTED,
    RST_STREAM,
    SETTINGS,
    STREAM_CLOSED,
    UNAVAILABLE,
    UNKNOWN,
    WINDOW_UPDATE,
    H2Connection,
    H2ProtocolError,
    Status,
    frame,
    message,
)
from liftbridge_nats._hpack import (
    HeaderListTooLarge,
    HpackDecoder,
    _encode_string,
    encode_headers,
)

PATH = "/proto.API/Subscribe"
WINDOW = 64 * 1024
RESPONSE = [(":status", "200"), ("content-type", "application/grpc")]


class Owner:
    """A call's owner that records what the connection gives it."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.status: Status | None = None
        self.wakes = 0
        self.needs: list[int] = []

    def h2_append(self, body: bytes) -> None:
        assert self.status is None, "a message after the end"
        assert type(body) is bytes
        self.bodies.append(body)

    def h2_wake(self) -> None:
        self.wakes += 1

    def h2_need(self, size: int) -> None:
        self.needs.append(size)

    def h2_end(self, status: Status) -> None:
        assert self.status is None, "ended twice"
        self.status = status


@dataclass
class Frame:
    type: int
    flags: int
    stream: int
    payload: bytes

    @property
    def code(self) -> int:
        """The error code of a RST_STREAM or GOAWAY."""
        offset = 4 if self.type == GOAWAY else 0
        return int(struct.unpack_from(">L", self.payload, offset)[0])


def parse(data: bytes) -> list[Frame]:
    """The frames of what the client sent (after the preface)."""
    if data.startswith(PREFACE):
        data = data[len(PREFACE) :]
    frames = []
    pos = 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        ftype, flags = data[pos + 3], data[pos + 4]
        stream = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        frames.append(Frame(ftype, flags, stream, data[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    assert pos == len(data)
    return frames


def block(headers: list[tuple[str, str]]) -> bytes:
    return encode_headers(headers)


def header_frames(stream: int, payload: bytes, flags: int = 0) -> list[bytes]:
    """A header block as HEADERS and CONTINUATION frames of the largest size."""
    pieces = [payload[i : i + MAX_FRAME] for i in range(0, len(payload), MAX_FRAME)] or [b""]
    return [
        frame(
            HEADERS if i == 0 else CONTINUATION,
            (flags if i == 0 else 0) | (END_HEADERS if i == len(pieces) - 1 else 0),
            stream,
            piece,
        )
        for i, piece in enumerate(pieces)
    ]


# A literal added to the dynamic table: name "x", a 4,000-byte value (4,033 bytes counted).
BIG_ENTRY = b"\x40" + _encode_string("x") + _encode_string("y" * 4000)


def headers_frame(
    stream: int, headers: list[tuple[str, str]], *, end_stream: bool = False, flags: int = 0
) -> bytes:
    flags |= END_HEADERS | (END_STREAM if end_stream else 0)
    return frame(HEADERS, flags, stream, block(headers))


def data_frame(stream: int, payload: bytes, flags: int = 0) -> bytes:
    return frame(DATA, flags, stream, payload)


def settings(*pairs: tuple[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HL", k, v) for k, v in pairs))


def u32(value: int) -> bytes:
    return struct.pack(">L", value)


class Client:
    """An H2Connection with calls on streams 1 and 3 (3: no response yet unless asked),
    past the server's preface."""

    def __init__(self, *, respond: tuple[int, ...] = (1, 3), preface: bool = True, **kw: int):
        self.conn = H2Connection("broker:9292", **kw)  # type: ignore[arg-type]
        self.conn.initiate()
        self.owners: dict[int, Owner] = {}
        self.cancelled: set[int] = set()
        for _ in range(2):
            owner = Owner()
            stream = self.conn.start_call(PATH, b"req", owner, window=WINDOW)
            self.owners[stream] = owner
        if preface:
            self.feed(settings() + frame(SETTINGS, ACK, 0))
        for stream in respond:
            self.feed(headers_frame(stream, RESPONSE))
        self.conn.outbox.clear()

    def feed(self, data: bytes) -> None:
        self.conn.receive(data)

    def sent(self) -> list[Frame]:
        frames = parse(bytes(self.conn.outbox))
        self.conn.outbox.clear()
        return frames

    def open(self) -> set[int]:
        return {s for s, o in self.owners.items() if o.status is None} - self.cancelled

    def end_stream_1(self) -> None:
        """Stream 1 ends normally (trailers)."""
        self.feed(headers_frame(1, [("grpc-status", "0")], end_stream=True))
        assert self.owners[1].status is not None and self.owners[1].status.code == OK
        self.conn.outbox.clear()

    def peer_resets_1(self) -> None:
        self.feed(frame(RST_STREAM, 0, 1, u32(CANCEL)))
        assert self.owners[1].status is not None
        self.conn.outbox.clear()

    def we_cancel_1(self) -> None:
        self.conn.cancel(1)
        self.cancelled.add(1)
        self.conn.outbox.clear()


def expect_connection_error(client: Client, data: bytes, code: int) -> H2ProtocolError:
    open_before = client.open()
    with pytest.raises(H2ProtocolError) as caught:
        client.feed(data)
    assert caught.value.code == code, caught.value
    sent = client.sent()
    goaways = [f for f in sent if f.type == GOAWAY]
    assert len(goaways) == 1, sent
    assert goaways[0].stream == 0
    assert goaways[0].code == code
    assert struct.unpack_from(">L", goaways[0].payload)[0] == 0  # no stream of the server's
    for stream in open_before:
        status = client.owners[stream].status
        assert status is not None and status.code == UNAVAILABLE, status
        assert "HTTP/2" in status.details
        assert status.violation == code
    assert client.conn.open_calls == 0
    assert not client.conn.can_start
    # Nothing more is read: not even a PING gets an answer.
    client.feed(frame(PING, 0, 0, bytes(8)))
    assert not client.conn.outbox
    return caught.value


def expect_stream_error(client: Client, data: bytes, stream: int, code: int) -> None:
    open_before = client.open()
    client.feed(data)  # no connection error
    sent = client.sent()
    assert not [f for f in sent if f.type == GOAWAY], sent
    resets = [f for f in sent if f.type == RST_STREAM]
    assert [(f.stream, f.code) for f in resets] == [(stream, code)], sent
    if stream in open_before:
        status = client.owners[stream].status
        assert status is not None and status.code == INTERNAL, status
        assert not status.local
        assert status.violation == code
    assert client.open() == open_before - {stream}
    assert client.conn.can_start


# ---------------------------------------------------------------------- connection errors

# (name, how to prepare the client, the bytes, the expected code)
Prepare = Callable[[Client], None]


def _nothing(client: Client) -> None:
    pass


def _open_block(client: Client) -> None:
    # Trailers of stream 1 begin and wait for CONTINUATION frames.
    client.feed(frame(HEADERS, END_STREAM, 1, block([("grpc-status", "0")])[:3]))


def _near_connection_window(client: Client) -> None:
    client.conn._received = MAX_WINDOW - 10


def _cancel_near_connection_window(client: Client) -> None:
    client.we_cancel_1()
    client.conn._received = MAX_WINDOW - 150


def _wide_send_window(client: Client) -> None:
    # Stream 1's send window: 65,535 less the 8 bytes of its request, then up to 2**31-1.
    client.feed(frame(WINDOW_UPDATE, 0, 1, u32(MAX_WINDOW - 65_535 + 8)))


CONNECTION_ERRORS: list[tuple[str, Prepare, bytes, int]] = [
    # Frame sizes.
    (
        "frame above our max frame size",
        _nothing,
        data_frame(1, message(b"x" * MAX_FRAME)),
        FRAME_SIZE_ERROR,
    ),
    (
        "1 MiB frame header alone",
        _nothing,
        struct.pack(">L", (1 << 20) << 8 | DATA) + b"\x00" + u32(1),
        FRAME_SIZE_ERROR,
    ),
    ("padded DATA without pad length", _nothing, data_frame(1, b"", PADDED), FRAME_SIZE_ERROR),
    ("padding longer than DATA", _nothing, data_frame(1, b"\x05abcd", PADDED), PROTOCOL_ERROR),
    (
        "padding longer than DATA on a closed stream",
        Client.end_stream_1,
        data_frame(1, b"\x09", PADDED),
        PROTOCOL_ERROR,
    ),
    ("padded HEADERS without pad length", _nothing, frame(HEADERS, PADDED, 1), FRAME_SIZE_ERROR),
    (
        "padding longer than HEADERS",
        _nothing,
        frame(HEADERS, PADDED | END_HEADERS, 1, b"\x03\x88\x00"),
        PROTOCOL_ERROR,
    ),
    (
        "PRIORITY-flagged HEADERS too short",
        _nothing,
        frame(HEADERS, PRIORITY_FLAG | END_HEADERS, 1, b"\x00\x00\x00"),
        FRAME_SIZE_ERROR,
    ),
    (
        "padded, PRIORITY-flagged HEADERS too short",
        _nothing,
        frame(HEADERS, PADDED | PRIORITY_FLAG | END_HEADERS, 1, b"\x00\x00\x00\x00\x00"),
        FRAME_SIZE_ERROR,
    ),
    (
        "padding longer than a PRIORITY-flagged HEADERS",
        _nothing,
        frame(HEADERS, PADDED | PRIORITY_FLAG | END_HEADERS, 1, b"\x02" + bytes(5) + b"\x88"),
        PROTOCOL_ERROR,
    ),
    ("SETTINGS ACK with a payload", _nothing, frame(SETTINGS, ACK, 0, bytes(6)), FRAME_SIZE_ERROR),
    ("SETTINGS of 7 bytes", _nothing, frame(SETTINGS, 0, 0, bytes(7)), FRAME_SIZE_ERROR),
    ("RST_STREAM of 3 bytes", _nothing, frame(RST_STREAM, 0, 1, bytes(3)), FRAME_SIZE_ERROR),
    ("RST_STREAM of 5 bytes", _nothing, frame(RST_STREAM, 0, 1, bytes(5)), FRAME_SIZE_ERROR),
    ("WINDOW_UPDATE of 3 bytes", _nothing, frame(WINDOW_UPDATE, 0, 1, bytes(3)), FRAME_SIZE_ERROR),
    (
        "WINDOW_UPDATE of 5 bytes on the connection",
        _nothing,
        frame(WINDOW_UPDATE, 0, 0, u32(1) + b"\x00"),
        FRAME_SIZE_ERROR,
    ),
    ("PING of 7 bytes", _nothing, frame(PING, 0, 0, bytes(7)), FRAME_SIZE_ERROR),
    ("PING ACK of 9 bytes", _nothing, frame(PING, ACK, 0, bytes(9)), FRAME_SIZE_ERROR),
    ("GOAWAY of 7 bytes", _nothing, frame(GOAWAY, 0, 0, bytes(7)), FRAME_SIZE_ERROR),
    # Stream 0 and streams that must be 0.
    ("SETTINGS on a stream", _nothing, frame(SETTINGS, 0, 1), PROTOCOL_ERROR),
    ("SETTINGS ACK on a stream", _nothing, frame(SETTINGS, ACK, 1), PROTOCOL_ERROR),
    ("PING on a stream", _nothing, frame(PING, 0, 1, bytes(8)), PROTOCOL_ERROR),
    ("GOAWAY on a stream", _nothing, frame(GOAWAY, 0, 1, bytes(8)), PROTOCOL_ERROR),
    ("DATA on stream 0", _nothing, data_frame(0, message(b"x")), PROTOCOL_ERROR),
    ("HEADERS on stream 0", _nothing, headers_frame(0, RESPONSE), PROTOCOL_ERROR),
    ("RST_STREAM on stream 0", _nothing, frame(RST_STREAM, 0, 0, u32(CANCEL)), PROTOCOL_ERROR),
    ("PRIORITY on stream 0", _nothing, frame(PRIORITY, 0, 0, bytes(5)), PROTOCOL_ERROR),
    (
        "WINDOW_UPDATE of 0 on the connection",
        _nothing,
        frame(WINDOW_UPDATE, 0, 0, u32(0)),
        PROTOCOL_ERROR,
    ),
    # Idle streams (never opened: odd ids from 5, every even id).
    ("DATA on an idle stream", _nothing, data_frame(5, message(b"x")), PROTOCOL_ERROR),
    ("DATA on an even stream", _nothing, data_frame(2, message(b"x")), PROTOCOL_ERROR),
    ("HEADERS on an idle stream", _nothing, headers_frame(5, RESPONSE), PROTOCOL_ERROR),
    ("HEADERS on an even stream", _nothing, headers_frame(4, RESPONSE), PROTOCOL_ERROR),
    ("RST_STREAM on an idle stream", _nothing, frame(RST_STREAM, 0, 7, u32(0)), PROTOCOL_ERROR),
    (
        "WINDOW_UPDATE on an idle stream",
        _nothing,
        frame(WINDOW_UPDATE, 0, 9, u32(1)),
        PROTOCOL_ERROR,
    ),
    (
        "PRIORITY of 4 bytes on an idle stream",
        _nothing,
        frame(PRIORITY, 0, 5, bytes(4)),
        FRAME_SIZE_ERROR,
    ),
    (
        "idle stream depending on itself",
        _nothing,
        frame(PRIORITY, 0, 5, u32(5) + b"\x10"),
        PROTOCOL_ERROR,
    ),
    (
        "PUSH_PROMISE",
        _nothing,
        frame(PUSH_PROMISE, END_HEADERS, 1, u32(2) + b"\x88"),
        PROTOCOL_ERROR,
    ),
    (
        "CONTINUATION outside a header block",
        _nothing,
        frame(CONTINUATION, END_HEADERS, 1, b"\x88"),
        PROTOCOL_ERROR,
    ),
    # Closed streams (END_STREAM from the server).
    (
        "DATA after END_STREAM",
        Client.end_stream_1,
        data_frame(1, message(b"x")),
        STREAM_CLOSED,
    ),
    (
        "HEADERS after END_STREAM",
        Client.end_stream_1,
        headers_frame(1, [("grpc-status", "0")], end_stream=True),
        STREAM_CLOSED,
    ),
    # Header blocks.
    (
        "header block interrupted by DATA",
        _open_block,
        data_frame(3, message(b"x")),
        PROTOCOL_ERROR,
    ),
    ("header block interrupted by PING", _open_block, frame(PING, 0, 0, bytes(8)), PROTOCOL_ERROR),
    (
        "header block interrupted by an unknown frame",
        _open_block,
        frame(0xEE, 0, 0, b"x"),
        PROTOCOL_ERROR,
    ),
    (
        "header block continued on another stream",
        _open_block,
        frame(CONTINUATION, END_HEADERS, 3, b""),
        PROTOCOL_ERROR,
    ),
    (
        "header block of 65 CONTINUATION frames",
        _open_block,
        frame(CONTINUATION, 0, 1, b"") * MAX_CONTINUATIONS + frame(CONTINUATION, END_HEADERS, 1),
        ENHANCE_YOUR_CALM,
    ),
    (
        "header block of 150 KiB",
        _open_block,
        frame(CONTINUATION, 0, 1, b"\x00" * MAX_FRAME) * 10,
        ENHANCE_YOUR_CALM,
    ),
    (
        "header list above 64 KiB",
        _nothing,
        b"".join(header_frames(1, block([(f"x-h{i}", "v" * 8000) for i in range(9)]))),
        ENHANCE_YOUR_CALM,
    ),
    ("HPACK index 0", _nothing, frame(HEADERS, END_HEADERS, 1, b"\x80"), COMPRESSION_ERROR),
    (
        "HPACK table size above ours",
        _nothing,
        frame(HEADERS, END_HEADERS, 1, b"\x3f\xe2\x1f"),
        COMPRESSION_ERROR,
    ),
    (
        "HPACK Huffman string with EOS",
        _nothing,
        frame(HEADERS, END_HEADERS, 1, b"\x40\x84\xff\xff\xff\xff\x00"),
        COMPRESSION_ERROR,
    ),
    (
        "header block of a reset stream still decoded",
        Client.we_cancel_1,
        frame(HEADERS, END_HEADERS, 1, b"\xbe"),
        COMPRESSION_ERROR,
    ),
    # Flow control.
    (
        "DATA beyond the call's window",
        _nothing,
        b"".join(data_frame(1, message(b"x" * 16_000)) for _ in range(5)),
        FLOW_CONTROL_ERROR,
    ),
    (
        "padded DATA beyond the call's window",
        _nothing,
        b"".join(
            data_frame(1, b"\xff" + message(b"x" * 15_000) + bytes(255), PADDED) for _ in range(5)
        ),
        FLOW_CONTROL_ERROR,
    ),
    (
        "DATA beyond the connection's window",
        _near_connection_window,
        data_frame(1, message(b"x" * 100)),
        FLOW_CONTROL_ERROR,
    ),
    (
        "ignored DATA beyond the connection's window",
        _cancel_near_connection_window,
        data_frame(1, message(b"x" * 100)) + data_frame(1, message(b"x" * 100)),
        FLOW_CONTROL_ERROR,
    ),
    (
        "WINDOW_UPDATE past 2**31-1 on the connection",
        _nothing,
        frame(WINDOW_UPDATE, 0, 0, u32(MAX_WINDOW)),
        FLOW_CONTROL_ERROR,
    ),
    # SETTINGS values.
    ("ENABLE_PUSH 1 from a server", _nothing, settings((0x2, 1)), PROTOCOL_ERROR),
    ("ENABLE_PUSH 2", _nothing, settings((0x2, 2)), PROTOCOL_ERROR),
    ("INITIAL_WINDOW_SIZE 2**31", _nothing, settings((0x4, 2**31)), FLOW_CONTROL_ERROR),
    (
        "INITIAL_WINDOW_SIZE taking a window past 2**31-1",
        _wide_send_window,
        settings((0x4, 65_535 + 1)),
        FLOW_CONTROL_ERROR,
    ),
    ("MAX_FRAME_SIZE 16383", _nothing, settings((0x5, 16_383)), PROTOCOL_ERROR),
    ("MAX_FRAME_SIZE 2**24", _nothing, settings((0x5, 2**24)), PROTOCOL_ERROR),
    ("ENABLE_CONNECT_PROTOCOL 2", _nothing, settings((0x8, 2)), PROTOCOL_ERROR),
]


@pytest.mark.parametrize(
    ("prepare", "data", "code"),
    [pytest.param(p, d, c, id=name) for name, p, d, c in CONNECTION_ERRORS],
)
def test_connection_errors(prepare: Prepare, data: bytes, code: int) -> None:
    client = Client(respond=(1,))
    prepare(client)
    client.conn.outbox.clear()
    expect_connection_error(client, data, code)


@pytest.mark.parametrize(
    ("first", "code"),
    [
        pytest.param(frame(PING, 0, 0, bytes(8)), PROTOCOL_ERROR, id="PING"),
        pytest.param(frame(SETTINGS, ACK, 0), PROTOCOL_ERROR, id="SETTINGS ACK"),
        pytest.param(headers_frame(1, RESPONSE), PROTOCOL_ERROR, id="HEADERS"),
        pytest.param(data_frame(1, message(b"x")), PROTOCOL_ERROR, id="DATA"),
        pytest.param(frame(0xEE, 0, 0, b"x"), PROTOCOL_ERROR, id="unknown type"),
        pytest.param(b"HTTP/1.1 400 Bad Request\r\n\r\n", FRAME_SIZE_ERROR, id="HTTP/1.1"),
    ],
)
def test_the_server_preface_starts_with_settings(first: bytes, code: int) -> None:
    client = Client(respond=(), preface=False)
    expect_connection_error(client, first, code)


def test_a_frame_header_split_across_reads_is_checked_once_complete() -> None:
    client = Client()
    big = struct.pack(">L", (MAX_FRAME + 1) << 8 | DATA) + b"\x00" + u32(1)
    client.feed(big[:4])
    assert not client.conn.outbox
    expect_connection_error(client, big[4:], FRAME_SIZE_ERROR)


def test_a_connection_error_in_a_later_chunk_keeps_earlier_messages() -> None:
    client = Client()
    client.feed(data_frame(1, message(b"one")))
    expect_connection_error(client, data_frame(1, message(b"two")) + frame(PING, 0, 1), 0x1)
    assert client.owners[1].bodies == [b"one", b"two"]
    assert "violation=PROTOCOL_ERROR" in repr(client.owners[1].status)


# ---------------------------------------------------------------------- stream errors


def _malformed(headers: list[tuple[str, str]], *, end_stream: bool = False) -> bytes:
    return headers_frame(3, headers, end_stream=end_stream)


MALFORMED_RESPONSES: list[tuple[str, list[tuple[str, str]]]] = [
    ("no :status", [("content-type", "application/grpc")]),
    ("non-ASCII digit", [(":status", "²00")]),
    ("superscript two alone", [(":status", "2²0")]),
    ("two digits", [(":status", "20")]),
    ("four digits", [(":status", "2000")]),
    ("letters", [(":status", "abc")]),
    ("empty :status", [(":status", "")]),
    ("two :status", [(":status", "200"), (":status", "200")]),
    ("request pseudo-header", [(":status", "200"), (":path", "/")]),
    ("unknown pseudo-header", [(":status", "200"), (":x", "y")]),
    (":status after a field", [("content-type", "application/grpc"), (":status", "200")]),
    ("uppercase name", [(":status", "200"), ("Content-Type", "application/grpc")]),
    ("empty name", [(":status", "200"), ("", "x")]),
    ("space in name", [(":status", "200"), ("a b", "x")]),
    ("colon in name", [(":status", "200"), ("a:b", "x")]),
    ("DEL in name", [(":status", "200"), ("a\x7f", "x")]),
    ("latin-1 in name", [(":status", "200"), ("caf\xe9", "x")]),
    ("NUL in value", [(":status", "200"), ("x", "a\x00b")]),
    ("CR in value", [(":status", "200"), ("x", "a\rb")]),
    ("LF in value", [(":status", "200"), ("x", "a\nb")]),
    ("leading space", [(":status", "200"), ("x", " a")]),
    ("trailing tab", [(":status", "200"), ("x", "a\t")]),
    ("connection field", [(":status", "200"), ("connection", "close")]),
    ("transfer-encoding", [(":status", "200"), ("transfer-encoding", "chunked")]),
    ("te other than trailers", [(":status", "200"), ("te", "gzip")]),
    ("content-length not digits", [(":status", "200"), ("content-length", "1e3")]),
    ("content-length superscript", [(":status", "200"), ("content-length", "²")]),
]


@pytest.mark.parametrize("headers", [pytest.param(h, id=name) for name, h in MALFORMED_RESPONSES])
@pytest.mark.parametrize("end_stream", [False, True], ids=["headers", "trailers-only"])
def test_malformed_response_headers_are_a_stream_error(
    headers: list[tuple[str, str]], end_stream: bool
) -> None:
    client = Client(respond=(1,))
    expect_stream_error(client, _malformed(headers, end_stream=end_stream), 3, PROTOCOL_ERROR)
    status = client.owners[3].status
    assert status is not None and "malformed" in status.details


MALFORMED_TRAILERS: list[tuple[str, list[tuple[str, str]]]] = [
    ("pseudo-header", [(":status", "200"), ("grpc-status", "0")]),
    ("uppercase name", [("Grpc-Status", "0")]),
    ("CR in value", [("grpc-status", "0"), ("grpc-message", "a\rb")]),
    ("connection field", [("grpc-status", "0"), ("keep-alive", "1")]),
]


@pytest.mark.parametrize("trailers", [pytest.param(h, id=name) for name, h in MALFORMED_TRAILERS])
def test_malformed_trailers_are_a_stream_error(trailers: list[tuple[str, str]]) -> None:
    client = Client()
    expect_stream_error(client, headers_frame(1, trailers, end_stream=True), 1, PROTOCOL_ERROR)


def _rst_1(client: Client) -> None:
    client.peer_resets_1()


STREAM_ERRORS: list[tuple[str, Prepare, bytes, int, int]] = [
    ("PRIORITY of 4 bytes", _nothing, frame(PRIORITY, 0, 1, bytes(4)), 1, FRAME_SIZE_ERROR),
    ("PRIORITY of 6 bytes", _nothing, frame(PRIORITY, 0, 1, bytes(6)), 1, FRAME_SIZE_ERROR),
    (
        "stream depending on itself",
        _nothing,
        frame(PRIORITY, 0, 1, u32(1) + b"\x10"),
        1,
        PROTOCOL_ERROR,
    ),
    (
        "HEADERS depending on itself",
        _nothing,
        frame(HEADERS, END_HEADERS | PRIORITY_FLAG, 3, u32(3) + b"\x10" + block(RESPONSE)),
        3,
        PROTOCOL_ERROR,
    ),
    ("DATA before the response headers", _nothing, data_frame(3, message(b"x")), 3, PROTOCOL_ERROR),
    (
        "1xx with END_STREAM",
        _nothing,
        headers_frame(3, [(":status", "103")], end_stream=True),
        3,
        PROTOCOL_ERROR,
    ),
    (
        "101 Switching Protocols",
        _nothing,
        headers_frame(3, [(":status", "101")]),
        3,
        PROTOCOL_ERROR,
    ),
    (
        "second header block without END_STREAM",
        _nothing,
        headers_frame(1, [("grpc-status", "0")]),
        1,
        PROTOCOL_ERROR,
    ),
    ("WINDOW_UPDATE of 0", _nothing, frame(WINDOW_UPDATE, 0, 1, u32(0)), 1, PROTOCOL_ERROR),
    (
        "WINDOW_UPDATE past 2**31-1",
        _nothing,
        frame(WINDOW_UPDATE, 0, 1, u32(MAX_WINDOW)),
        1,
        FLOW_CONTROL_ERROR,
    ),
    # After the server reset the stream: anything but PRIORITY (and RST_STREAM).
    ("DATA after the server's RST_STREAM", _rst_1, data_frame(1, message(b"x")), 1, STREAM_CLOSED),
    (
        "HEADERS after the server's RST_STREAM",
        _rst_1,
        headers_frame(1, [("grpc-status", "0")], end_stream=True),
        1,
        STREAM_CLOSED,
    ),
    (
        "WINDOW_UPDATE after the server's RST_STREAM",
        _rst_1,
        frame(WINDOW_UPDATE, 0, 1, u32(1)),
        1,
        STREAM_CLOSED,
    ),
    (
        "PRIORITY of 4 bytes after END_STREAM",
        Client.end_stream_1,
        frame(PRIORITY, 0, 1, bytes(4)),
        1,
        FRAME_SIZE_ERROR,
    ),
]


@pytest.mark.parametrize(
    ("prepare", "data", "stream", "code"),
    [pytest.param(p, d, s, c, id=name) for name, p, d, s, c in STREAM_ERRORS],
)
def test_stream_errors(prepare: Prepare, data: bytes, stream: int, code: int) -> None:
    client = Client(respond=(1,))
    prepare(client)
    client.conn.outbox.clear()
    expect_stream_error(client, data, stream, code)


def test_frames_after_a_stream_error_on_a_closed_stream_are_ignored() -> None:
    client = Client()
    client.peer_resets_1()
    expect_stream_error(client, data_frame(1, message(b"x")), 1, STREAM_CLOSED)
    # Answered once: the stream now counts as reset by us.
    client.feed(data_frame(1, message(b"x")) + frame(WINDOW_UPDATE, 0, 1, u32(5)))
    assert client.sent() == []


@pytest.mark.parametrize(
    ("headers", "frames"),
    [
        pytest.param(
            [*RESPONSE, ("content-length", "10")],
            [data_frame(3, message(b"x" * 6))],
            id="more DATA than content-length",
        ),
        pytest.param(
            [*RESPONSE, ("content-length", "10")],
            [data_frame(3, message(b"x"), END_STREAM)],
            id="less DATA at END_STREAM",
        ),
        pytest.param(
            [*RESPONSE, ("content-length", "10")],
            [
                data_frame(3, message(b"x")),
                headers_frame(3, [("grpc-status", "0")], end_stream=True),
            ],
            id="less DATA at the trailers",
        ),
    ],
)
def test_content_length_must_match(headers: list[tuple[str, str]], frames: list[bytes]) -> None:
    client = Client(respond=(1,))
    client.feed(headers_frame(3, headers))
    expect_stream_error(client, b"".join(frames), 3, PROTOCOL_ERROR)


def test_trailers_only_response_with_content_length_above_zero() -> None:
    client = Client(respond=(1,))
    headers = [*RESPONSE, ("content-length", "3"), ("grpc-status", "0")]
    expect_stream_error(client, headers_frame(3, headers, end_stream=True), 3, PROTOCOL_ERROR)


def test_a_matching_content_length_is_read() -> None:
    client = Client(respond=(1,))
    body = message(b"abc") + message(b"de")
    client.feed(headers_frame(3, [*RESPONSE, ("content-length", str(len(body)))]))
    client.feed(data_frame(3, body[:7]) + data_frame(3, body[7:]))
    client.feed(headers_frame(3, [("grpc-status", "0")], end_stream=True))
    assert client.owners[3].bodies == [b"abc", b"de"]
    assert client.owners[3].status is not None and client.owners[3].status.code == OK


# ---------------------------------------------------------------------- statuses


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("0", OK),
        ("14", UNAVAILABLE),
        ("²", UNKNOWN),
        ("1²", UNKNOWN),
        ("³", UNKNOWN),
        ("", UNKNOWN),
        ("-1", UNKNOWN),
        ("1" * 5000, UNKNOWN),  # int() of it would raise ValueError
        (" 1", UNKNOWN),
    ],
)
def test_grpc_status_is_ascii_digits(raw: str, code: int) -> None:
    client = Client()
    trailers = [("grpc-status", raw), ("grpc-message", "%E2%9C%93 done")]
    if raw != raw.strip():
        # A value with surrounding whitespace is a malformed field: a stream error.
        expect_stream_error(client, headers_frame(1, trailers, end_stream=True), 1, PROTOCOL_ERROR)
        return
    client.feed(headers_frame(1, trailers, end_stream=True))
    status = client.owners[1].status
    assert status is not None and status.code == code
    if code == OK:
        assert status.details == "\u2713 done"


@pytest.mark.parametrize(
    ("http_status", "code"), [("503", UNAVAILABLE), ("404", 12), ("418", UNKNOWN), ("999", UNKNOWN)]
)
def test_an_http_status_other_than_200_ends_the_call(http_status: str, code: int) -> None:
    client = Client(respond=(1,))
    client.feed(headers_frame(3, [(":status", http_status)]))
    status = client.owners[3].status
    assert status is not None and status.code == code
    assert [(f.type, f.stream, f.code) for f in client.sent()] == [(RST_STREAM, 3, CANCEL)]


def test_informational_responses_come_before_the_final_one() -> None:
    client = Client(respond=(1,))
    client.feed(headers_frame(3, [(":status", "100")]) + headers_frame(3, [(":status", "103")]))
    assert client.owners[3].status is None
    client.feed(headers_frame(3, RESPONSE) + data_frame(3, message(b"m")))
    client.feed(headers_frame(3, [("grpc-status", "0")], end_stream=True))
    assert client.owners[3].bodies == [b"m"]
    assert client.owners[3].status is not None and client.owners[3].status.code == OK


def test_data_with_end_stream_ends_the_call_without_a_status() -> None:
    client = Client()
    client.feed(data_frame(1, message(b"a") + message(b"bc")[:3], END_STREAM))
    status = client.owners[1].status
    assert client.owners[1].bodies == [b"a"]
    assert (
        status is not None and status.code == INTERNAL and "middle of a message" in status.details
    )


# ---------------------------------------------------------------------- what is allowed


def test_frames_on_a_stream_we_reset_are_ignored_and_counted() -> None:
    client = Client()
    client.we_cancel_1()
    decoder_before = client.conn._decoder.table_size
    # DATA, trailers that add to the HPACK table, WINDOW_UPDATE, RST_STREAM, PRIORITY.
    indexed = b"\x40" + bytes([len(b"x-a")]) + b"x-a" + b"\x01b"  # literal, indexed
    client.feed(
        data_frame(1, message(b"late"))
        + frame(HEADERS, END_HEADERS | END_STREAM, 1, indexed)
        + frame(WINDOW_UPDATE, 0, 1, u32(10))
        + frame(RST_STREAM, 0, 1, u32(0))
        + frame(PRIORITY, 0, 1, bytes(5))
    )
    assert client.sent() == []
    assert client.conn._decoder.table_size > decoder_before  # HPACK kept in step
    assert client.conn._received >= len(message(b"late"))
    # The entry added by the ignored block is used by the next one.
    client.feed(frame(HEADERS, END_HEADERS | END_STREAM, 3, b"\xbe"))
    status = client.owners[3].status
    assert status is not None  # x-a: b, no grpc-status
    assert status.code == UNKNOWN


def test_frames_allowed_after_end_stream() -> None:
    client = Client()
    client.end_stream_1()
    client.feed(
        frame(WINDOW_UPDATE, 0, 1, u32(1))
        + frame(RST_STREAM, 0, 1, u32(NO_ERROR))
        + frame(PRIORITY, 0, 1, u32(3) + b"\x10")
    )
    assert client.sent() == []


def test_priority_and_unknown_frames_are_ignored() -> None:
    client = Client()
    client.feed(
        frame(PRIORITY, 0, 5, u32(1) + b"\x10")  # an idle stream may be prioritized
        + frame(PRIORITY, 0, 1, u32(3) + b"\x10")
        + frame(0xEE, 0xFF, 1, b"whatever")
        + frame(0x0A, 0, 0, b"\x00\x03abc")  # ALTSVC
        + settings((0x99, 7))  # an unknown setting
    )
    assert [f.type for f in client.sent()] == [SETTINGS]
    assert client.conn.can_start


def test_goaway_last_stream_only_goes_down() -> None:
    client = Client()
    client.feed(frame(GOAWAY, 0, 0, u32(1) + u32(NO_ERROR)))
    assert client.conn.goaway == (1, NO_ERROR)
    assert client.owners[3].status is not None and client.owners[3].status.code == UNAVAILABLE
    client.feed(frame(GOAWAY, 0, 0, u32(99) + u32(NO_ERROR) + b"debug data"))
    assert client.conn.goaway == (1, NO_ERROR)
    client.feed(data_frame(1, message(b"still")))
    assert client.owners[1].bodies == [b"still"]


def test_ping_is_answered_and_its_ack_is_not() -> None:
    client = Client()
    client.feed(frame(PING, 0, 0, b"12345678") + frame(PING, ACK, 0, b"abcdefgh"))
    assert [(f.type, f.flags, f.payload) for f in client.sent()] == [(PING, ACK, b"12345678")]


def test_the_reserved_bit_of_stream_ids_is_ignored() -> None:
    client = Client()
    client.feed(data_frame(1 | 1 << 31, message(b"r")))
    assert client.owners[1].bodies == [b"r"]


# ---------------------------------------------------------------------- our settings


def test_our_preface_advertises_the_limits() -> None:
    conn = H2Connection("b:1")
    conn.initiate()
    frames = parse(bytes(conn.outbox))
    assert frames[0].type == SETTINGS
    values = dict(struct.iter_unpack(">HL", frames[0].payload))
    assert values == {0x2: 0, 0x4: 16 * 1024, 0x6: 64 * 1024}
    assert frames[1].type == WINDOW_UPDATE and frames[1].stream == 0


def test_a_smaller_header_list_limit_is_advertised_and_enforced() -> None:
    conn = H2Connection("b:1", max_header_list_size=120)
    conn.initiate()
    assert dict(struct.iter_unpack(">HL", parse(bytes(conn.outbox))[0].payload))[0x6] == 120
    client = Client(max_header_list_size=120)
    expect_connection_error(
        client,
        headers_frame(1, [("grpc-status", "0"), ("grpc-message", "m" * 80)], end_stream=True),
        ENHANCE_YOUR_CALM,
    )


# ---------------------------------------------------------------------- windows and grants


def test_grant_caps_increments_at_the_largest_window() -> None:
    client = Client()
    conn = client.conn
    for increment in (2**31, 2**32, 2**40, MAX_WINDOW):
        conn.grant(1, increment)
    updates = [f for f in client.sent() if f.type == WINDOW_UPDATE]
    assert len(updates) == 1
    (increment,) = struct.unpack(">L", updates[0].payload)
    assert increment == MAX_WINDOW - WINDOW
    conn.grant(1, 0)
    conn.grant(1, -5)
    conn.grant(99, 10)
    assert client.sent() == []


def test_the_window_we_grant_is_the_window_we_enforce() -> None:
    client = Client(respond=(1,))
    conn = client.conn
    body = message(b"y" * (MAX_FRAME - 5))
    for _ in range(WINDOW // len(body)):
        client.feed(data_frame(1, body))
    left = WINDOW % len(body)
    client.feed(data_frame(1, b"\x00" * 0))  # zero-length DATA is free
    assert client.owners[1].status is None
    conn.grant(1, len(body) - left)
    client.feed(data_frame(1, body))
    assert client.owners[1].status is None
    expect_connection_error(client, data_frame(1, b"\x00"), FLOW_CONTROL_ERROR)


def test_padding_is_counted_and_given_back() -> None:
    client = Client()
    client.feed(data_frame(1, b"\x0a" + message(b"p") + bytes(10), PADDED))
    assert client.owners[1].bodies == [b"p"]
    updates = [f for f in client.sent() if f.type == WINDOW_UPDATE and f.stream == 1]
    assert [struct.unpack(">L", f.payload)[0] for f in updates] == [11]


# ---------------------------------------------------------------------- sending


def test_requests_wait_for_the_servers_window() -> None:
    conn = H2Connection("b:1")
    conn.initiate()
    conn.receive(settings((0x4, 0), (0x5, 16_384)) + frame(SETTINGS, ACK, 0))
    conn.outbox.clear()
    owner = Owner()
    request = b"r" * 100_000
    stream = conn.start_call(PATH, request, owner, window=WINDOW)
    sent = parse(bytes(conn.outbox))
    conn.outbox.clear()
    assert [f.type for f in sent] == [HEADERS, WINDOW_UPDATE]  # no DATA: window 0
    conn.receive(frame(WINDOW_UPDATE, 0, stream, u32(20_000)))
    sent = parse(bytes(conn.outbox))
    conn.outbox.clear()
    assert [len(f.payload) for f in sent if f.type == DATA] == [16_384, 3_616]
    assert all(not f.flags & END_STREAM for f in sent)
    conn.receive(frame(WINDOW_UPDATE, 0, stream, u32(100_000)))
    sent = parse(bytes(conn.outbox))
    conn.outbox.clear()
    # The connection's window (65,535 at first) now holds the rest back.
    assert sum(len(f.payload) for f in sent if f.type == DATA) == 65_535 - 20_000
    conn.receive(frame(WINDOW_UPDATE, 0, 0, u32(100_000)))
    sent = parse(bytes(conn.outbox))
    data = [f for f in sent if f.type == DATA]
    assert data[-1].flags & END_STREAM
    assert 65_535 + sum(len(f.payload) for f in data) == len(message(request))


def test_requests_follow_the_servers_max_frame_size() -> None:
    conn = H2Connection("b:1")
    conn.initiate()
    conn.receive(settings((0x5, 20_000)) + frame(SETTINGS, ACK, 0))
    conn.outbox.clear()
    conn.start_call(PATH, b"q" * 50_000, Owner(), window=WINDOW)
    data = [f for f in parse(bytes(conn.outbox)) if f.type == DATA]
    assert [len(f.payload) for f in data] == [20_000, 20_000, 10_005]


def test_an_initial_window_change_moves_the_send_windows() -> None:
    conn = H2Connection("b:1")
    conn.initiate()
    conn.receive(settings((0x4, 10)) + frame(SETTINGS, ACK, 0))
    conn.outbox.clear()
    conn.start_call(PATH, b"z" * 100, Owner(), window=WINDOW)
    assert [len(f.payload) for f in parse(bytes(conn.outbox)) if f.type == DATA] == [10]
    conn.outbox.clear()
    conn.receive(settings((0x4, 1000)))
    data = [f for f in parse(bytes(conn.outbox)) if f.type == DATA]
    assert [len(f.payload) for f in data] == [95] and data[0].flags & END_STREAM


def test_a_call_that_ends_before_its_request_is_sent_is_reset() -> None:
    conn = H2Connection("b:1")
    conn.initiate()
    conn.receive(settings((0x4, 0)) + frame(SETTINGS, ACK, 0))
    owner = Owner()
    stream = conn.start_call(PATH, b"req", owner, window=WINDOW)
    conn.outbox.clear()
    conn.receive(headers_frame(stream, [*RESPONSE, ("grpc-status", "5")], end_stream=True))
    assert owner.status is not None and owner.status.code == 5
    assert [(f.type, f.code) for f in parse(bytes(conn.outbox))] == [(RST_STREAM, CANCEL)]
    conn.outbox.clear()
    conn.receive(frame(WINDOW_UPDATE, 0, stream, u32(100)))
    assert not conn.outbox  # nothing more of the request


def test_no_call_starts_on_a_broken_connection() -> None:
    client = Client()
    expect_connection_error(client, frame(PING, 0, 1, bytes(8)), PROTOCOL_ERROR)
    with pytest.raises(H2ProtocolError) as caught:
        client.conn.start_call(PATH, b"", Owner(), window=WINDOW)
    assert caught.value.code == 0x2
    client.conn.grant(1, 10)
    client.conn.cancel(1)
    client.conn.connection_lost("gone")  # no call left to end twice
    assert not client.conn.outbox


# ---------------------------------------------------------------------- max_message


@pytest.mark.parametrize("split", [False, True], ids=["one frame", "split"])
def test_max_message_on_every_path(split: bool) -> None:
    client = Client(max_message=100)
    body = message(b"m" * 101)
    if split:
        client.feed(data_frame(1, body[:3]) + data_frame(1, body[3:]))
    else:
        client.feed(data_frame(1, body))
    status = client.owners[1].status
    assert client.owners[1].bodies == []
    assert status is not None and status.code == RESOURCE_EXHAUSTED and status.local
    assert [(f.type, f.stream, f.code) for f in client.sent()] == [(RST_STREAM, 1, CANCEL)]
    client.feed(data_frame(3, message(b"k" * 100)))
    assert client.owners[3].bodies == [b"k" * 100]


# ---------------------------------------------------------------------- bounds


def test_an_endless_continuation_ends_early_with_bounded_memory() -> None:
    client = Client()
    client.feed(frame(HEADERS, 0, 1, b"\x88"))
    chunk = frame(CONTINUATION, 0, 1, b"\x00" * MAX_FRAME)
    fed = 0
    with pytest.raises(H2ProtocolError) as caught:
        for _ in range(1000):  # 16 MiB, were it all read
            client.feed(chunk)
            fed += 1
            assert client.conn.buffered <= 2 * 64 * 1024 + MAX_FRAME + 9
    assert caught.value.code == ENHANCE_YOUR_CALM
    assert fed <= 8


def test_a_huge_header_list_stops_at_the_limit_quickly() -> None:
    # 16 MiB of header list, as a block of indexed references to one 4 KiB entry
    # (an HPACK bomb), and as plain literals in CONTINUATION frames.
    bomb = BIG_ENTRY + b"\xbe" * 4096
    literals = block([(f"x-{i}", "v" * 1000) for i in range(16_000)])
    for payload in (bomb, literals):
        client = Client()
        started = time.process_time()
        with pytest.raises(H2ProtocolError) as caught:
            for piece in header_frames(1, payload):
                client.feed(piece)
        assert caught.value.code == ENHANCE_YOUR_CALM
        assert time.process_time() - started < 0.5


def test_the_decoder_stops_an_hpack_bomb_after_the_limit() -> None:
    decoder = HpackDecoder(max_header_list_size=64 * 1024)
    assert len(decoder.decode(BIG_ENTRY + b"\xbe" * 15)) == 16
    with pytest.raises(HeaderListTooLarge):
        decoder.decode(b"\xbe" * 17)


# ---------------------------------------------------------------------- the rest


def test_a_request_header_block_above_the_frame_size_is_continued() -> None:
    conn = H2Connection("b" * 40_000)
    conn.initiate()
    conn.outbox.clear()
    conn.start_call(PATH, b"", Owner(), window=WINDOW)
    frames = parse(bytes(conn.outbox))
    assert [(f.type, f.flags & END_HEADERS) for f in frames[:3]] == [
        (HEADERS, 0),
        (CONTINUATION, 0),
        (CONTINUATION, END_HEADERS),
    ]
    decoded = HpackDecoder().decode(b"".join(f.payload for f in frames[:3]))
    assert (":authority", "b" * 40_000) in decoded


def test_close_says_goaway_once_and_cancels_quietly() -> None:
    client = Client()
    client.conn.close()
    client.conn.close()
    client.conn.cancel(1)
    client.conn.cancel_ended(3)
    assert [(f.type, f.code) for f in client.sent()] == [(GOAWAY, NO_ERROR)]
    assert not client.conn.can_start


def test_the_connection_window_is_given_back_by_the_quarter() -> None:
    client = Client()
    client.conn._received = MAX_WINDOW // 4 - 10
    client.conn.receive(bytearray(data_frame(1, message(b"x" * 20))))  # any bytes-like object
    updates = [f for f in client.sent() if f.type == WINDOW_UPDATE and f.stream == 0]
    assert [struct.unpack(">L", f.payload)[0] for f in updates] == [MAX_WINDOW // 4 + 15]
    assert client.conn._received == 0


def test_trailers_in_the_middle_of_a_message_end_the_call_as_internal() -> None:
    client = Client()
    client.feed(data_frame(1, message(b"abcdef")[:7]))
    client.feed(headers_frame(1, [("grpc-status", "0")], end_stream=True))
    status = client.owners[1].status
    assert status is not None and status.code == INTERNAL
    assert client.owners[1].needs == [11]  # the window was asked to fit the message


def test_an_unknown_reset_code_is_named_by_number() -> None:
    client = Client()
    client.feed(frame(RST_STREAM, 0, 1, u32(0x99)))
    status = client.owners[1].status
    assert status is not None and status.code == INTERNAL and "0x99" in status.details
    assert repr(status).endswith("local=False)") and status.violation is None


def test_only_the_latest_closed_streams_are_remembered() -> None:
    conn = H2Connection("b:1")
    conn.initiate()
    conn.receive(settings() + frame(SETTINGS, ACK, 0))
    for _ in range(5000):
        conn.cancel(conn.start_call(PATH, b"", Owner(), window=WINDOW))
    assert len(conn._closed) == 4096
    conn.outbox.clear()
    # The oldest closed streams are forgotten: frames on them are ignored.
    conn.receive(data_frame(1, message(b"x")) + frame(WINDOW_UPDATE, 0, 9999, u32(1)))
    assert not conn.outbox
