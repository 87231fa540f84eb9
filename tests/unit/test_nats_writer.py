"""NatsWriter against nats-py's own command builder, on a stand-in for a connected
client (the attributes NatsWriter checks before it writes anything)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.protocol.command import pub_cmd

from liftbridge_nats._natswriter import NatsWriter


class _Connected:
    CONNECTED = 1

    def __init__(self, loop: asyncio.AbstractEventLoop, max_pending: int = 1 << 20) -> None:
        self._status = self.CONNECTED
        self._pending: list[bytes] = []
        self._pending_data_size = 0
        self._max_pending_size = max_pending
        self._flush_queue: asyncio.Queue[Any] = asyncio.Queue()
        self.stats = {"out_msgs": 0, "out_bytes": 0}
        self._flusher_task = loop.create_future()  # a pending stand-in for the task


@pytest.mark.parametrize("reply", ["", "_INBOX.abc.c-1"])
@pytest.mark.parametrize("size", [0, 1, 100, 1024, 70_000])
def test_buffers_join_to_what_nats_py_would_send(reply: str, size: int) -> None:
    async def main() -> None:
        nc = _Connected(asyncio.get_running_loop())
        writer = NatsWriter(nc, asyncio.get_running_loop())
        assert writer.enabled
        payloads = [bytes([65 + i]) * size for i in range(3)]
        for payload in payloads:
            assert writer.write("orders.eu", reply, payload)
        if reply:
            expected = b"".join(pub_cmd("orders.eu", reply, p) for p in payloads)
        else:  # nats-py writes "PUB <subject>  <size>" (two spaces) here; one is canonical
            expected = b"".join(b"PUB orders.eu %d\r\n%b\r\n" % (size, p) for p in payloads)
        assert b"".join(nc._pending) == expected
        assert nc._pending_data_size == len(expected)
        assert nc.stats == {"out_msgs": 3, "out_bytes": 3 * size}
        assert nc._flush_queue.qsize() == 1  # one flusher wake-up for the burst

    asyncio.run(main())


def test_refuses_what_would_overflow_or_a_disconnected_client() -> None:
    async def main() -> None:
        nc = _Connected(asyncio.get_running_loop(), max_pending=300)
        writer = NatsWriter(nc, asyncio.get_running_loop())
        assert writer.write("s", "", b"x" * 100)
        assert not writer.write("s", "", b"x" * 200)  # the caller falls back to nc.publish
        assert len(nc._pending) == 3
        nc._status = 0
        assert not writer.write("s", "", b"y")
        assert len(nc._pending) == 3
        off = NatsWriter(nc, asyncio.get_running_loop(), enabled=False)
        assert not off.enabled

    asyncio.run(main())
