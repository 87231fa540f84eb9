"""One background event loop per process, shared by every blocking object.

The blocking API (``liftbridge_nats.sync``, the Spark workers) runs the async SDK on one
asyncio loop in a daemon thread, which serves anyio's :class:`BlockingPortal` (for
whoever wants the portal itself; close callbacks run through it). The loop is asyncio
because nats-py is asyncio-only. :func:`call` and :func:`submit` reach it in one hop:
the portal's ``start_task_soon`` takes two, as it waits for the task to be spawned
before it waits for the result. :func:`call` blocks on a plain lock that the task's
done-callback releases (see :class:`_BlockingCall`), :func:`submit` returns a
:class:`concurrent.futures.Future` (``asyncio.run_coroutine_threadsafe``). The loop
starts on first use, is shared by all objects and threads of the process, and ends at
:func:`close_shared` (registered with :mod:`atexit`). A process forked from one that had
a loop starts its own: the parent's loop thread does not exist in the child, so its
portal is never reused there.

API (stable; others build on it):

``shared_portal()``
    The process's portal, started if needed.
``portal_loop(portal)``
    The asyncio loop a portal runs, for ``call_soon_threadsafe`` on hot paths.
``call(async_fn, *args, portal=None, async_api=None)``
    Run ``async_fn(*args)`` on the loop and block until done. Raises
    :class:`EventLoopRunningError` at once in a thread that runs an event loop, and
    :class:`PortalClosedError` if the loop is (or gets) shut down.
``submit(async_fn, *args, portal=None)``
    Same, returning a :class:`concurrent.futures.Future` instead of blocking.
``wait(future, timeout=None)``
    Block on a future; an interrupt (Ctrl-C) cancels it and propagates.
``check_blocking_allowed(api, async_api)``
    The in-loop check alone.
``on_close(async_callback, portal=None)``
    Run ``await async_callback()`` on the loop when it shuts down (cached connections);
    returns a function that unregisters it.
``on_loop_end(callback, portal=None)``
    Call ``callback()`` on the loop's thread once the loop has ended, however it ended
    (for threads that wait on results only the loop would set); returns a function
    that unregisters it.
``close_shared(timeout=5.0)``
    Run the close callbacks (bounded by ``timeout``), cancel what still runs, stop the
    loop. Calls still waiting fail with :class:`PortalClosedError`.

Whenever the loop's thread ends, every :func:`call` and :func:`submit` still waiting
fails with :class:`PortalClosedError`, including one handed over as the loop stopped,
which the loop never ran.
"""

from __future__ import annotations

import _thread
import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import inspect
import itertools
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, TypeVarTuple, Unpack

import anyio
from anyio.from_thread import BlockingPortal

from ._errors import EventLoopRunningError, PortalClosedError

__all__ = [
    "EventLoopRunningError",
    "PortalClosedError",
    "call",
    "check_blocking_allowed",
    "close_shared",
    "on_close",
    "on_loop_end",
    "portal_closed_error",
    "portal_loop",
    "shared_portal",
    "submit",
]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_log = logging.getLogger("liftbridge_nats.sync")

THREAD_NAME = "liftbridge-nats-loop"


class _Waiting(Protocol):
    """A call some thread waits for; failed if the loop ends before settling it."""

    def abandon(self) -> None: ...


@dataclass(eq=False)
class _Loop:
    """A started portal and what belongs to it."""

    pid: int
    portal: BlockingPortal
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    # Calls handed to the loop and not settled yet; failed when the loop's thread ends.
    waiting: set[_Waiting] = field(default_factory=set)
    closers: dict[int, Callable[[], Awaitable[None]]] = field(default_factory=dict)
    closed: bool = False

    def watch(self, call: _Waiting) -> None:
        """Track ``call`` until :meth:`unwatch` (also when this raises
        PortalClosedError: the loop ended)."""
        self.waiting.add(call)
        # After the add: the thread's end marks the loop closed before it takes the
        # set over, so either it sees this call or this check sees the mark.
        if self.closed:
            raise portal_closed_error()

    def unwatch(self, call: _Waiting) -> None:
        self.waiting.discard(call)

    def ended(self) -> None:
        """The loop's thread ends (on that thread): what still waits fails, and the
        next blocking call starts a new loop."""
        global _current
        with _lock:
            self.closed = True
            if _current is self:
                _current = None
        for call in list(self.waiting):
            try:
                call.abandon()
            except Exception:  # the others must still be failed
                _log.exception("failing a call left waiting by the ended loop")
        self.waiting.clear()


