"""The read size cap on asyncio's socket transports: what it changes, and what it leaves."""

from __future__ import annotations

import asyncio
import types

from liftbridge_nats._recvsize import READ_SIZE, cap_read_size


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
        cap_read_size(transport)
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
    cap_read_size(smaller)
    assert smaller.max_size == 4096  # never raised
    cap_read_size(types.SimpleNamespace())  # no max_size (TLS, uvloop)
    cap_read_size(None)  # no transport at all

    class Fixed:
        __slots__ = ()
        max_size = 1 << 20  # a class attribute an instance cannot set

    cap_read_size(Fixed())
    assert Fixed.max_size == 1 << 20
