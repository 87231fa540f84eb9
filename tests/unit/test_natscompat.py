"""The compat module on stand-in clients: the probe, the direct writer against nats-py's
own command builder, and the ack dispatcher (what it routes, what it leaves alone)."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client as NatsClient
from nats.protocol.command import pub_cmd
from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser
from nats.protocol.parser import AWAITING_MSG_PAYLOAD as _AWAITING_MSG_PAYLOAD

from liftbridge_nats import _natscompat
from liftbridge_nats._natscompat import DirectAcks, DirectWriter, is_installed, probe, reads_frames
from liftbridge_nats._recvsize import READ_SIZE


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
        self._transport: Any = None  # set when a test needs the socket


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
        # One hand-over in the next turn of the loop; with no socket to take the
        # buffer, it wakes the flusher, once for the three.
        assert nc._flush_queue.qsize() == 0
        await asyncio.sleep(0)
        assert nc._flush_queue.qsize() == 1
        assert b"".join(nc._pending) == expected

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


class _Socket:
    """The asyncio transport under nats-py's: how many bytes it still holds."""

    def __init__(self, backlog: int) -> None:
        self.backlog = backlog

    def get_write_buffer_size(self) -> int:
        return self.backlog


class _StreamWriter:
    def __init__(self, backlog: int) -> None:
        self.transport = _Socket(backlog)


class _Transport:
    """nats-py's transport as the writer sees it: ``writelines`` and, for TCP, the
    stream writer under it. Records what it was handed."""

    def __init__(self, *, tcp: bool = True, backlog: int = 0, closing: bool = False) -> None:
        if tcp:
            self._io_writer = _StreamWriter(backlog)
        self.closing = closing
        self.written: list[bytes] = []

    def writelines(self, payload: list[bytes]) -> None:
        if self.closing:
            raise RuntimeError("unable to write; the transport is closing")
        self.written.append(b"".join(payload))


def _publish_kib(writer: DirectWriter, count: int) -> bytes:
    """``count`` 1 KiB messages through ``writer``; the bytes nats-py would send."""
    payloads = [b"%06d" % i * 171 for i in range(count)]  # 1,026 bytes each
    for payload in payloads:
        assert writer.write("orders", b"", payload)
    return b"".join(b"PUB orders %d\r\n%b\r\n" % (len(p), p) for p in payloads)