_lock = threading.Lock()
_current: _Loop | None = None
_exiting = False
_tokens = itertools.count()
# Every portal started in this process (not the parent's, after a fork), to refuse the
# stale ones objects may still hold.
_loops: weakref.WeakKeyDictionary[BlockingPortal, _Loop] = weakref.WeakKeyDictionary()


def shared_portal() -> BlockingPortal:
    """The process's portal, started in a daemon thread on first use.

    Raises :class:`PortalClosedError` while the interpreter exits.
    """
    return _shared().portal


def portal_loop(portal: BlockingPortal | None = None) -> asyncio.AbstractEventLoop:
    """The asyncio loop ``portal`` (default: the shared one) runs."""
    return _loop_of(portal).loop


def check_blocking_allowed(api: str, async_api: str) -> None:
    """Raise :class:`EventLoopRunningError` if this thread runs an event loop.

    ``api`` names the blocking call, ``async_api`` the async call to await instead
    (or, when it holds a space or a backquote, the whole advice: "`async for ...`").
    """
    # asyncio's own test for a running loop, without the exception get_running_loop()
    # raises when there is none: this runs on every blocking call.
    if asyncio._get_running_loop() is None:
        return
    advice = async_api if (" " in async_api or "`" in async_api) else f"`await {async_api}(...)`"
    raise EventLoopRunningError(
        f"{api} would block this thread, which runs an event loop: use {advice} "
        "there instead, or make the blocking call from a worker thread "
        "(`await asyncio.to_thread(...)`)"
    )


def call(
    async_fn: Callable[[Unpack[Ts]], Awaitable[T]],
    *args: *Ts,
    portal: BlockingPortal | None = None,
    async_api: str | None = None,
) -> T:
    """Run ``await async_fn(*args)`` on the loop of ``portal`` (default: the shared one)
    and return its result, blocking this thread.

    ``async_api`` names the async call for the error raised inside a running loop
    (default: ``async_fn``'s qualified name). An interrupt (Ctrl-C) while waiting
    cancels the call on the loop and propagates.
    """
    api = async_api or _name_of(async_fn)
    check_blocking_allowed(f"the blocking {api.rsplit('.', 1)[-1]}()", api)
    owner = _open_loop_of(portal)
    blocking = _BlockingCall(_awaited(async_fn, *args))
    try:
        owner.watch(blocking)
        owner.loop.call_soon_threadsafe(blocking.start)
    except (RuntimeError, PortalClosedError) as exc:  # the loop is closed
        owner.unwatch(blocking)
        blocking.coro.close()
        raise portal_closed_error() from exc
    try:
        return blocking.wait(owner.loop)
    finally:
        owner.unwatch(blocking)


class _BlockingCall(Generic[T]):
    """One :func:`call` in flight: a task started on the loop by one callback, and a
    lock the caller blocks on, released by the task's done-callback.

    Releasing the lock is the last thing the loop does for the call, and nothing else
    is chained to it: a caller woken while the loop's thread still runs Python code
    must wait for the GIL and be woken a second time, which costs more than the call
    itself where waking a thread on another core is slow.
    """

    __slots__ = ("_lock", "_released", "_task", "coro")

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self.coro = coro
        self._task: asyncio.Task[T] | None = None
        self._released = False  # on the loop's thread only
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def start(self) -> None:
        """Start the task (on the loop)."""
        self._task = task = asyncio.ensure_future(self.coro)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[T]) -> None:
        if not task.cancelled():
            task.exception()  # retrieved, also when the caller was interrupted
        self._release()

    def abandon(self) -> None:
        """The loop's thread ends with this call unsettled (on that thread)."""
        _close_unstarted(self.coro)
        self._release()

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self._lock.release()

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def wait(self, loop: asyncio.AbstractEventLoop) -> T:
        """Block until the task is done; its result, or its error. An interrupt
        (Ctrl-C) cancels the task on the loop and propagates."""
        try:
            self._lock.acquire()
        except BaseException:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs
                loop.call_soon_threadsafe(self._cancel)
            raise
        task = self._task
        if task is None or not task.done() or task.cancelled():  # the loop shut down
            raise portal_closed_error()
        exc = task.exception()
        if exc is not None:
            raise exc
        return task.result()


