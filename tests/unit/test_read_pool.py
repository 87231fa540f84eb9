"""The read side's connections over real loopback sockets, without a broker: an
independent HTTP/2 server (the h2 package) behind an asyncio server, and sockets that
refuse or drop connections."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
import h2.config
import h2.connection
import h2.events
import pytest

from liftbridge_nats import ClientClosedError, Message
from liftbridge_nats._proto import api_pb2
from liftbridge_nats._read_pool import ReadPool
from liftbridge_nats._stream_reader import OPENED, CallStatusError, StreamEnd, StreamReader

pytestmark = pytest.mark.timeout(30)


def grpc_message(body: bytes) -> bytes:
    return b"\x00" + len(body).to_bytes(4, "big") + body


class GrpcServer(asyncio.Protocol):
    """Answers every call with the handshake and ``messages`` messages, then waits."""

    connections: list[GrpcServer]

    def __init__(self, messages: int, goaway_after: int | None) -> None:
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.messages = messages
        self.goaway_after = goaway_after
        self.calls = 0
        self.resets: list[int] = []
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.conn.initiate_connection()
        self.transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                self.calls += 1
                sid = event.stream_id
                self.conn.send_headers(
                    sid, [(":status", "200"), ("content-type", "application/grpc")]
                )
                self.conn.send_data(sid, grpc_message(b""))
                for i in range(self.messages):
                    body = api_pb2.Message(offset=i, value=b"v", stream="s").SerializeToString()
                    self.conn.send_data(sid, grpc_message(body))
                if self.goaway_after is not None and self.calls >= self.goaway_after:
                    self.conn.close_connection(last_stream_id=sid)
            elif isinstance(event, h2.events.StreamReset):
                self.resets.append(event.stream_id)
        self.transport.write(self.conn.data_to_send())

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


@pytest.fixture
async def server() -> AsyncIterator[Any]:
    made: list[GrpcServer] = []
    settings = {"messages": 3, "goaway_after": None}

    def factory() -> GrpcServer:
        made.append(GrpcServer(**settings))  # type: ignore[arg-type]
        return made[-1]

    srv = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}", made, settings
    finally:
        srv.close()
        await srv.wait_closed()


async def take(reader: StreamReader) -> Any:
    return await asyncio.wait_for(reader.next_item(), 5)


async def test_calls_share_one_connection_and_close_ends_them(server: Any) -> None:
    address, made, _ = server
    pool = ReadPool(None)
    readers = [pool.subscribe(address, b"req", skip_through=None) for _ in range(5)]
    for reader in readers:
        assert await take(reader) is OPENED
        assert [cast(Message, await take(reader)).offset for _ in range(3)] == [0, 1, 2]
    assert len(made) == 1 and made[0].calls == 5
    assert pool.open_calls == 5 and pool.connections == 1
    readers[0].cancel()
    assert isinstance(await take(readers[0]), StreamEnd)
    await pool.close()
    # close() returns once every transport is gone, not while one is still closing
    # (a TLS transport exchanges close_notify first; one left over warns when collected).
    assert not pool.live
    for reader in readers[1:]:
        end = await take(reader)
        assert isinstance(end, StreamEnd) and end.cancelled
    await asyncio.wait_for(made[0].closed, 5)  # the socket is closed too
    assert pool.open_calls == 0 and pool.connections == 0


async def test_goaway_sends_new_calls_to_a_new_connection(server: Any) -> None:
    address, made, settings = server
    settings["goaway_after"] = 2
    pool = ReadPool(None)
    first = [pool.subscribe(address, b"req", skip_through=None) for _ in range(2)]
    for reader in first:
        assert await take(reader) is OPENED
    await asyncio.sleep(0.05)  # the GOAWAY arrives
    later = pool.subscribe(address, b"req", skip_through=None)
    assert await take(later) is OPENED
    assert len(made) == 2
    # The calls the server had taken go on until they end.
    assert cast(Message, await take(first[1])).offset == 0
    await pool.close()


async def test_a_refused_connection_ends_the_call_as_unavailable() -> None:
    probe = await asyncio.get_running_loop().create_server(asyncio.Protocol, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    pool = ReadPool(None)
    end = await take(pool.subscribe(f"127.0.0.1:{port}", b"req", skip_through=None))
    assert isinstance(end, StreamEnd) and isinstance(end.error, CallStatusError)
    assert end.error.code() is grpc.StatusCode.UNAVAILABLE
    assert "failed to connect" in end.error.details()
    await pool.close()


async def test_a_dropped_connection_ends_the_call_as_unavailable() -> None:
    class Drop(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            transport.close()

    srv = await asyncio.get_running_loop().create_server(Drop, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    pool = ReadPool(None)
    end = await take(pool.subscribe(f"127.0.0.1:{port}", b"req", skip_through=None))
    assert isinstance(end, StreamEnd) and isinstance(end.error, CallStatusError)
    assert end.error.code() is grpc.StatusCode.UNAVAILABLE
    await pool.close()
    srv.close()
    await srv.wait_closed()
    # A closed pool starts nothing.
    with pytest.raises(ClientClosedError):
        pool.subscribe(f"127.0.0.1:{port}", b"req", skip_through=None)


# ---------------------------------------------------------------------- brokers that misbehave


def frames_of(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """(type, flags, stream, payload) of each whole frame in ``data``."""
    out = []
    pos = 0
    while len(data) - pos >= 9:
        length = int.from_bytes(data[pos : pos + 3], "big")
        if len(data) - pos - 9 < length:
            break
        stream = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        out.append((data[pos + 3], data[pos + 4], stream, data[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    return out


class RawBroker(asyncio.Protocol):
    """Answers the first request with ``script`` (raw bytes: our own server preface,
    response, and whatever breaks the protocol); keeps what the client sends."""

    def __init__(self, script: bytes, *, read: bool = True) -> None:
        self.script = script
        self.read = read
        self.received = bytearray()
        self.answered = False
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received += data
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        if not self.answered and len(self.received) > len(preface):
            frames = frames_of(bytes(self.received[len(preface) :]))
            if any(ftype == 0x0 and flags & 0x1 for ftype, flags, _, _ in frames):
                self.answered = True
                if not self.read:
                    self.transport.pause_reading()
                self.transport.write(self.script)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def goaways(self) -> list[int]:
        data = bytes(self.received[24:])
        return [int.from_bytes(p[4:8], "big") for t, _, _, p in frames_of(data) if t == 0x7]


def h2_frame(ftype: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big")
        + bytes([ftype, flags])
        + stream.to_bytes(4, "big")
        + payload
    )


SERVER_PREFACE = h2_frame(0x4, 0, 0) + h2_frame(0x4, 0x1, 0)
# :status 200, content-type: application/grpc (literals, no table).
RESPONSE = h2_frame(0x1, 0x4, 1, b"\x88\x0f\x10\x10application/grpc")


async def misbehave(script: bytes, *, read: bool = True) -> tuple[StreamEnd, RawBroker]:
    made: list[RawBroker] = []

    def factory() -> RawBroker:
        made.append(RawBroker(script, read=read))
        return made[-1]

    # A small receive buffer: a broker that reads nothing takes little into the kernel.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind(("127.0.0.1", 0))
    srv = await asyncio.get_running_loop().create_server(factory, sock=sock)
    port = srv.sockets[0].getsockname()[1]
    pool = ReadPool(None)
    try:
        reader = pool.subscribe(f"127.0.0.1:{port}", b"req", skip_through=None)
        while True:
            item = await take(reader)
            if isinstance(item, StreamEnd):
                break
        if not read:
            # Reading paused, the broker would see the drop only when a write of its own
            # failed, and it may have handed all it had to the kernel by then.
            made[0].transport.resume_reading()
        await asyncio.wait_for(made[0].closed, 5)  # the connection is dropped
        return item, made[0]
    finally:
        await pool.close()
        for broker in made:  # a failed check must not leak the broker's side either
            broker.transport.abort()
        srv.close()
        await srv.wait_closed()


@pytest.mark.parametrize(
    ("script", "code"),
    [
        pytest.param(h2_frame(0x0, 0, 1, b"\x00" * 20_000), 0x6, id="oversized DATA"),
        pytest.param(h2_frame(0x4, 0, 1), 0x1, id="SETTINGS on a stream"),
        pytest.param(
            h2_frame(0x1, 0, 1, b"\x88") + h2_frame(0x9, 0, 1) * 100, 0xB, id="CONTINUATIONs"
        ),
        pytest.param(
            b"".join(h2_frame(0x0, 0, 1, b"\x00" * 16_384) for _ in range(5)), 0x3, id="window"
        ),
        pytest.param(h2_frame(0x1, 0x5, 1, b"\x80"), 0x9, id="HPACK index 0"),
    ],
)
async def test_a_broken_connection_ends_its_calls_and_gets_a_goaway(
    script: bytes, code: int
) -> None:
    end, broker = await misbehave(SERVER_PREFACE + RESPONSE + script)
    assert isinstance(end.error, CallStatusError)
    assert end.error.code() is grpc.StatusCode.UNAVAILABLE
    assert "broke the HTTP/2 protocol" in end.error.details()
    assert broker.goaways() == [code]


async def test_a_broker_that_breaks_every_connection_is_reported_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    oversized = h2_frame(0x0, 0, 1, b"\x00" * 20_000)
    made: list[RawBroker] = []

    def factory() -> RawBroker:
        made.append(RawBroker(SERVER_PREFACE + RESPONSE + oversized, read=True))
        return made[-1]

    srv = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    pool = ReadPool(None)
    caplog.set_level("WARNING", logger="liftbridge_nats.subscription")
    try:
        for _ in range(5):  # each call on a new connection, each connection broken
            reader = pool.subscribe(f"127.0.0.1:{port}", b"req", skip_through=None)
            while not isinstance(await take(reader), StreamEnd):
                pass
            await asyncio.wait_for(made[-1].closed, 5)
    finally:
        await pool.close()
        for broker in made:
            broker.transport.abort()
        srv.close()
        await srv.wait_closed()
    assert len(made) == 5
    drops = [r for r in caplog.records if "dropping the connection" in r.getMessage()]
    assert len(drops) == 1, [r.getMessage() for r in drops]
    assert pool.drop_log.suppressed == 4


async def test_a_malformed_response_ends_the_call_as_internal() -> None:
    bad_status = h2_frame(0x1, 0x4, 1, b"\x08\x03\xb2\x30\x30")  # :status ²00 (latin-1)
    made: list[RawBroker] = []

    def factory() -> RawBroker:
        made.append(RawBroker(SERVER_PREFACE + bad_status))
        return made[-1]

    srv = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    pool = ReadPool(None)
    end = await take(pool.subscribe(f"127.0.0.1:{port}", b"req", skip_through=None))
    assert isinstance(end, StreamEnd) and isinstance(end.error, CallStatusError)
    assert end.error.code() is grpc.StatusCode.INTERNAL
    assert "malformed" in end.error.details()
    await asyncio.sleep(0.05)
    resets = [p for t, _, s, p in frames_of(bytes(made[0].received[24:])) if t == 0x3]
    assert resets == [(1).to_bytes(4, "big")]  # RST_STREAM PROTOCOL_ERROR
    await pool.close()
    srv.close()
    await srv.wait_closed()


async def test_a_broker_that_makes_us_write_and_reads_nothing_is_dropped() -> None:
    pings = h2_frame(0x6, 0, 0, b"12345678") * 600_000  # 10 MiB of PINGs to answer
    end, _ = await misbehave(SERVER_PREFACE + RESPONSE + pings, read=False)
    assert isinstance(end.error, CallStatusError)
    assert end.error.code() is grpc.StatusCode.UNAVAILABLE
    assert "reads nothing" in end.error.details()


async def test_a_bug_in_reading_ends_the_calls_not_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(self: object, data: bytes) -> None:
        raise IndexError("a bug")

    monkeypatch.setattr("liftbridge_nats._h2.H2Connection.receive", broken)
    end, _ = await misbehave(SERVER_PREFACE)
    assert isinstance(end.error, CallStatusError)
    assert end.error.code() is grpc.StatusCode.UNAVAILABLE
    assert "IndexError" in end.error.details()