@pytest.mark.parametrize(("limit", "threshold"), [(2 << 20, 256 * 1024), (64 * 1024, 32 * 1024)])
def test_a_long_run_of_writes_reaches_the_socket_before_the_flusher_runs(
    limit: int, threshold: int
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        nc = _Connected(loop, max_pending=limit)
        nc._transport = transport = _Transport()
        writer = DirectWriter(nc, loop)
        expected = _publish_kib(writer, 1000)  # about 1 MiB, and no await
        # In order, nothing twice: what the socket took, then what waits for the flusher.
        assert b"".join(transport.written) + b"".join(nc._pending) == expected
        assert all(threshold <= len(chunk) < threshold + 1100 for chunk in transport.written)
        assert nc._pending_data_size == len(b"".join(nc._pending)) < threshold
        assert nc.stats["out_msgs"] == 1000 and writer.sent == 1000 and not writer.congested
        # The rest goes in the next turn of the loop, without the flusher.
        await asyncio.sleep(0)
        assert b"".join(transport.written) == expected
        assert nc._pending == [] and nc._pending_data_size == 0
        assert nc._flush_queue.qsize() == 0

    asyncio.run(main())


@pytest.mark.parametrize(
    "options",
    [{"backlog": 300 * 1024}, {"tcp": False}, {"closing": True}],
    ids=["socket-behind", "not-tcp", "closing"],
)
def test_the_buffer_waits_for_the_flusher_when_the_socket_cannot_take_it(
    options: dict[str, Any],
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        nc = _Connected(loop, max_pending=2 << 20)
        nc._transport = transport = _Transport(**options)
        writer = DirectWriter(nc, loop)
        expected = _publish_kib(writer, 1000)
        assert transport.written == []
        assert b"".join(nc._pending) == expected and nc._pending_data_size == len(expected)
        # The next turn of the loop leaves the buffer to the flusher (woken once).
        await asyncio.sleep(0)
        assert transport.written == [] and nc._flush_queue.qsize() == 1
        # The pending limit still paces the caller.
        while writer.write("orders", b"", b"x" * 1024):
            pass
        assert writer.congested and nc._pending_data_size <= 2 << 20

    asyncio.run(main())


def test_each_turn_of_the_loop_hands_its_messages_to_the_socket_in_one_write() -> None:
    """A steady trickle (a few messages per turn of the loop) goes to the socket
    without waking nats-py's flusher: one write per turn, in order."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        nc = _Connected(loop)
        nc._transport = transport = _Transport()
        writer = DirectWriter(nc, loop)
        turns = [[b"a" * 10, b"b" * 20], [b"c" * 30], [b"d" * 5, b"e" * 6, b"f" * 7]]
        for done, payloads in enumerate(turns):
            for payload in payloads:
                assert writer.write("s", b"_INBOX.x", payload)
            assert len(transport.written) == done  # nothing goes before the turn ends
            await asyncio.sleep(0)
        assert transport.written == [
            b"".join(pub_cmd("s", "_INBOX.x", p) for p in payloads) for payloads in turns
        ]
        assert nc._pending == [] and nc._pending_data_size == 0
        assert nc._flush_queue.qsize() == 0
        # Disconnected before the turn ends, its messages wait in the buffer (nats-py
        # sends them once it has reconnected) and the flusher is woken for them.
        assert writer.write("s", b"", b"g")
        nc._status = 0
        await asyncio.sleep(0)
        assert len(transport.written) == 3 and nc._flush_queue.qsize() == 1
        assert b"".join(nc._pending) == b"PUB s 1\r\ng\r\n"

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


class _Reading(_Client):
    """A client with nats-py's own protocol parser, logging what reaches the client."""

    def __init__(self, parser: bool = True) -> None:
        super().__init__()
        self.events: list[tuple[Any, ...]] = []
        self._transport: Any = None
        if parser:
            self._ps = Parser(self)

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any
    ) -> None:
        self.events.append(("msg", sid, subject, reply, data, headers))

    async def _process_ping(self) -> None:
        self.events.append(("ping",))

    async def _process_pong(self) -> None:
        self.events.append(("pong",))

    # Newer nats-py parsers await the INFO handler; older ones (2.9) call a plain method.
    if inspect.iscoroutinefunction(NatsClient._process_info):

        async def _process_info(self, info: Any) -> None:
            self.events.append(("info", info))

    else:

        def _process_info(self, info: Any) -> None:  # type: ignore[misc]
            self.events.append(("info", info))

    async def _process_err(self, err: str) -> None:
        self.events.append(("err", err))


_ACK_SID = 7
_FRAMES = st.one_of(
    st.binary(max_size=40).map(lambda p: b"MSG _INBOX.a.ack 7 %d\r\n%b\r\n" % (len(p), p)),
    st.binary(max_size=40).map(lambda p: b"MSG orders 3 _INBOX.r %d\r\n%b\r\n" % (len(p), p)),
    st.binary(max_size=20).map(lambda p: b"MSG orders 7 _INBOX.r %d\r\n%b\r\n" % (len(p), p)),
    # Starts like an ack's line, with a reply subject of digits.
    st.binary(max_size=20).map(lambda p: b"MSG _INBOX.a.ack 7 12 %d\r\n%b\r\n" % (len(p), p)),
    st.binary(max_size=20).map(
        lambda p: (
            b"HMSG _INBOX.a.ack 7 %d %d\r\nNATS/1.0 503\r\n\r\n%b\r\n"
            % (len(b"NATS/1.0 503\r\n\r\n"), len(b"NATS/1.0 503\r\n\r\n") + len(p), p)
        )
    ),
    st.sampled_from([b"PING\r\n", b"PONG\r\n", b"+OK\r\n", b'INFO {"max_payload":1}\r\n']),
    st.just(b"-ERR 'Stale Connection'\r\n"),
)


@settings(max_examples=300, deadline=None)
@given(frames=st.lists(_FRAMES, max_size=30), cuts=st.lists(st.integers(0, 2000), max_size=12))
def test_the_reader_gives_the_client_what_its_parser_would_minus_our_acks(
    frames: list[bytes], cuts: list[int]
) -> None:
    """Chunks cut anywhere: the reader's handler and the client's own methods see the
    same messages in the same order as with nats-py's parser and the dispatcher alone."""
    stream = b"".join(frames)
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]

    async def feed(with_reader: bool) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
        nc = _Reading()
        route = DirectAcks(nc)

        def on_ack(data: bytes) -> None:
            nc.events.append(("ack", data))

        assert route.attach(_Sub(_ACK_SID), on_ack)
        assert reads_frames(nc)
        if not with_reader:
            del nc._ps.parse
        for chunk in chunks:
            await nc._ps.parse(chunk)
        assert not nc._ps.buf and nc._ps.state == AWAITING_CONTROL_LINE
        route.detach()
        assert "parse" not in vars(nc._ps)
        return nc.events, nc.stats

    async def main() -> None:
        assert await feed(True) == await feed(False)

    asyncio.run(main())


