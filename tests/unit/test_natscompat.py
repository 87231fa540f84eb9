"""The compat module on stand-in clients: the probe, the direct writer against nats-py's
own command builder, and the ack dispatcher (what it routes, what it leaves alone)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.protocol.command import pub_cmd

from liftbridge_nats._natscompat import DirectAcks, DirectWriter, is_installed, probe


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
        writer = DirectWriter(nc, asyncio.get_running_loop())
        payloads = [bytes([65 + i]) * size for i in range(3)]
        for payload in payloads:
            assert writer.write("orders.eu", reply.encode(), payload)
        if reply:
            expected = b"".join(pub_cmd("orders.eu", reply, p) for p in payloads)
        else:  # nats-py writes "PUB <subject>  <size>" (two spaces) here; one is canonical
            expected = b"".join(b"PUB orders.eu %d\r\n%b\r\n" % (size, p) for p in payloads)
        assert b"".join(nc._pending) == expected
        assert nc._pending_data_size == len(expected)
        assert nc.stats == {"out_msgs": 3, "out_bytes": 3 * size}
        assert nc._flush_queue.qsize() == 1  # one flusher wake-up for the burst

    asyncio.run(main())


def test_refuses_what_would_overflow_until_the_flusher_ran() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        nc = _Connected(loop, max_pending=300)
        writer = DirectWriter(nc, loop)
        assert writer.write("s", b"", b"x" * 100)
        assert not writer.write("s", b"", b"x" * 200) and writer.congested
        pending = b"".join(nc._pending)
        assert pending == b"PUB s 100\r\n" + b"x" * 100 + b"\r\n"
        waiting = asyncio.ensure_future(writer.wait_writable())
        await asyncio.sleep(0)
        assert not waiting.done()
        # What nats-py's flusher does: write the buffer out, resolve the wake-up.
        nc._pending.clear()
        nc._pending_data_size = 0
        nc._flush_queue.get_nowait().set_result(None)
        await asyncio.wait_for(waiting, 1)
        assert writer.write("s", b"", b"x" * 200) and writer.sent == 2
        nc._status = 0
        assert not writer.write("s", b"", b"y") and not writer.congested
        assert b"".join(nc._pending) == b"PUB s 200\r\n" + b"x" * 200 + b"\r\n"

    asyncio.run(main())


def test_a_lone_message_over_the_limit_is_taken() -> None:
    async def main() -> None:
        nc = _Connected(asyncio.get_running_loop(), max_pending=10)
        assert DirectWriter(nc, asyncio.get_running_loop()).write("s", b"", b"x" * 100)

    asyncio.run(main())


def test_waiting_writers_are_woken_by_the_poll_when_the_flusher_is_gone() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        nc = _Connected(loop, max_pending=10)
        writer = DirectWriter(nc, loop)
        assert writer.write("s", b"", b"x" * 100)
        started = loop.time()
        await asyncio.wait_for(asyncio.gather(*(writer.wait_writable() for _ in range(50))), 1)
        assert loop.time() - started < 0.5

    asyncio.run(main())


def test_probe_accepts_a_connected_client_and_says_why_not_otherwise() -> None:
    from nats.aio.client import Client

    class Connected(_Connected):
        async def _process_msg(
            self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any
        ) -> None:
            pass

    async def main() -> None:
        nc = Connected(asyncio.get_running_loop())
        nc.stats.update(in_msgs=0, in_bytes=0)
        assert probe(nc).ok
        del nc.stats["in_msgs"]
        assert "no stats" in probe(nc).reason

    asyncio.run(main())
    found = probe(object())
    assert not found.ok and "no _pending list" in found.reason
    # nats-py before connect() has no flusher queue yet: the publisher probes at start().
    assert "no _flush_queue" in probe(Client()).reason


class _Sub:
    def __init__(self, sid: int) -> None:
        self._id = sid


class _Client:
    """The part of a nats-py client the dispatcher touches."""

    def __init__(self) -> None:
        self.stats = {"in_msgs": 0, "in_bytes": 0}
        self.ordinary: list[tuple[int, bytes, Any]] = []

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any
    ) -> None:
        self.ordinary.append((sid, data, headers))


async def test_routes_plain_messages_of_registered_sids_only() -> None:
    nc = _Client()
    got: list[bytes] = []
    route = DirectAcks(nc)
    assert route.attach(_Sub(7), got.append)
    assert is_installed(nc) and route.attached
    await nc._process_msg(7, b"inbox.ack", b"", b"ack-1", None)
    await nc._process_msg(7, b"inbox.x", b"", b"", b"NATS/1.0 503\r\n\r\n")  # status
    await nc._process_msg(8, b"other", b"", b"app", None)
    assert got == [b"ack-1"]
    assert nc.stats == {"in_msgs": 1, "in_bytes": 5}
    assert [(sid, data) for sid, data, _ in nc.ordinary] == [(7, b""), (8, b"app")]
    route.detach()
    assert not is_installed(nc) and "_process_msg" not in vars(nc)
    route.detach()  # idempotent


async def test_a_failing_handler_does_not_break_the_read_loop(caplog: Any) -> None:
    nc = _Client()
    route = DirectAcks(nc)

    def boom(data: bytes) -> None:
        raise RuntimeError("bad handler")

    assert route.attach(_Sub(1), boom)
    await nc._process_msg(1, b"s", b"", b"x", None)
    assert "an ack handler failed" in caplog.text
    route.detach()


def test_refuses_clients_it_does_not_know() -> None:
    class NoStats:
        async def _process_msg(
            self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any
        ) -> None:
            pass

    class OtherSignature(_Client):
        async def _process_msg(self, sid: int, msg: Any) -> None:  # type: ignore[override]
            pass

    for nc in (object(), NoStats(), OtherSignature()):
        route = DirectAcks(nc)
        assert not route.attach(_Sub(1), lambda data: None)
        assert not route.attached and not is_installed(nc)


async def test_an_instance_method_that_was_there_before_is_put_back() -> None:
    nc = _Client()

    async def custom(sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any) -> None:
        pass

    nc._process_msg = custom  # type: ignore[method-assign]
    first, second = DirectAcks(nc), DirectAcks(nc)
    assert first.attach(_Sub(1), lambda d: None) and second.attach(_Sub(2), lambda d: None)
    first.detach()
    assert is_installed(nc)
    second.detach()
    assert nc._process_msg is custom