def submit(
    async_fn: Callable[[Unpack[Ts]], Awaitable[T]],
    *args: *Ts,
    portal: BlockingPortal | None = None,
) -> concurrent.futures.Future[T]:
    """Start ``async_fn(*args)`` on the loop of ``portal`` (default: the shared one).

    The future fails with :class:`PortalClosedError` if the loop shuts down first;
    cancelling it cancels the call.
    """
    owner = _open_loop_of(portal)
    # async_fn itself is called on the loop too: it may create futures or tasks there.
    coro = _awaited(async_fn, *args)
    # The loop cancels what still runs when it stops; callers get the typed error.
    outer: concurrent.futures.Future[T] = concurrent.futures.Future()
    watched = _Submitted(coro, outer)
    try:
        owner.watch(watched)
        # One hop to the loop (the portal's own start_task_soon takes two: it waits for
        # the task to be spawned, then for its result).
        inner = asyncio.run_coroutine_threadsafe(coro, owner.loop)
    except (RuntimeError, PortalClosedError) as exc:  # the loop is closed
        owner.unwatch(watched)
        coro.close()
        raise portal_closed_error() from exc
    outer.add_done_callback(lambda _: owner.unwatch(watched))

    def settle(done: concurrent.futures.Future[T]) -> None:
        if not outer.set_running_or_notify_cancel():
            return
        if done.cancelled():
            outer.set_exception(portal_closed_error())
        elif (exc := done.exception()) is not None:
            outer.set_exception(exc)
        else:
            outer.set_result(done.result())

    def propagate_cancel(done: concurrent.futures.Future[T]) -> None:
        if done.cancelled():
            inner.cancel()

    inner.add_done_callback(settle)
    outer.add_done_callback(propagate_cancel)
    return outer


class _Submitted(Generic[T]):
    """The future :func:`submit` returned, failed if the loop ends first."""

    __slots__ = ("coro", "future")

    def __init__(self, coro: Coroutine[Any, Any, T], future: concurrent.futures.Future[T]) -> None:
        self.coro = coro
        self.future = future

    def abandon(self) -> None:
        _close_unstarted(self.coro)
        with contextlib.suppress(concurrent.futures.InvalidStateError):  # settled meanwhile
            if self.future.set_running_or_notify_cancel():
                self.future.set_exception(portal_closed_error())


def _close_unstarted(coro: Coroutine[Any, Any, Any]) -> None:
    """Close a call's coroutine that the loop never started: no "never awaited"
    warning when it is collected."""
    if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
        coro.close()


async def _awaited(async_fn: Callable[[Unpack[Ts]], Awaitable[T]], *args: *Ts) -> T:
    return await async_fn(*args)


def wait(future: concurrent.futures.Future[T], timeout: float | None = None) -> T:
    """Block on ``future``; an interrupt (Ctrl-C) cancels it and propagates."""
    try:
        return future.result(timeout)
    except BaseException:
        future.cancel()
        raise


def on_close(
    async_callback: Callable[[], Awaitable[None]], portal: BlockingPortal | None = None
) -> Callable[[], None]:
    """Await ``async_callback()`` on the loop when it shuts down.

    For resources that live on the loop (connections cached per process). Returns a
    function that unregisters the callback (call it when the resource is closed
    earlier). Callbacks run concurrently, bounded by :func:`close_shared`'s timeout;
    their errors are logged.
    """
    owner = _loop_of(portal)
    token = next(_tokens)
    with _lock:
        if owner.closed:
            raise portal_closed_error()
        owner.closers[token] = async_callback

    def unregister() -> None:
        with _lock:
            owner.closers.pop(token, None)

    return unregister


def on_loop_end(
    callback: Callable[[], None], portal: BlockingPortal | None = None
) -> Callable[[], None]:
    """Call ``callback()`` once the loop of ``portal`` (default: the shared one) has
    ended, on its thread, after the loop stopped: also when it ended abruptly, without
    running its close callbacks (:func:`on_close`).

    For objects whose callers block on results only the loop would set: the callback
    fails them. Returns a function that unregisters it; raises
    :class:`PortalClosedError` if the loop has ended already.
    """
    owner = _open_loop_of(portal)
    hook = _EndHook(callback)
    try:
        owner.watch(hook)
    except PortalClosedError:
        owner.unwatch(hook)
        raise
    return functools.partial(owner.unwatch, hook)