async def test_the_reader_reads_a_frame_cut_anywhere_and_survives_a_reset() -> None:
    nc = _Reading()
    got: list[bytes] = []
    route = DirectAcks(nc)
    assert route.attach(_Sub(_ACK_SID), got.append)
    frame = b"MSG _INBOX.a.ack 7 5\r\nhello\r\n"
    for cut in range(1, len(frame)):
        await nc._ps.parse(frame + frame[:cut])  # one whole frame, then one cut
        assert got == [b"hello"] * (2 * cut - 1)
        await nc._ps.parse(frame[cut:])
        assert got == [b"hello"] * (2 * cut) and not nc._ps.buf
    await nc._ps.parse(frame[:10])
    nc._ps.reset()  # a reconnect drops what the old connection left half-read
    await nc._ps.parse(frame)
    count = 2 * (len(frame) - 1) + 1
    assert got == [b"hello"] * count and nc.events == []
    assert nc.stats == {"in_msgs": count, "in_bytes": 5 * count}
    route.detach()


class _SocketTransport:
    """asyncio's selector socket transport as far as the read size goes."""

    max_size = 256 * 1024


class _Connection:
    def __init__(self) -> None:
        self._io_writer = types.SimpleNamespace(transport=_SocketTransport())


async def test_the_reader_caps_the_read_size_of_each_connection_it_reads() -> None:
    nc = _Reading()
    nc._transport = first = _Connection()
    route = DirectAcks(nc)
    assert route.attach(_Sub(_ACK_SID), lambda _: None)
    await nc._ps.parse(b"PING\r\n")
    assert first._io_writer.transport.max_size == READ_SIZE
    nc._transport = second = _Connection()  # a reconnect: nats-py makes a new transport
    await nc._ps.parse(b"PING\r\n")
    assert second._io_writer.transport.max_size == READ_SIZE
    nc._transport = None  # between connections
    await nc._ps.parse(b"PING\r\n")
    assert nc.events == [("ping",)] * 3
    route.detach()


