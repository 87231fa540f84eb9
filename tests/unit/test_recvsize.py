"""The read size cap on asyncio's socket transports: what it changes, and what it leaves."""

from __future__ import annotations

import asyncio
import types

from liftbridge_nats._recvsize import MAX_READ_SIZE, READ_SIZE, cap_read_size, fit_read_size


async def test_a_selector_socket_transport_reads_at_most_the_cap() -> None:
    loop = asyncio.get_running_loop()
    received: list[bytes] = []
    ended = asyncio.Event()

    class Collect(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            received.append(data)

        def eof_received(self) -> None:
            ended.set()

    def send_and_close(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"x" * (3 * READ_SIZE))
        writer.close()

    server = await asyncio.start_server(send_and_close, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        transport, _ = await loop.create_connection(Collect, "127.0.0.1", port)
        assert transport.max_size > READ_SIZE  # type: ignore[attr-defined]  # asyncio's default
        assert cap_read_size(transport)
        assert transport.max_size == READ_SIZE  # type: ignore[attr-defined]
        async with asyncio.timeout(5):
            await ended.wait()
        transport.close()
    finally:
        server.close()
        await server.wait_closed()
    assert sum(map(len, received)) == 3 * READ_SIZE
    assert max(map(len, received)) <= READ_SIZE


def test_other_transports_are_left_alone() -> None:
    smaller = types.SimpleNamespace(max_size=4096)
    assert not cap_read_size(smaller)
    assert smaller.max_size == 4096  # never raised
    assert not cap_read_size(types.SimpleNamespace())  # no max_size (TLS, uvloop)
    assert not cap_read_size(None)  # no transport at all

    class Fixed:
        __slots__ = ()
        max_size = 1 << 20  # a class attribute an instance cannot set

    assert not cap_read_size(Fixed())
    assert Fixed.max_size == 1 << 20


def test_the_read_size_follows_what_the_reads_bring() -> None:
    transport = types.SimpleNamespace(max_size=READ_SIZE)
    sizes = []
    for _ in range(8):  # full reads: doubles, up to the most
        fit_read_size(transport, transport.max_size)
        sizes.append(transport.max_size)
    assert sizes[:4] == [2 * READ_SIZE, 4 * READ_SIZE, 8 * READ_SIZE, 16 * READ_SIZE]
    assert set(sizes[4:]) == {MAX_READ_SIZE} and 16 * READ_SIZE == MAX_READ_SIZE
    fit_read_size(transport, MAX_READ_SIZE // 4)  # a quarter: kept
    assert transport.max_size == MAX_READ_SIZE
    for expected in (MAX_READ_SIZE // 2, MAX_READ_SIZE // 4, MAX_READ_SIZE // 8, READ_SIZE):
        fit_read_size(transport, 100)  # a few messages: halves, down to READ_SIZE
        assert transport.max_size == expected
    fit_read_size(transport, 100)
    assert transport.max_size == READ_SIZE


async def test_a_connection_that_keeps_sending_is_read_in_larger_blocks() -> None:
    loop = asyncio.get_running_loop()
    received: list[int] = []
    ended = asyncio.Event()
    total = 16 * MAX_READ_SIZE

    class Fitted(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            assert cap_read_size(transport)

        def data_received(self, data: bytes) -> None:
            received.append(len(data))
            fit_read_size(self.transport, len(data))

        def eof_received(self) -> None:
            ended.set()

    async def send_and_close(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"x" * total)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(send_and_close, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        # Nothing read until the sender is far ahead: the socket buffers hold plenty.
        transport, _ = await loop.create_connection(Fitted, "127.0.0.1", port)
        async with asyncio.timeout(10):
            await ended.wait()
        transport.close()
    finally:
        server.close()
        await server.wait_closed()
    assert sum(received) == total
    assert READ_SIZE < max(received) <= MAX_READ_SIZE
