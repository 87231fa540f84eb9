"""The shared background loop of the blocking API: calls, the in-loop check, close,
close callbacks, interrupts and fork."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import warnings

import pytest

from liftbridge_nats import ClientClosedError, LocalError
from liftbridge_nats.sync import _portal
from liftbridge_nats.sync._portal import (
    EventLoopRunningError,
    PortalClosedError,
    call,
    close_shared,
    on_close,
    portal_loop,
    shared_portal,
    submit,
    wait,
)


async def add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


async def sleep_until_cancelled(cancelled: threading.Event) -> None:
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        cancelled.set()
        raise


async def loop_thread() -> str:
    return threading.current_thread().name


def test_call_runs_on_one_shared_daemon_loop() -> None:
    assert call(add, 2, 3) == 5
    name = call(loop_thread)
    assert name == _portal.THREAD_NAME
    assert shared_portal() is shared_portal()
    assert portal_loop().is_running()
    [thread] = [t for t in threading.enumerate() if t.name == name]
    assert thread.daemon  # a process that never closes it still exits


def test_a_call_from_a_running_loop_fails_at_once_naming_the_async_api() -> None:
    async def inside() -> float:
        started = time.monotonic()
        with pytest.raises(EventLoopRunningError, match=r"`await add\(\.\.\.\)`"):
            call(add, 1, 2)
        return time.monotonic() - started

    assert asyncio.run(inside()) < 0.5
    assert issubclass(EventLoopRunningError, LocalError)
    assert issubclass(EventLoopRunningError, RuntimeError)


def test_a_call_from_the_loop_thread_itself_fails_instead_of_deadlocking() -> None:
    async def reenter() -> None:
        call(add, 1, 2)

    with pytest.raises(EventLoopRunningError):
        call(reenter)


def test_an_interrupted_wait_cancels_the_call_on_the_loop() -> None:
    cancelled = threading.Event()

    future = submit(sleep_until_cancelled, cancelled)
    # A timeout stands in for Ctrl-C here: both leave wait() by an exception.
    with pytest.raises(TimeoutError):
        wait(future, 0.05)
    assert future.cancelled()
    assert cancelled.wait(2)


def test_a_blocking_call_raises_what_the_call_raised() -> None:
    async def refuse(why: str) -> None:
        await asyncio.sleep(0)
        raise ValueError(why)

    with pytest.raises(ValueError, match="no such thing"):
        call(refuse, "no such thing")
    assert call(add, 1, 2) == 3  # the loop goes on


def test_ctrl_c_during_a_blocking_call_cancels_the_call_on_the_loop() -> None:
    cancelled = threading.Event()

    # Ctrl-C as the terminal sends it: SIGINT to the process, handled in the main thread.
    interrupt = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    interrupt.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            call(sleep_until_cancelled, cancelled)
    finally:
        interrupt.cancel()
    assert time.monotonic() - started < 5
    assert cancelled.wait(2)


def test_close_shared_fails_a_blocking_call_in_another_thread() -> None:
    outcome: list[BaseException | None] = []
    waiting = threading.Event()

    async def wait_long() -> None:
        waiting.set()
        await asyncio.sleep(30)

    def caller() -> None:
        try:
            call(wait_long)
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=caller)
    thread.start()
    assert waiting.wait(5)  # the call runs on the loop
    close_shared(timeout=2)
    thread.join(5)
    assert not thread.is_alive()
    [error] = outcome
    assert isinstance(error, PortalClosedError) and "has ended" in str(error)


def test_close_shared_runs_close_callbacks_and_fails_waiting_calls() -> None:
    ran: list[str] = []

    async def close_connection() -> None:
        ran.append("closed")

    async def forgotten() -> None:
        ran.append("unregistered")

    portal = shared_portal()
    on_close(close_connection)
    on_close(forgotten)()  # unregistered at once
    waiting = submit(asyncio.sleep, 30)
    close_shared(timeout=2)
    assert ran == ["closed"]
    with pytest.raises(PortalClosedError, match="has ended"):
        waiting.result(2)
    assert issubclass(PortalClosedError, ClientClosedError)
    # Objects that kept the old portal are refused; new calls start a new loop.
    with pytest.raises(PortalClosedError):
        call(add, 1, 1, portal=portal)
    assert shared_portal() is not portal
    assert call(add, 1, 1) == 2


@pytest.mark.parametrize("blocking", [True, False], ids=["call", "submit"])
def test_a_call_handed_over_as_the_loop_stops_fails_instead_of_hanging(blocking: bool) -> None:
    portal = shared_portal()
    loop = portal_loop(portal)
    holding, handed_over = threading.Event(), threading.Event()

    def stop_after_the_hand_over() -> None:
        # On the loop: the call below is queued behind this callback, then the loop
        # stops before its turn comes (as when the loop ends by itself).
        holding.set()
        handed_over.wait(5)
        loop.stop()

    outcome: list[BaseException] = []

    def caller() -> None:
        try:
            if blocking:
                call(asyncio.sleep, 30, portal=portal)
            else:
                submit(asyncio.sleep, 30, portal=portal).result(10)
        except BaseException as exc:
            outcome.append(exc)

    loop.call_soon_threadsafe(stop_after_the_hand_over)
    assert holding.wait(5)
    thread = threading.Thread(target=caller)
    thread.start()
    waiting = _portal._loops[portal].waiting
    deadline = time.monotonic() + 5
    while not waiting and time.monotonic() < deadline:  # the caller hands its call over
        time.sleep(0.01)
    assert waiting, "the call was never handed over"
    handed_over.set()
    thread.join(5)
    assert not thread.is_alive(), "the call still waits for a loop that ended"
    [error] = outcome
    assert isinstance(error, PortalClosedError)
    with pytest.raises(PortalClosedError):
        call(add, 1, 1, portal=portal)
    assert call(add, 2, 2) == 4  # the next blocking call starts a new loop


def test_a_stuck_close_callback_does_not_hold_close_shared() -> None:
    async def stuck() -> None:
        await asyncio.sleep(30)

    shared_portal()
    on_close(stuck)
    started = time.monotonic()
    close_shared(timeout=0.1)
    assert time.monotonic() - started < 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_starts_its_own_loop() -> None:
    parent = shared_portal()
    parent_thread = call(loop_thread)
    read, write = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns about forking a process with threads: the point here.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        code = 1
        try:
            try:
                call(add, 1, 1, portal=parent)
            except PortalClosedError:
                code = 0 if call(add, 20, 22) == 42 and shared_portal() is not parent else 3
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    try:
        answer = os.read(read, 1)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert answer == b"\x00"
    assert call(loop_thread) == parent_thread  # the parent's loop is untouched
