"""The blocking Publisher over the memory transport: acks, threads, batching of the
hand-over to the loop, backpressure, flush and close; and the blocking classes keep
their async twins' signatures."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import liftbridge_nats
from liftbridge_nats import (
    Ack,
    AckError,
    AckTimeoutError,
    IncorrectOffsetError,
    InvalidArgumentError,
    NoRespondersError,
    PublisherClosedError,
    UnsentTimeoutError,
)
from liftbridge_nats._memtransport import MemoryTransport as SilentTransport
from liftbridge_nats.sync import (
    Client,
    Consumer,
    EventLoopRunningError,
    PortalClosedError,
    Publisher,
)
from liftbridge_nats.sync._handoff import Handoff
from liftbridge_nats.sync._portal import call, portal_loop
from liftbridge_nats.testing import Failure, MemoryTransport


def quiet(**options: Any) -> dict[str, Any]:
    return {"metrics": False, "tracing": False, **options}


def test_publish_and_publish_async_return_acks() -> None:
    with Publisher(MemoryTransport(), **quiet()) as pub:
        ack = pub.publish("orders", b"one", key=b"k")
        assert isinstance(ack, Ack) and ack.offset == 0
        futures = [pub.publish_async("orders", b"n%d" % i) for i in range(5)]
        assert all(isinstance(f, concurrent.futures.Future) for f in futures)
        assert [f.result(2).offset for f in futures] == [1, 2, 3, 4, 5]  # type: ignore[union-attr]
        pub.flush(2)
        assert pub.stats.acked == 6 and pub.pending == 0


def test_threads_share_a_publisher_and_keep_their_order() -> None:
    transport = MemoryTransport()
    with Publisher(transport, **quiet()) as pub:

        def work(thread: int) -> list[int]:
            futures = [pub.publish_async("s", b"%d-%d" % (thread, i)) for i in range(100)]
            return [f.result(5).offset for f in futures]  # type: ignore[union-attr]

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            offsets = list(pool.map(work, range(4)))
    assert sorted(o for mine in offsets for o in mine) == list(range(400))
    assert all(mine == sorted(mine) for mine in offsets)


class CountingLoop:
    """Forwards to a loop, counting the cross-thread wake-ups."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.wakeups = 0

    def call_soon_threadsafe(self, callback: Callable[[], object]) -> None:
        self.wakeups += 1
        self.loop.call_soon_threadsafe(callback)

    def call_soon(self, callback: Callable[[], object]) -> None:
        self.loop.call_soon(callback)


def test_a_burst_from_one_thread_wakes_the_loop_once() -> None:
    loop = CountingLoop(portal_loop())
    handled: list[int] = []
    done = threading.Event()

    def handle(item: int) -> None:
        handled.append(item)
        handoff.settled()
        if len(handled) == 200:
            done.set()

    handoff: Handoff[int] = Handoff(
        loop,  # type: ignore[arg-type]  # the two methods Handoff uses
        room=1000,
        handle=handle,
        fail=lambda item, exc: None,
        closed_error=RuntimeError,
    )
    gate = threading.Event()
    loop.loop.call_soon_threadsafe(gate.wait, 5)  # the loop is busy meanwhile
    for i in range(200):  # fewer than a producer may queue ahead of the loop
        assert handoff.put(i, timeout=1)
    gate.set()
    assert done.wait(5)
    assert handled == list(range(200))
    assert loop.wakeups == 1


def test_no_room_blocks_until_the_deadline_then_fails_unsent() -> None:
    transport = SilentTransport()  # acks nothing unless told
    with Publisher(transport, max_queued=3, **quiet(ack_timeout=5)) as pub:
        waiting = [pub.publish_async("s", b"%d" % i) for i in range(3)]
        started = time.monotonic()
        late = pub.publish_async("s", b"late", timeout=0.2)
        assert 0.15 < time.monotonic() - started < 2
        with pytest.raises(UnsentTimeoutError) as info:
            late.result(0)
        assert info.value.maybe_stored is False
        # Acks free the room again.
        call(_ack, transport, 0, 3)
        assert [f.result(2).offset for f in waiting] == [0, 1, 2]  # type: ignore[union-attr]
        again = pub.publish_async("s", b"again")
        call(_ack, transport, 3, 4)
        assert again.result(2) is not None
        pub.close(0)


async def _ack(transport: SilentTransport, first: int, end: int) -> None:
    """Ack the messages delivered at ``first`` up to ``end`` once they are there."""
    for _ in range(400):
        if len(transport.delivered) >= end:
            break
        await asyncio.sleep(0.005)
    for sent in transport.delivered[first:end]:
        transport.ack(sent)