async def test_a_large_payload_waits_in_the_parser_not_in_the_reader() -> None:
    """A payload spread over many chunks is kept by nats-py's parser (its buffer grows
    by each chunk), not gathered again by the reader at every chunk."""
    nc = _Reading()
    got: list[bytes] = []
    route = DirectAcks(nc)
    assert route.attach(_Sub(_ACK_SID), got.append)
    big = bytes(range(256)) * 4096  # 1 MiB
    stream = (
        b"MSG _INBOX.a.ack 7 %d\r\n%b\r\n" % (len(big), big)
        + b"MSG orders 3 %d\r\n%b\r\n" % (len(big), big)
        + b"MSG _INBOX.a.ack 7 2\r\nok\r\n"
    )
    chunk = 32 * 1024
    for at in range(0, len(stream), chunk):
        await nc._ps.parse(stream[at : at + chunk])
        waiting = len(got) < 1 or not nc.events
        if waiting and at + chunk < len(stream) - 40:
            assert nc._ps.state == _AWAITING_MSG_PAYLOAD
    assert got == [big, b"ok"]
    assert [(e[1], e[4]) for e in nc.events] == [(3, big)]
    route.detach()


class _OtherParser(Parser):
    # Not the parse the reader was written for (another signature).
    async def parse(self, data: bytes = b"", more: bool = False) -> None:
        await super().parse(data)


async def test_a_parser_it_does_not_know_keeps_its_parse_and_gets_the_dispatcher() -> None:
    nc = _Reading()
    nc._ps = _OtherParser(nc)
    got: list[bytes] = []
    route = DirectAcks(nc)
    assert route.attach(_Sub(_ACK_SID), got.append)
    assert "parse" not in vars(nc._ps) and is_installed(nc)
    await nc._ps.parse(b"MSG _INBOX.a.ack 7 2\r\nok\r\n")
    assert got == [b"ok"]
    route.detach()
    plain = _Reading(parser=False)
    assert DirectAcks(plain).attach(_Sub(1), got.append)  # no parser at all: dispatcher only


async def test_a_failing_handler_under_the_reader_does_not_break_the_read_loop(
    caplog: Any,
) -> None:
    nc = _Reading()
    route = DirectAcks(nc)

    def boom(data: bytes) -> None:
        raise RuntimeError("bad handler")

    assert route.attach(_Sub(_ACK_SID), boom)
    await nc._ps.parse(b"MSG i 7 1\r\nx\r\nPING\r\n")
    assert "an ack handler failed" in caplog.text and nc.events == [("ping",)]
    route.detach()


async def test_a_control_line_longer_than_nats_py_allows_is_left_to_its_parser() -> None:
    async def feed(with_reader: bool) -> tuple[list[tuple[Any, ...]], bytes]:
        nc = _Reading()
        route = DirectAcks(nc)
        assert route.attach(_Sub(_ACK_SID), lambda data: nc.events.append(("ack", data)))
        if not with_reader:
            del nc._ps.parse
        await nc._ps.parse(b"MSG _INBOX.a.ack 7 2\r\nok\r\n")
        for _ in range(10):
            await nc._ps.parse(b"X" * 500)  # no line end in sight
        await nc._ps.parse(b"\r\nMSG _INBOX.a.ack 7 2\r\nno\r\n")
        left = bytes(nc._ps.buf)
        route.detach()
        return nc.events, left

    events, left = await feed(True)
    assert (events, left) == await feed(False)
    assert events == [("ack", b"ok")] and left.startswith(b"X" * 5000)


class _Duplex(_Reading):
    """A client that writes (the writer's side of nats-py) and reads (its parser)."""

    CONNECTED = 1

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._status = self.CONNECTED
        self._pending: list[bytes] = []
        self._pending_data_size = 0
        self._max_pending_size = 1 << 20
        self._flush_queue: asyncio.Queue[Any] = asyncio.Queue()
        self.stats.update(out_msgs=0, out_bytes=0)
        self._flusher_task = loop.create_future()
        self._transport = self.socket = _Transport()


async def _turn_of(writer: DirectWriter, *payloads: bytes) -> None:
    """One turn of the loop that publishes ``payloads``."""
    for payload in payloads:
        assert writer.write("s", b"", payload)
    await asyncio.sleep(0)


