"""A fake Liftbridge broker that answers the control plane well and Subscribe badly.

Run as a process of its own, so that what it allocates and the CPU it spends are not
counted against the client under test: ``python _fake_broker.py EVENTS_FILE``. It
listens on a loopback port chosen by the OS, prints ``port N`` on its first line of
output, and serves until it is terminated.

Unary calls (FetchMetadata, CreateStream, the rest answered UNIMPLEMENTED) go over
HTTP/2 as the h2 package's server side writes it, which grpcio's client accepts.
Subscribe is answered with frames written by hand, so that they can break the rules
h2 would enforce. What a stream's Subscribe gets is named by the stream itself,
``<misbehaviour>-<when>-<anything>``:

``when`` = ``answer``
    The first call gets response headers, the subscription handshake and messages
    0, 1 and 2, then the misbehaviour; every later call gets the misbehaviour where
    the handshake would be, so that no resubscription can succeed. (A misbehaviour
    that *is* the response's header block comes on the first call too; the flood
    keeps the handshake, see :func:`flood`.)
``when`` = ``every``
    Every call gets response headers and the handshake, then the misbehaviour: a
    broker that accepts every subscription and breaks it at once.

Each Subscribe call is recorded in EVENTS_FILE as ``<stream> <call number> <start
offset> <phase>`` once its misbehaviour starts; a connection that closes as
``<stream> closed <bytes written>`` for each stream it carried; a flood sent whole, the
connection still open, as ``<stream> flooded <bytes>``.
"""

from __future__ import annotations

import asyncio
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH

from liftbridge_nats._proto import api_pb2

BROKER_ID = "fake"
# Frame types and flags (RFC 9113, section 6).
DATA = 0x0
HEADERS = 0x1
RST_STREAM = 0x3
SETTINGS = 0x4
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PRIORITY_FLAG = 0x20
CANCEL = 0x8
MAX_FRAME = 16_384  # the client advertises no other, so this is the limit
ENDLESS_FOR = 30.0  # seconds an "endless" misbehaviour goes on, at most
FLOOD_BYTES = 64 * 1024 * 1024
FLOOD_VALUE = 1000  # value bytes per message of a flood
HUGE_LIST = 16 * 1024 * 1024  # decoded size of the huge header list

_FRAME_HEADER = struct.Struct(">IBL")


def frame(ftype: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame, whatever its payload and stream."""
    return _FRAME_HEADER.pack((len(payload) << 8) | ftype, flags, stream_id) + payload


def grpc_message(body: bytes) -> bytes:
    """A gRPC length-prefixed message, uncompressed."""
    return b"\x00" + struct.pack(">L", len(body)) + body


def stored(stream: str, offset: int, value: bytes) -> bytes:
    """A partition message as a broker streams it."""
    return api_pb2.Message(
        stream=stream, partition=0, offset=offset, value=value, subject=stream, timestamp=1
    ).SerializeToString()


# ------------------------------------------------------------------ HPACK, by hand


def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    """RFC 7541 5.1: an integer with an N-bit prefix, ``first`` holding the flag bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(raw: bytes, *, huffman: bool = False) -> bytes:
    if huffman:
        raw = _huffman(raw)
    return _integer(len(raw), 7, 0x80 if huffman else 0) + raw


def _huffman(raw: bytes) -> bytes:
    # hpack's encoder is pure Python, one step per byte: fine for the short values
    # encoded here (long ones are repeated, not encoded again).
    return HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH).encode(raw)


def literal(name: bytes, value: bytes, *, huffman: bool = False) -> bytes:
    """A literal field that touches no table (RFC 7541 6.2.2), so that these blocks
    never disturb the dynamic tables of either side."""
    return b"\x00" + _string(name) + _string(value, huffman=huffman)


STATUS_200 = b"\x88"  # static table entry 8
RESPONSE = STATUS_200 + literal(b"content-type", b"application/grpc")