class _EndHook:
    """An :func:`on_loop_end` callback, watched as a waiting call is."""

    __slots__ = ("abandon",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self.abandon = callback


def close_shared(timeout: float = 5.0) -> None:
    """Shut the shared loop down: close callbacks, then cancel what still runs.

    Waits at most about ``timeout`` seconds in all; a loop that does not stop in time
    is left to die with the process (its thread is a daemon). The next blocking call
    starts a new loop, except during interpreter exit.
    """
    global _current
    with _lock:
        owner, _current = _current, None
        if owner is None or owner.pid != os.getpid():
            return
        owner.closed = True
        closers = list(owner.closers.values())
        owner.closers.clear()
    if threading.current_thread() is owner.thread:
        raise EventLoopRunningError("close_shared() cannot be called from the loop it stops")
    try:
        owner.portal.start_task_soon(_run_closers, closers, timeout).result(timeout + 0.5)
    except BaseException as exc:  # a stuck callback must not keep the process alive
        if not isinstance(exc, Exception):
            raise
        _log.warning("closing resources on the loop failed: %r", exc)
    try:
        owner.portal.start_task_soon(owner.portal.stop, True).result(1.0)
    except Exception as exc:
        _log.debug("stopping the portal: %r", exc)
    owner.thread.join(timeout)
    if owner.thread.is_alive():
        _log.warning("the liftbridge-nats loop did not stop within %.1f s", timeout)


# ------------------------------------------------------------------ internals


def _shared() -> _Loop:
    global _current
    with _lock:
        if _exiting:
            raise PortalClosedError("the interpreter is exiting: liftbridge-nats's loop is closed")
        if _current is None or _current.pid != os.getpid():
            _current = _start()
        return _current


def _loop_of(portal: BlockingPortal | None) -> _Loop:
    if portal is None:
        return _shared()
    owner = _loops.get(portal)
    if owner is None or owner.pid != os.getpid():
        raise PortalClosedError(
            "this object was created in another process (before a fork) and cannot be "
            "used here: create a new one in this process"
        )
    return owner


def _open_loop_of(portal: BlockingPortal | None) -> _Loop:
    """:func:`_loop_of`, refusing a loop that is shut down."""
    owner = _loop_of(portal)
    if owner.closed:
        raise portal_closed_error()
    return owner


def _start() -> _Loop:
    ready: concurrent.futures.Future[tuple[BlockingPortal, asyncio.AbstractEventLoop]]
    ready = concurrent.futures.Future()

    async def serve() -> None:
        async with BlockingPortal() as portal:
            ready.set_result((portal, asyncio.get_running_loop()))
            await portal.sleep_until_stopped()

    created: concurrent.futures.Future[_Loop] = concurrent.futures.Future()

    def run() -> None:
        try:
            anyio.run(serve, backend="asyncio")
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                _log.warning("the liftbridge-nats loop ended with %r", exc)
        if ready.exception() is None:
            created.result().ended()

    # A daemon thread: a process that never calls close_shared() still exits.
    thread = threading.Thread(target=run, name=THREAD_NAME, daemon=True)
    thread.start()
    portal, loop = ready.result()
    started = _Loop(os.getpid(), portal, loop, thread)
    _loops[portal] = started
    created.set_result(started)
    return started


async def _run_closers(closers: list[Callable[[], Awaitable[None]]], timeout: float) -> None:
    async def run_one(closer: Callable[[], Awaitable[None]]) -> None:
        try:
            await closer()
        except Exception as exc:
            _log.warning("closing %r on shutdown failed: %r", closer, exc)

    with anyio.move_on_after(timeout):
        async with anyio.create_task_group() as group:
            for closer in closers:
                group.start_soon(run_one, closer)


def portal_closed_error() -> PortalClosedError:
    """The error of a call that the ended loop never settled."""
    return PortalClosedError(
        "liftbridge-nats's background loop has ended (close_shared(), interpreter exit, "
        "or an error on the loop, logged as a warning): the call did not complete; "
        "create new objects to go on"
    )


def _name_of(fn: Callable[..., object]) -> str:
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "the async API")
    if owner is not None:
        return f"{type(owner).__name__}.{name}"
    return getattr(fn, "__qualname__", name)


def _at_exit() -> None:
    global _exiting
    with _lock:
        _exiting = True
    close_shared()


def _after_fork_in_child() -> None:
    # The parent's loop thread does not exist here, and the lock may have been held by
    # a thread that does not exist either.
    global _lock, _current, _exiting
    _lock = threading.Lock()
    _current = None
    _exiting = False


atexit.register(_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)
