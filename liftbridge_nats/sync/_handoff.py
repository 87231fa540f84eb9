"""Items handed from any thread to the event loop in batches, with bounded room.

A thread-safe deque and a flag: the first item put after the loop drained the deque
schedules one drain (``call_soon_threadsafe``); the items put before that drain runs
need no wake-up of their own, so a busy producer pays one cross-thread hop per batch,
not per item. The drain hands each item to ``handle`` without awaiting anything.

Wake-up protocol (the GIL orders each step): the drain clears ``scheduled`` before it
pops, and a producer appends before it reads ``scheduled``. Either the drain sees the
item, or the producer sees ``scheduled`` false and schedules another drain.

Room: an item holds room from :meth:`Handoff.put` until the owner reports it
:meth:`~Handoff.settled` (for a publish: its ack, or its failure), so a producer
blocks, up to its timeout, while ``room`` items are outstanding; it is woken once half
of the room is free. Producers take
tickets from a counter (atomic in CPython); only the loop writes the settled count, so
neither side takes a lock while there is room.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Handoff"]

T = TypeVar("T")

# Items one drain hands over before it lets the loop do its I/O (acks, writes).
_DRAIN_MOST = 1024
# A producer that finds this many items not taken yet waits until the loop took them.
# Without that pause a producer that never blocks would starve the loop: each time the
# loop's thread makes a system call (a socket write, a poll) it lets go of the GIL and
# then waits a whole switch interval (5 ms) to get it back.
_QUEUE_HIGH = 256


class Handoff(Generic[T]):
    """Hands items from threads to ``handle`` on ``loop``, in order.

    ``handle(item)`` takes an item over on the loop; the owner calls :meth:`settled`
    once for it when it is finished. ``fail(item, error)`` finishes an item that will
    not be handled (``handle`` raised, or it was put after :meth:`close`); it may run
    on any thread, and the handoff itself frees that item's room.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        room: int,
        handle: Callable[[T], None],
        fail: Callable[[T, BaseException], None],
        closed_error: Callable[[], BaseException],
    ) -> None:
        self._loop = loop
        self._room = room
        self._handle = handle
        self._fail = fail
        self._closed_error = closed_error
        self._queue: deque[T] = deque()
        self._tickets = itertools.count()
        self._settled = 0  # written on the loop only
        self._scheduled = False
        self._closed = False
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0  # producers blocked for room (changed under _cond)
        self._last_waiter = 0  # the highest ticket blocked for room
        # Blocked producers are woken once half the room is free, not at each ack: a
        # producer that held the GIL again at every free slot would starve the loop
        # (each of its I/O calls hands the GIL over and waits a switch interval for it).
        self._wake_at = max(1, room // 2)
        self._notify_scheduled = False
        self._drain_waiting = 0  # producers waiting for the loop to take the queue

    @property
    def queued(self) -> int:
        """Items put and not handed over yet."""
        return len(self._queue)

    # ------------------------------------------------------------------ any thread

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran: items put now fail."""
        return self._closed

    def put(self, item: T, timeout: float) -> bool:
        """Queue ``item`` (from any thread but the loop's); False when no room freed
        within ``timeout`` seconds, or the handoff closed meanwhile. An interrupt while
        waiting propagates."""
        ticket = next(self._tickets)
        if ticket - self._settled >= self._room and not self._wait_for_room(ticket, timeout):
            return False
        if len(self._queue) >= _QUEUE_HIGH and not self._closed:
            self._wait_for_drain()
        self._queue.append(item)
        if self._closed:
            self._fail_queued()
        elif not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop ended (abandon() runs or ran): fail the item
                self._closed = True
                self._fail_queued()
        return True

    def _wait_for_room(self, ticket: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        try:
            with self._cond:
                self._waiting += 1
                self._last_waiter = max(self._last_waiter, ticket)
                try:
                    while ticket - self._settled >= self._room:
                        left = deadline - time.monotonic()
                        if left <= 0 or self._closed:
                            break
                        self._cond.wait(left)
                    else:
                        return True
                finally:
                    self._waiting -= 1
        except BaseException:
            self._give_back()
            raise
        self._give_back()
        return False

    def _wait_for_drain(self) -> None:
        """Let the loop take what is queued (a drain is scheduled already)."""
        try:
            with self._cond:
                self._drain_waiting += 1
                try:
                    while len(self._queue) >= _QUEUE_HIGH and not self._closed:
                        self._cond.wait(0.1)  # woken by the drain; the timeout is a safety net
                finally:
                    self._drain_waiting -= 1
        except BaseException:
            self._give_back()
            raise

    def _give_back(self) -> None:
        """A ticket taken and never used: its room returns (through the loop)."""
        with contextlib.suppress(RuntimeError):  # the loop ended: room no longer matters
            self._loop.call_soon_threadsafe(self.settled)

    # ------------------------------------------------------------------ the loop's side

    def settled(self) -> None:
        """One item is finished: its room is free again (on the loop)."""
        self._settled += 1
        if (
            self._waiting
            and not self._notify_scheduled
            and self._last_waiter - self._settled < self._wake_at
        ):
            self._notify_scheduled = True
            self._loop.call_soon(self._notify)

    def _notify(self) -> None:
        self._notify_scheduled = False
        with self._cond:
            self._cond.notify_all()

    def _drain(self) -> None:
        self._scheduled = False
        queue, handle = self._queue, self._handle
        for _ in range(_DRAIN_MOST):
            try:
                item = queue.popleft()
            except IndexError:
                break
            try:
                handle(item)
            except Exception as exc:
                self._fail(item, exc)
                self.settled()
        else:
            if queue and not self._scheduled:  # more to do after the loop's I/O
                self._scheduled = True
                self._loop.call_soon(self._drain)
        if self._drain_waiting:
            self._notify()

    def close(self) -> None:
        """Hand over what is queued now, then fail what is put later (on the loop)."""
        while self._queue:
            self._drain()
        self.abandon()

    def abandon(self) -> None:
        """Fail what is queued and what is put later, and wake the producers blocked
        for room (they fail too): from any thread, also once the loop has ended."""
        self._closed = True
        self._fail_queued()
        with self._cond:
            self._cond.notify_all()

    def _fail_queued(self) -> None:
        while True:
            try:
                item = self._queue.popleft()
            except IndexError:
                return
            self._fail(item, self._closed_error())