def trailers(status: bytes, message: bytes = b"") -> bytes:
    block = literal(b"grpc-status", status)
    return block + literal(b"grpc-message", message) if message else block


# ------------------------------------------------------------------ a Subscribe call


class Call:
    """One Subscribe call: where its frames go, and what it asked for."""

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        conn: Connection,
        stream_id: int,
        stream: str,
        start: int,
    ) -> None:
        self.writer = writer
        self.conn = conn
        self.id = stream_id
        self.stream = stream
        self.start = start

    @property
    def gone(self) -> bool:
        return self.conn.gone

    async def send(self, data: bytes) -> None:
        """Write, waiting while the socket's buffer is full; nothing once it is gone."""
        if self.gone:
            return
        self.conn.written += len(data)
        self.writer.write(data)
        try:
            await self.writer.drain()
        except (ConnectionError, RuntimeError):
            self.conn.gone = True

    async def headers(self, block: bytes = RESPONSE, *, end_stream: bool = False) -> None:
        flags = END_HEADERS | (END_STREAM if end_stream else 0)
        await self.send(frame(HEADERS, flags, self.id, block))

    async def message(self, body: bytes) -> None:
        await self.send(frame(DATA, 0, self.id, grpc_message(body)))

    async def linger(self) -> None:
        """Keep the call open and say nothing more (a client that ignored the last
        frame now waits for ever)."""
        await self.conn.closed.wait()


Misbehaviour = Callable[[Call, bool], Awaitable[None]]
"""Sends its misbehaviour on a call: ``opened`` is True when response headers and the
handshake went before it, False when it stands in place of the whole answer."""


async def _ensure_headers(call: Call, opened: bool) -> None:
    if not opened:
        await call.headers()


async def oversized_data(call: Call, opened: bool) -> None:
    """A 1 MiB DATA frame, where 16 KiB is the largest frame the client allows."""
    await _ensure_headers(call, opened)
    size = 1024 * 1024 - 5 - 100
    body = stored(call.stream, call.start, b"o" * size)
    # One message filling the frame exactly (protobuf's length fields make the
    # overhead depend on the size: settle it in two steps).
    body = stored(call.stream, call.start, b"o" * (size + 1024 * 1024 - 5 - len(body)))
    await call.send(frame(DATA, 0, call.id, grpc_message(body)))
    await call.linger()


def _block_start(opened: bool) -> tuple[bytes, int]:
    """The first fragment and HEADERS flags of a header block: the trailers after the
    messages, or the response's headers in place of the answer."""
    if opened:
        return literal(b"grpc-status", b"0"), END_STREAM
    return RESPONSE, 0


async def _endless(call: Call, opened: bool, chunk: Callable[[int], bytes]) -> None:
    first, flags = _block_start(opened)
    await call.send(frame(HEADERS, flags, call.id, first))
    until = time.monotonic() + ENDLESS_FOR
    n = 0
    while not call.gone and time.monotonic() < until:
        batch = b"".join(frame(CONTINUATION, 0, call.id, chunk(n + i)) for i in range(16))
        n += 16
        await call.send(batch)