async def test_at_a_high_rate_a_turns_messages_wait_for_data_from_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once writes carry four messages or more, the next turn's wait until the server
    sends something (or the hold ends); a turn after a write of fewer goes at once."""
    # A hold no pause of a busy test machine outlasts: only data ends it here.
    monkeypatch.setattr(_natscompat, "_HOLD", 60.0)
    loop = asyncio.get_running_loop()
    nc = _Duplex(loop)
    acks: list[bytes] = []
    route = DirectAcks(nc)
    assert route.attach(_Sub(_ACK_SID), acks.append) and reads_frames(nc)
    writer = DirectWriter(nc, loop)
    written = nc.socket.written
    await _turn_of(writer, b"a", b"b", b"c")
    await _turn_of(writer, b"d")  # after a write of three: not held
    await _turn_of(writer, b"e", b"f", b"g", b"h")
    assert written == [
        b"PUB s 1\r\na\r\nPUB s 1\r\nb\r\nPUB s 1\r\nc\r\n",
        b"PUB s 1\r\nd\r\n",
        b"PUB s 1\r\ne\r\nPUB s 1\r\nf\r\nPUB s 1\r\ng\r\nPUB s 1\r\nh\r\n",
    ]
    await _turn_of(writer, b"i")  # after a write of four: held
    await _turn_of(writer, b"j")
    assert len(written) == 3
    await nc._ps.parse(b"MSG _INBOX.a.ack 7 2\r\nok\r\n")
    assert written[3:] == [b"PUB s 1\r\ni\r\nPUB s 1\r\nj\r\n"] and acks == [b"ok"]
    await _turn_of(writer, b"k")  # after a write of two: at once
    assert written[4:] == [b"PUB s 1\r\nk\r\n"]
    assert nc._pending == [] and nc._flush_queue.qsize() == 0
    route.detach()


async def test_held_messages_go_when_the_hold_ends_without_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_natscompat, "_HOLD", 0.05)
    loop = asyncio.get_running_loop()
    nc = _Duplex(loop)
    route = DirectAcks(nc)
    assert route.attach(_Sub(_ACK_SID), lambda data: None)
    writer = DirectWriter(nc, loop)
    written = nc.socket.written
    await _turn_of(writer, b"a", b"b", b"c", b"d")
    await _turn_of(writer, b"e")
    assert len(written) == 1
    await asyncio.sleep(0.5)  # the hold ended
    assert written[1:] == [b"PUB s 1\r\ne\r\n"]
    # Data arriving afterwards finds nothing held: nothing is written twice.
    await nc._ps.parse(b"PING\r\n")
    await asyncio.sleep(0)
    assert len(written) == 2 and nc.events == [("ping",)]
    # Long after the last write, a turn goes at once whatever the last write carried.
    await _turn_of(writer, b"f", b"g", b"h", b"i")
    await asyncio.sleep(0.1)
    await _turn_of(writer, b"j")
    assert written[3:] == [b"PUB s 1\r\nj\r\n"]
    route.detach()


@pytest.mark.parametrize("route", ["none", "dispatcher alone"])
async def test_nothing_is_held_where_no_reader_of_ours_sees_data_arrive(
    route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without our reader on the client (no ack route, or a parser we do not know) the
    writer cannot tell when data arrives: it writes each turn at once."""
    monkeypatch.setattr(_natscompat, "_HOLD", 60.0)
    loop = asyncio.get_running_loop()
    nc = _Duplex(loop)
    acks = DirectAcks(nc)
    if route != "none":
        nc._ps = _OtherParser(nc)
        assert acks.attach(_Sub(_ACK_SID), lambda data: None) and not reads_frames(nc)
    writer = DirectWriter(nc, loop)
    await _turn_of(writer, b"a", b"b", b"c", b"d")
    await _turn_of(writer, b"e")
    assert nc.socket.written[1:] == [b"PUB s 1\r\ne\r\n"]
    acks.detach()