def test_failures_reach_the_thread_and_free_their_room(caplog: pytest.LogCaptureFixture) -> None:
    transport = MemoryTransport()
    transport.fail(Failure.NO_RESPONDERS, times=2)
    transport.fail(AckError.INCORRECT_OFFSET, times=2)
    transport.fail(Failure.NO_ACK, times=2)
    # Room for two: a failure that did not give its room back would block the rest.
    with Publisher(transport, max_queued=2, **quiet(ack_timeout=0.2)) as pub:
        with pytest.raises(NoRespondersError):
            pub.publish("s", b"nobody")
        with pytest.raises(NoRespondersError):
            pub.publish_async("s", b"nobody").result(2)
        with pytest.raises(IncorrectOffsetError):
            pub.publish("s", b"wrong offset", expected_offset=7)
        with pytest.raises(IncorrectOffsetError):
            pub.publish_async("s", b"wrong offset", expected_offset=7).result(2)
        lost = [pub.publish_async("s", b"lost"), pub.publish_async("s", b"lost")]
        for future in lost:
            with pytest.raises(AckTimeoutError):
                future.result(2)
        assert pub.publish("s", b"fine") is not None
        assert pub.pending == 0
    gc.collect()
    # Each failure was read where it went, the thread's future: none left for asyncio
    # to report as never retrieved.
    assert "never retrieved" not in caplog.text


@pytest.mark.parametrize("timeout", [0, -1.0, True, "1"])
def test_a_bad_timeout_is_refused_at_the_call(timeout: Any) -> None:
    with Publisher(MemoryTransport(), **quiet()) as pub:
        with pytest.raises(InvalidArgumentError, match="timeout must be > 0"):
            pub.publish_async("s", b"x", timeout=timeout)
        with pytest.raises(InvalidArgumentError, match="timeout must be > 0"):
            pub.publish("s", b"x", timeout=timeout)
        assert pub.publish("s", b"fine", timeout=1) is not None
        assert pub.pending == 0


def test_close_fails_later_publishes_and_settles_what_waited() -> None:
    transport = SilentTransport()
    pub = Publisher(transport, **quiet())
    unacked = pub.publish_async("s", b"never acked")
    pub.close(timeout=0.05)
    assert pub.closed
    with pytest.raises(liftbridge_nats.AckLostError):
        unacked.result(2)
    with pytest.raises(PublisherClosedError):
        pub.publish_async("s", b"late")
    with pytest.raises(PublisherClosedError):
        pub.publish("s", b"late")
    pub.close()  # idempotent


def test_a_loop_that_ends_abruptly_fails_every_waiting_publish(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The loop stops without the close callbacks that close_shared() runs: nothing will
    # read acks or free room any more, so the callers must fail, not wait forever.
    pub = Publisher(SilentTransport(), ack_timeout=60, max_queued=2, **quiet())
    outcome: dict[str, BaseException] = {}

    def blocked(name: str, value: bytes) -> None:
        try:
            pub.publish("s", value)
        except BaseException as exc:
            outcome[name] = exc

    in_flight = threading.Thread(target=blocked, args=("in flight", b"a"))
    in_flight.start()
    future = pub.publish_async("s", b"b")
    deadline = time.monotonic() + 5
    while pub.pending < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pub.pending == 2, "both messages should wait for their ack"
    no_room = threading.Thread(target=blocked, args=("no room", b"c"))
    no_room.start()
    while not pub._handoff._waiting and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pub._handoff._waiting == 1, "the third message should wait for room"

    loop = portal_loop(pub._portal)
    loop.call_soon_threadsafe(loop.stop)
    in_flight.join(5)
    no_room.join(5)
    assert not in_flight.is_alive() and not no_room.is_alive(), "a publish still waits"
    assert isinstance(outcome["in flight"], PortalClosedError)
    assert isinstance(future.exception(5), PortalClosedError)
    assert isinstance(outcome["no room"], PublisherClosedError)
    assert "the liftbridge-nats loop ended" in caplog.text
    with pytest.raises(PublisherClosedError):
        pub.publish("s", b"late")
    pub.close()  # nothing to close on a loop that is gone
    with Publisher(MemoryTransport(), **quiet()) as fresh:  # a new loop serves new objects
        assert fresh.publish("s", b"fine") is not None


def test_blocking_calls_in_a_running_loop_fail_at_once() -> None:
    with Publisher(MemoryTransport(), **quiet()) as pub:

        async def inside() -> None:
            with pytest.raises(EventLoopRunningError, match=r"Publisher\.publish"):
                pub.publish("s", b"x")
            with pytest.raises(EventLoopRunningError, match=r"Publisher\.flush"):
                pub.flush()
            with pytest.raises(EventLoopRunningError, match=r"Publisher\(\)"):
                Publisher(MemoryTransport())

        asyncio.run(inside())


def _twins() -> list[tuple[type, type, str]]:
    """Every public method of the async classes, with the blocking class that must
    have it (``start`` aside: the blocking Publisher starts when created)."""
    pairs = [
        (Client, liftbridge_nats.Client),
        (Consumer, liftbridge_nats.Consumer),
        (Publisher, liftbridge_nats.Publisher),
    ]
    return [
        (blocking, twin, name)
        for blocking, twin in pairs
        for name, member in vars(twin).items()
        if callable(member)
        and not name.startswith("_")
        and not (twin is liftbridge_nats.Publisher and name == "start")
    ]


@pytest.mark.parametrize(
    ("blocking", "async_twin", "name"),
    _twins(),
    ids=[f"{b.__name__}.{n}" for b, _, n in _twins()],
)
def test_blocking_methods_keep_the_async_signatures(
    blocking: type, async_twin: type, name: str
) -> None:
    mine = inspect.signature(getattr(blocking, name))
    theirs = inspect.signature(getattr(async_twin, name))
    assert [(p.name, p.kind, p.default) for p in mine.parameters.values()] == [
        (p.name, p.kind, p.default) for p in theirs.parameters.values()
    ]
