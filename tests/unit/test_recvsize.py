"""The read size cap on asyncio's socket transports: what it changes, and what it leaves."""

from __future__ import annotations

import asyncio
import types

from liftbridge_nats._recvsize import MAX_READ_SIZE, READ_SIZE, cap_read_size, fit_read_size


async def _read_from_a_sender(size: int, protocol: type[_Reads]) -> list[int]:
    """The sizes of the reads that took ``size`` bytes a local server sent at once."""
    loop = asyncio.get_running_loop()

    async def send_and_close(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"x" * size)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(send_and_close, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        transport, reads = await loop.create_connection(protocol, "127.0.0.1", port)
        async with asyncio.timeout(10):
            await reads.ended.wait()
        transport.close()
    finally:
        server.close()
        await server.wait_closed()
    assert sum(reads.received) == size
    return reads.received


class _Reads(asyncio.Protocol):
    """Caps its transport's read size and records each read's."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.ended = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        assert transport.max_size > READ_SIZE  # type: ignore[attr-defined]  # asyncio's default
        assert cap_read_size(transport)
        assert transport.max_size == READ_SIZE  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.received.append(len(data))

    def eof_received(self) -> None:
        self.ended.set()


class _FittedReads(_Reads):
    """Also fits the read size after each read."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        fit_read_size(self.transport, len(data))


async def test_a_selector_socket_transport_reads_at_most_the_cap() -> None:
    received = await _read_from_a_sender(3 * READ_SIZE, _Reads)
    assert max(received) <= READ_SIZE


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
    # The sender writes far faster than one 64 KiB read a turn takes: reads fill.
    received = await _read_from_a_sender(16 * MAX_READ_SIZE, _FittedReads)
    assert READ_SIZE < max(received) <= MAX_READ_SIZE