_FIELD = literal(b"x-more", b"m" * 1000)
# Whole fields, twice over, so that any frame-sized slice from the first half is a
# stretch of the endless run of fields.
_FIELDS = _FIELD * (MAX_FRAME // len(_FIELD) * 4)
_TWICE = _FIELDS * 2


async def endless_continuation(call: Call, opened: bool) -> None:
    """A header block that never ends: full CONTINUATION frames of well-formed fields."""

    def chunk(n: int) -> bytes:
        start = n * MAX_FRAME % len(_FIELDS)
        return _TWICE[start : start + MAX_FRAME]

    await _endless(call, opened, chunk)


async def empty_continuation(call: Call, opened: bool) -> None:
    """A header block that never ends: empty CONTINUATION frames (no size limit on the
    block catches these; a limit on the frames must)."""
    await _endless(call, opened, lambda n: b"")


def _huge_block(opened: bool) -> bytes:
    value = (b"abcdefghij" * 400)[:4000]
    field = b"\x00" + _string(b"x-filler") + _string(value, huffman=True)
    count = HUGE_LIST // (len(b"x-filler") + len(value) + 32) + 1
    first, _ = _block_start(opened)
    return first + field * count


async def huge_header_list(call: Call, opened: bool) -> None:
    """A 16 MiB header list (as decoded; Huffman-coded on the wire) in well-formed
    HEADERS and CONTINUATION frames, ending with END_HEADERS."""
    block = _huge_block(opened)
    pieces = [block[i : i + MAX_FRAME] for i in range(0, len(block), MAX_FRAME)]
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        if i == 0:
            flags = (END_STREAM if opened else 0) | (END_HEADERS if last else 0)
            data = frame(HEADERS, flags, call.id, piece)
        else:
            data = frame(CONTINUATION, END_HEADERS if last else 0, call.id, piece)
        await call.send(data)
        if call.gone:
            return
    await call.linger()


async def flood(call: Call, opened: bool) -> None:
    """64 MiB of messages, one DATA frame each, as fast as the socket takes them and
    with no regard for the windows the client granted.

    The flood always follows a handshake: it is made of valid messages, and the
    client's read-ahead (or its window) is what is under test.
    """
    if not opened:
        await call.headers()
        await call.message(b"")
    offset = call.start
    sent = 0
    while sent < FLOOD_BYTES and not call.gone:
        batch = []
        for _ in range(64):
            data = frame(
                DATA, 0, call.id, grpc_message(stored(call.stream, offset, b"f" * FLOOD_VALUE))
            )
            batch.append(data)
            offset += 1
            sent += len(data)
        await call.send(b"".join(batch))
    if not call.gone:
        call.conn.broker.event(f"{call.stream} flooded {sent}")
    await call.linger()


def _one_frame(make: Callable[[Call], bytes]) -> Misbehaviour:
    async def send(call: Call, opened: bool) -> None:
        await _ensure_headers(call, opened)
        await call.send(make(call))
        await call.linger()

    send.__doc__ = make.__doc__
    return send


def _settings_on_stream(call: Call) -> bytes:
    """SETTINGS on the call's stream (only stream 0 may carry them)."""
    return frame(SETTINGS, 0, call.id)


def _ping_on_stream(call: Call) -> bytes:
    """PING on the call's stream."""
    return frame(PING, 0, call.id, b"12345678")


def _goaway_on_stream(call: Call) -> bytes:
    """GOAWAY on the call's stream."""
    return frame(GOAWAY, 0, call.id, struct.pack(">LL", call.id, 0))


def _settings_ack_with_payload(call: Call) -> bytes:
    """A SETTINGS acknowledgement that carries a setting (it must be empty)."""
    return frame(SETTINGS, ACK, 0, struct.pack(">HL", 4, 65535))


def _rst_stream_bad_length(call: Call) -> bytes:
    """RST_STREAM of 5 bytes (it must be 4), its first four saying CANCEL."""
    return frame(RST_STREAM, 0, call.id, struct.pack(">L", CANCEL) + b"\x00")


def _short_priority_headers(call: Call) -> bytes:
    """Trailers flagged PRIORITY whose payload is shorter than the 5 priority bytes."""
    return frame(HEADERS, END_HEADERS | END_STREAM | PRIORITY_FLAG, call.id, b"\x00\x00\x00")


def _data_on_stream_zero(call: Call) -> bytes:
    """A message in a DATA frame on stream 0."""
    return frame(DATA, 0, 0, grpc_message(stored(call.stream, call.start, b"z")))


def _data_on_idle_stream(call: Call) -> bytes:
    """A message in a DATA frame on a client stream never opened."""
    return frame(DATA, 0, call.id + 2000, grpc_message(stored(call.stream, call.start, b"i")))


def _window_update_reserved_bit(call: Call) -> bytes:
    """A connection WINDOW_UPDATE of 2**31: the reserved bit set, an increment of 0."""
    return frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", 2**31))


def _window_overflow(call: Call) -> bytes:
    """Two connection WINDOW_UPDATEs of 2**31 - 1: the window passes 2**31 - 1."""
    return frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", 2**31 - 1)) * 2


def _stream_window_overflow(call: Call) -> bytes:
    """A WINDOW_UPDATE of 2**31 - 1 on the call: its window passes 2**31 - 1."""
    return frame(WINDOW_UPDATE, 0, call.id, struct.pack(">L", 2**31 - 1))


def _grpc_status_superscript(call: Call) -> bytes:
    """Trailers whose grpc-status is '¹' (a digit to str.isdigit, not to int)."""
    return frame(HEADERS, END_HEADERS | END_STREAM, call.id, trailers("¹".encode("latin-1")))


def _message_over_max(call: Call) -> bytes:
    """A message that says it is 4 GiB - 1 bytes long, its first bytes following."""
    return frame(DATA, 0, call.id, b"\x00\xff\xff\xff\xff" + b"x" * 1000)


async def status_superscript(call: Call, opened: bool) -> None:
    """Response headers whose :status is '²00' (digits to str.isdigit, not to int)."""
    block = literal(b":status", "²00".encode("latin-1")) + literal(
        b"content-type", b"application/grpc"
    )
    await call.headers(block)
    await call.linger()


async def unavailable(call: Call, opened: bool) -> None:
    """Well-formed trailers saying UNAVAILABLE: legal, but a broker answering every
    subscription so is broken all the same."""
    await _ensure_headers(call, opened)
    await call.headers(trailers(b"14", b"going away"), end_stream=True)
    await call.linger()


MISBEHAVIOURS: dict[str, Misbehaviour] = {
    "oversized_data": oversized_data,
    "endless_continuation": endless_continuation,
    "empty_continuation": empty_continuation,
    "huge_header_list": huge_header_list,
    "flood": flood,
    "settings_on_stream": _one_frame(_settings_on_stream),
    "ping_on_stream": _one_frame(_ping_on_stream),
    "goaway_on_stream": _one_frame(_goaway_on_stream),
    "settings_ack_with_payload": _one_frame(_settings_ack_with_payload),
    "rst_stream_bad_length": _one_frame(_rst_stream_bad_length),
    "short_priority_headers": _one_frame(_short_priority_headers),
    "data_on_stream_zero": _one_frame(_data_on_stream_zero),
    "data_on_idle_stream": _one_frame(_data_on_idle_stream),
    "window_update_reserved_bit": _one_frame(_window_update_reserved_bit),
    "window_overflow": _one_frame(_window_overflow),
    "stream_window_overflow": _one_frame(_stream_window_overflow),
    "grpc_status_superscript": _one_frame(_grpc_status_superscript),
    "message_over_max": _one_frame(_message_over_max),
    "status_superscript": status_superscript,
    "unavailable": unavailable,
}
# Misbehaviours that are the response's own header block: no call ever opens.
WHOLE_ANSWER = frozenset({"status_superscript"})


# ------------------------------------------------------------------ the server


class Broker:
    """The streams created so far and the Subscribe calls each got."""

    def __init__(self, port: int, events: Path) -> None:
        self.port = port
        self.streams: dict[str, int] = {}  # name -> Subscribe calls so far
        self.events = events.open("a", buffering=1)

    def event(self, line: str) -> None:
        self.events.write(line + "\n")

    def metadata(self, request: api_pb2.FetchMetadataRequest) -> api_pb2.FetchMetadataResponse:
        names = list(request.streams) or list(self.streams)
        response = api_pb2.FetchMetadataResponse(
            brokers=[api_pb2.Broker(id=BROKER_ID, host="127.0.0.1", port=self.port)]
        )
        for name in names:
            known = name in self.streams
            meta = response.streamMetadata.add(
                name=name,
                subject=name,
                error=api_pb2.StreamMetadata.OK if known else api_pb2.StreamMetadata.UNKNOWN_STREAM,
            )
            if known:
                meta.partitions[0].CopyFrom(
                    api_pb2.PartitionMetadata(
                        id=0, leader=BROKER_ID, replicas=[BROKER_ID], isr=[BROKER_ID]
                    )
                )
        return response


class Connection:
    """One client connection: h2 reads everything; unary answers go through h2,
    Subscribe answers are written by hand."""

    def __init__(
        self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.requests: dict[int, tuple[str, bytearray]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.gone = False
        self.closed = asyncio.Event()
        self.written = 0
        self.streams: set[str] = set()

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.gone:
            self.written += len(data)
            self.writer.write(data)

    async def run(self) -> None:
        self.h2.initiate_connection()
        self.flush()
        try:
            while not self.gone:
                data = await self.reader.read(65536)
                if not data:
                    break
                for event in self.h2.receive_data(data):
                    self.on_event(event)
                self.flush()
        except (ConnectionError, h2.exceptions.H2Error):
            pass
        finally:
            self.gone = True
            self.closed.set()
            for name in self.streams:
                self.broker.event(f"{name} closed {self.written}")
            for task in self.tasks:
                task.cancel()
            self.writer.close()

    def on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            headers = {str(k): str(v) for k, v in event.headers or []}
            self.requests[event.stream_id] = (headers.get(":path", ""), bytearray())
        elif isinstance(event, h2.events.DataReceived):
            self.requests[event.stream_id][1].extend(event.data or b"")
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            path, body = self.requests.pop(event.stream_id)
            self.dispatch(event.stream_id, path, bytes(body[5:]))

    def answer(self, stream_id: int, response: bytes, status: int = 0) -> None:
        self.h2.send_headers(stream_id, [(":status", "200"), ("content-type", "application/grpc")])
        if status == 0:
            self.h2.send_data(stream_id, grpc_message(response))
        self.h2.send_headers(stream_id, [("grpc-status", str(status))], end_stream=True)

    def dispatch(self, stream_id: int, path: str, body: bytes) -> None:
        if path == "/proto.API/FetchMetadata":
            request = api_pb2.FetchMetadataRequest.FromString(body)
            self.answer(stream_id, self.broker.metadata(request).SerializeToString())
        elif path == "/proto.API/CreateStream":
            create = api_pb2.CreateStreamRequest.FromString(body)
            self.broker.streams.setdefault(create.name, 0)
            self.answer(stream_id, api_pb2.CreateStreamResponse().SerializeToString())
        elif path == "/proto.API/Subscribe":
            subscribe = api_pb2.SubscribeRequest.FromString(body)
            task = asyncio.ensure_future(self.subscribe(stream_id, subscribe))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        else:
            self.answer(stream_id, b"", status=12)  # UNIMPLEMENTED

    async def subscribe(self, stream_id: int, request: api_pb2.SubscribeRequest) -> None:
        name = request.stream
        kind, _, rest = name.partition("-")
        when = rest.partition("-")[0]
        misbehave = MISBEHAVIOURS[kind]
        number = self.broker.streams.get(name, 0) + 1
        self.broker.streams[name] = number
        self.streams.add(name)
        start = request.startOffset if request.startPosition == api_pb2.OFFSET else 0
        call = Call(self.writer, self, stream_id, name, start)
        if kind in WHOLE_ANSWER or (when == "answer" and number > 1):
            self.broker.event(f"{name} {number} {start} answer")
            await misbehave(call, False)
            return
        await call.headers()
        await call.message(b"")  # the handshake: the subscription exists
        if number == 1:
            for offset in range(start, start + 3):
                await call.message(stored(name, offset, b"%d" % offset))
            call.start = start + 3
        self.broker.event(f"{name} {number} {call.start} opened")
        await misbehave(call, True)


async def main(events: Path) -> None:
    holder: list[Broker] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await Connection(holder[0], reader, writer).run()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    holder.append(Broker(port, events))
    print(f"port {port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
