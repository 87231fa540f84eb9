"""The direct-ack dispatcher on stand-in clients: what it routes, what it leaves alone,
and that it refuses clients that do not look like the nats-py it was written for."""

from __future__ import annotations

import asyncio
from typing import Any

from liftbridge_nats._directacks import DirectAcks, is_installed


class _Client:
    """The part of a nats-py client the dispatcher touches."""

    def __init__(self) -> None:
        self.stats = {"in_msgs": 0, "in_bytes": 0}
        self.ordinary: list[tuple[int, bytes, Any]] = []

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any
    ) -> None:
        self.ordinary.append((sid, data, headers))


def test_routes_plain_messages_of_registered_sids_only() -> None:
    nc = _Client()
    got: list[bytes] = []
    route = DirectAcks(nc)
    assert route.attach(7, got.append)
    assert is_installed(nc) and route.attached

    async def feed() -> None:
        await nc._process_msg(7, b"inbox.ack", b"", b"ack-1", None)
        await nc._process_msg(7, b"inbox.x", b"", b"", b"NATS/1.0 503\r\n\r\n")  # status
        await nc._process_msg(8, b"other", b"", b"app", None)

    asyncio.run(feed())
    assert got == [b"ack-1"]
    assert nc.stats == {"in_msgs": 1, "in_bytes": 5}
    assert [(sid, data) for sid, data, _ in nc.ordinary] == [(7, b""), (8, b"app")]
    route.detach()
    assert not is_installed(nc) and "_process_msg" not in vars(nc)
    route.detach()  # idempotent


def test_a_failing_handler_does_not_break_the_read_loop(caplog: Any) -> None:
    nc = _Client()
    route = DirectAcks(nc)

    def boom(data: bytes) -> None:
        raise RuntimeError("bad handler")

    assert route.attach(1, boom)
    asyncio.run(nc._process_msg(1, b"s", b"", b"x", None))
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
        assert not route.attach(1, lambda data: None)
        assert not route.attached and not is_installed(nc)


def test_an_instance_method_that_was_there_before_is_put_back() -> None:
    nc = _Client()

    async def custom(sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any) -> None:
        pass

    nc._process_msg = custom  # type: ignore[method-assign]
    first, second = DirectAcks(nc), DirectAcks(nc)
    assert first.attach(1, lambda d: None) and second.attach(2, lambda d: None)
    first.detach()
    assert is_installed(nc)
    second.detach()
    assert nc._process_msg is custom
