"""The read side's connections over real loopback sockets, without a broker: an
independent HTTP/2 server (the h2 package) behind an asyncio server, and sockets that
refuse or drop connections."""

from __future__ import annotations

import asyncio
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
