"""The in-flight ledger: published messages waiting for their ack, their deadlines, and
the backpressure gate that keeps their number under ``max_inflight``.

Built for the hot path of pipelined publishing:

* one dict maps correlation ids to the futures of the messages in flight; each future
  carries its message's flight, a plain tuple of strings, bytes and numbers (no
  per-message object beyond the future and the tuple). The tuple holds no object that
  could refer back to it, so CPython's garbage collector stops tracking it at its first
  collection: a burst of thousands of messages waiting for their acks leaves the
  collector one object per message to scan again and again (the future), not two;
* deadlines need no per-message timer: flights published with the publisher's default
  timeout enter the dict in deadline order (a dict keeps insertion order), so the dict
  is their deadline queue, and one ``loop.call_at`` timer, armed for the oldest live
  deadline, expires them in batches by walking the dict from its start. Flights with
  their own timeout (or a re-sent attempt's) go to a small heap as well, since they may
  be due before older ones; the walk skips them. An ack removes its message in one dict
  operation, whichever partition it comes from: acks of several partitions interleave,
  and no queue beside the dict has to be cleaned up after them;
* a publish that waits for room (``max_inflight`` reached) has a deadline too, counted
  from its call: the same timer expires it (a burst over capacity queues thousands, and
  a timer each would cost more). Publishes queued with the publisher's default timeout
  are queued in deadline order, so a deque of them is their deadline queue, and each
  leaves it as soon as it is sent; those with their own timeout go to a heap. One
  expired while queued was never sent. A sent publish must not stay referenced until its
  deadline: the caller's future, its ack and the queue entry would outlive the call by
  ``ack_timeout``, and a steady burst over capacity would hold hundreds of thousands of
  them for the garbage collector to scan in every full collection.

With re-sends on, the encoded bytes of an in-flight message stay in its flight, so that
the publisher can send it again unchanged (same correlation id) after a reconnect or a
timeout; without them, a flight keeps its bytes only until they are handed to NATS (its
``DATA`` and ``REPLY`` are then empty). A re-send is a new flight on the same future (the next attempt,
with its own deadline); whatever still holds the old flight can tell it is stale
(``future.flight is not flight``). A settled future (acked, failed or cancelled) lets go
of its flight: callers often keep futures (a list of a whole batch's, gathered at its
end), and the messages' bytes are not theirs to keep.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Mapping, Sized
from typing import Any, Final, Protocol

from ._errors import PublisherClosedError
from ._messages import Ack
from ._tracing import error_type

__all__ = [
    "ATTEMPT",
    "CID",
    "DATA",
    "DEADLINE",
    "FINAL",
    "REPLY",
    "SUBJECT",
    "AckFuture",
    "Flight",
    "InflightLedger",
    "Outcome",
    "PublishCall",
    "QueuedPublish",
    "RelayFuture",
    "RoomWaiter",
    "future_factory",
    "next_attempt",
    "relay_factory",
]


# A flight is a plain tuple of atomic values, the cheapest record Python builds and one
# the garbage collector stops tracking (see the module docstring):
# (correlation id, subject, encoded envelope, loop-time deadline of this attempt, NATS
#  reply subject (b"" for none), loop-time deadline of the whole publish, attempt no. (-1
#  for AckPolicy.NONE: never in the ledger)). Unless re-sends are on, the envelope and the
#  reply subject are b"" once the message is sent.
Flight = tuple[str, str, bytes, float, bytes, float, int]
CID: Final = 0
SUBJECT: Final = 1
DATA: Final = 2
DEADLINE: Final = 3
REPLY: Final = 4
FINAL: Final = 5
ATTEMPT: Final = 6


def next_attempt(flight: Flight, deadline: float) -> Flight:
    """The flight of the message's next attempt: the same message and correlation id,
    waiting for its ack until ``deadline`` (never past the whole publish's deadline)."""
    final = flight[FINAL]
    return (
        flight[CID],
        flight[SUBJECT],
        flight[DATA],
        min(final, deadline),
        flight[REPLY],
        final,
        flight[ATTEMPT] + 1,
    )


class AckFuture(asyncio.Future[Ack | None]):
    """The future of one message's ack, carrying the message's current ``flight`` until
    it is settled (acked, failed or cancelled). Cancelling it forgets the message; failing
    it counts the error's class in ``failed`` (both class attributes of the publisher's
    own subclass, see :func:`future_factory`)."""

    __slots__ = ("flight",)

    flight: Flight
    forget: Callable[[str, AckFuture], None] | None = None
    failed: dict[str, int] | None = None

    def set_exception(self, exception: type | BaseException, /) -> None:
        """Fail the publish; its error's class is counted first (for the metrics), and
        the future lets go of its message, as an acked one does."""
        # Every way a publish fails ends here (ack error, timeout, no responders,
        # close, lost connection), so one count covers them all at no cost to acks.
        failed = self.failed
        if failed is not None:
            name = error_type(exception if isinstance(exception, BaseException) else exception())
            failed[name] = failed.get(name, 0) + 1
        super().set_exception(exception)
        # The error names the subject and correlation id; the encoded bytes would only
        # stay alive with a future the caller keeps (gathered with return_exceptions,
        # say), through an outage that fails thousands.
        with contextlib.suppress(AttributeError):  # failed before it was prepared
            del self.flight

    def refuse(self, exception: BaseException, /) -> None:
        """Fail the publish with an error its caller would have met at once had the
        message not waited for room (a refused argument, a closed publisher or
        connection): not counted as a failed publish, as it is not then, and the future
        lets go of its message as a failed one does."""
        if self.done():
            return
        self._let_go()
        asyncio.Future.set_exception(self, exception)

    def cancel(self, msg: Any = None) -> bool:
        """Cancel the wait for the ack; the message is forgotten (it may be stored)."""
        if self.done():
            return False
        self._let_go()
        return super().cancel(msg)

    def _let_go(self) -> None:
        """Drop the message's flight and take the future out of the ledger (if it is
        there): whatever is in the ledger has its flight."""
        try:
            flight = self.flight
        except AttributeError:
            return  # no message yet (not prepared), or already let go
        del self.flight
        forget = self.forget
        if forget is not None:
            forget(flight[CID], self)


class PublishCall(AckFuture, Coroutine[Any, Any, Ack | None]):
    """The ack future that :meth:`Publisher.publish` returns: also a coroutine.

    When the message went out at once, ``publish`` returns this future as it is, so
    that ``await``, ``asyncio.gather`` and ``asyncio.wait_for`` take it without a task
    or a coroutine frame per message, while ``asyncio.create_task`` (which wants a
    coroutine) still accepts it and drives it as one.
    """

    __slots__ = ("_steps",)

    _steps: Generator[Any, None, Ack | None]

    def send(self, value: None) -> Any:
        """One step of ``await future``."""
        return self._iterate().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """Throw into ``await future``."""
        return self._iterate().throw(typ if val is None else val)

    def _iterate(self) -> Generator[Any, None, Ack | None]:
        try:
            return self._steps
        except AttributeError:
            self._steps = self.__await__()
            return self._steps


class Outcome(Protocol):
    """Where a :class:`RelayFuture` hands its outcome: a thread's future or waiter."""

    def set_result(self, result: Ack | None, /) -> None:
        """The publish was acked (None for ``AckPolicy.NONE``)."""

    def set_exception(self, exception: BaseException, /) -> None:
        """The publish failed."""


class RelayFuture(AckFuture):
    """An ack future that hands its outcome on the moment it is settled: to its
    ``outcome`` (set right after it is made), then ``on_settled`` (a class attribute,
    see :func:`relay_factory`) runs.

    The blocking publisher's thread-side futures are settled this way, straight from
    the ack handler: a done-callback would cost each message a handle, a partial and a
    turn of the loop. Nobody awaits the asyncio future itself, so its exception is read
    here (asyncio logs one never read).
    """

    __slots__ = ("outcome",)

    outcome: Outcome | None
    on_settled: Callable[[], None] = staticmethod(lambda: None)

    def set_result(self, result: Ack | None, /) -> None:
        """Acked: the outcome gets ``result``."""
        super().set_result(result)
        outcome = self.outcome
        if outcome is not None:
            self.outcome = None
            self.on_settled()
            # Not contextlib.suppress: this runs once per message, and a try is free.
            try:  # noqa: SIM105
                outcome.set_result(result)
            except Exception:  # the thread's future was cancelled
                pass

    def set_exception(self, exception: type | BaseException, /) -> None:
        """Failed: the outcome gets the error."""
        super().set_exception(exception)
        self._relay_failure()

    def refuse(self, exception: BaseException, /) -> None:
        """Refused (see :meth:`AckFuture.refuse`): the outcome gets the error."""
        super().refuse(exception)
        self._relay_failure()

    def cancel(self, msg: Any = None) -> bool:
        """Cancelled (the publisher closing): the outcome gets a closed-publisher error."""
        if not super().cancel(msg):
            return False
        self._relay_failure()
        return True

    def abandon(self, error: BaseException) -> None:
        """The loop this future lives on has ended: the outcome gets ``error`` (from
        any thread). The asyncio future itself is left as it is: nothing awaits it."""
        outcome = self.outcome
        if outcome is not None:
            self.outcome = None
            with contextlib.suppress(Exception):  # the thread's future was cancelled
                outcome.set_exception(error)

    def _relay_failure(self) -> None:
        outcome = self.outcome
        if outcome is None or not self.done():
            return
        self.outcome = None
        self.on_settled()
        error = (
            PublisherClosedError("the publish was cancelled before its ack")
            if self.cancelled()
            else self.exception()
        )
        with contextlib.suppress(Exception):  # the thread's future was cancelled
            outcome.set_exception(error or PublisherClosedError("the publish ended unsettled"))


def future_factory(
    loop: asyncio.AbstractEventLoop,
    forget: Callable[[str, AckFuture], None],
    *,
    call: bool,
    failed: dict[str, int] | None = None,
) -> Callable[[], AckFuture]:
    """A maker of ack futures (``call``: of :class:`PublishCall`) on ``loop``, whose
    cancellation calls ``forget`` and whose failures are counted in ``failed`` (by
    ``error.type``, see :func:`~._tracing.error_type`)."""
    base = PublishCall if call else AckFuture
    cls = type(base.__name__, (base,), {"__slots__": (), "forget": forget, "failed": failed})
    return functools.partial(cls, loop=loop)


def relay_factory(
    loop: asyncio.AbstractEventLoop,
    forget: Callable[[str, AckFuture], None],
    on_settled: Callable[[], None],
    failed: dict[str, int] | None = None,
) -> Callable[[Outcome], RelayFuture]:
    """A maker of :class:`RelayFuture` on ``loop`` that hand their outcome to the
    ``Outcome`` given, then call ``on_settled``; otherwise as :func:`future_factory`."""
    cls: type[RelayFuture] = type(
        "RelayFuture",
        (RelayFuture,),
        {
            "__slots__": (),
            "forget": forget,
            "failed": failed,
            "on_settled": staticmethod(on_settled),
        },
    )

    def make(outcome: Outcome) -> RelayFuture:
        future = cls(loop=loop)
        future.outcome = outcome
        return future

    return make


class RoomWaiter(Protocol):
    """What waits in the ledger's queue for room: an asyncio future (a caller awaiting
    :meth:`InflightLedger.wait_for_room`), or a queued publish that sends itself when
    woken (see :meth:`InflightLedger.enqueue`)."""

    def done(self) -> bool:
        """True when it no longer waits (cancelled): it is skipped."""

    def set_result(self, result: None, /) -> None:
        """Room is there now: take it."""

    def set_exception(self, exception: BaseException, /) -> None:
        """The ledger closed: fail."""


class QueuedPublish(RoomWaiter, Protocol):
    """A publish waiting in the ledger's queue (see :meth:`InflightLedger.enqueue`),
    with the deadline of its whole call: ``expire()`` runs when that passes while it
    still waits (``done()`` false), and must settle it."""

    deadline: float

    def expire(self) -> None:
        """Its deadline passed before room freed: it was never sent."""


# Where a custom deadline stands in the heap: (deadline, correlation id).
_Mark = tuple[float, str]
# A queued publish's deadline: (deadline, arrival number, the publish). The number keeps
# equal deadlines from comparing publishes, and pops them in call order.
_QueueMark = tuple[float, int, QueuedPublish]

# Timer resolution: a deadline may fire up to this late; in exchange a steady stream of
# expiring messages costs one timer callback per tick, not one per message.
_TICK = 0.005


def _deadline_of(future: AckFuture) -> float:
    return future.flight[DEADLINE]


def _queued_deadline(waiter: QueuedPublish) -> float:
    return waiter.deadline


class InflightLedger:
    """Correlation id -> the future of the message in flight (its ``flight`` carries the
    rest), with deadlines and a bounded capacity.

    ``on_expired(future)`` is called for every message whose attempt's deadline passed
    without an ack (it has already left the ledger); it must settle the future or enter
    the next attempt. It is an attribute, so that the policy that decides (the
    publisher's sender, built with the ledger) can take it over once built.
    """

    __slots__ = (
        "_after_tasks",
        "_arrivals",
        "_capacity",
        "_closed",
        "_entries",
        "_heap",
        "_loop",
        "_low_water",
        "_queue_marks",
        "_queue_order",
        "_timer",
        "_timer_at",
        "_unordered",
        "_waiters",
        "on_expired",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        max_inflight: int,
        on_expired: Callable[[AckFuture], None],
    ) -> None:
        self._loop = loop
        self._capacity = max_inflight
        # Waiters are woken once the ledger drained to this level, not at every free
        # slot: a full pipeline then refills in bursts, one wake-up per many acks.
        self._low_water = max_inflight - max(1, max_inflight // 4)
        self.on_expired = on_expired
        # In insertion order, which is deadline order for the flights not in the heap.
        self._entries: dict[str, AckFuture] = {}
        # The correlation ids of the flights whose deadlines are in the heap.
        self._unordered: set[str] = set()
        self._heap: list[_Mark] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._waiters: deque[RoomWaiter] = deque()
        # The queued publishes with the default timeout, in call order, which is their
        # deadline order; the others' deadlines in a heap. Publishes that no longer wait
        # (sent, cancelled) leave both when room is made or the timer runs.
        self._queue_order: deque[QueuedPublish] = deque()
        self._queue_marks: list[_QueueMark] = []
        self._arrivals = itertools.count()
        # Set while woken tasks have yet to run: nobody queued behind them goes first.
        self._after_tasks: asyncio.Handle | None = None
        self._closed = False

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, correlation_id: object) -> bool:
        return correlation_id in self._entries

    def outstanding(self) -> list[AckFuture]:
        """The futures of the flights waiting for their ack, in no set order."""
        return list(self._entries.values())

    @property
    def capacity(self) -> int:
        """The most flights the ledger holds before :meth:`wait_for_room` blocks."""
        return self._capacity

    @property
    def full(self) -> bool:
        """True when a new flight must wait for room."""
        return len(self._entries) >= self._capacity

    def live_views(self) -> tuple[Mapping[str, AckFuture], Sized]:
        """The futures in flight by correlation id and the callers waiting for room, as
        live objects (never replaced): a hot path can test ``must_wait`` without a call."""
        return self._entries, self._waiters

    def must_wait(self) -> bool:
        """True when a new flight must wait for room (full, or others wait already)."""
        return len(self._entries) >= self._capacity or bool(self._waiters)

    @property
    def has_waiters(self) -> bool:
        """True while callers wait for room."""
        return bool(self._waiters)

    def get(self, correlation_id: str) -> AckFuture | None:
        """The future of ``correlation_id``'s message, if it is in the ledger."""
        return self._entries.get(correlation_id)

    def queued(self) -> list[RoomWaiter]:
        """A snapshot of what waits for room (tasks and queued publishes)."""
        return list(self._waiters)

    def futures(self) -> list[AckFuture]:
        """A snapshot of the futures in the ledger."""
        return list(self._entries.values())

    # ------------------------------------------------------------------ hot path

    def add(self, future: AckFuture, ordered: bool = True) -> None:
        """Record ``future`` under its flight's correlation id (not in the ledger now),
        until its flight's deadline. ``ordered`` says that deadline is not earlier than
        any deadline added before with ``ordered`` (true for the publisher's default
        timeout).
        """
        flight = future.flight
        cid = flight[CID]
        deadline = flight[DEADLINE]
        self._entries[cid] = future
        if not ordered:
            self._unordered.add(cid)
            heapq.heappush(self._heap, (deadline, cid))
        if self._timer is None or deadline < self._timer_at:
            self._arm()

    def settle(self, correlation_id: str) -> AckFuture | None:
        """Remove and return the future of an ack's correlation id (None if unknown)."""
        future = self._entries.pop(correlation_id, None)
        if future is None:
            return None
        if self._unordered:
            self._unordered.discard(correlation_id)
        if self._waiters and len(self._entries) <= self._low_water:
            self._wake_all_that_fit()
        return future

    def discard(self, correlation_id: str, future: AckFuture | None = None) -> None:
        """Forget a message (cancelled, or never sent); ``future`` guards against a
        correlation id that was re-used since."""
        current = self._entries.get(correlation_id)
        if current is not None and (future is None or current is future):
            del self._entries[correlation_id]
            self._unordered.discard(correlation_id)
            if self._waiters:
                self._wake_all_that_fit()

    # ------------------------------------------------------------------ backpressure

    async def wait_for_room(self) -> None:
        """Wait until the ledger holds fewer than ``max_inflight`` flights.

        Raises :class:`PublisherClosedError` when the ledger is closed meanwhile.
        Waiters are served first come, first served.
        """
        if self._waiters and len(self._entries) < self._capacity:
            # Room, yet waiters: cancelled queued publishes nothing else would clear.
            self._wake_all_that_fit()
        while len(self._entries) >= self._capacity or self._waiters:
            if self._closed:
                raise PublisherClosedError("the publisher closed while waiting for room")
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                # Pass a wake-up we received (and cannot use) on to the next waiter.
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self._wake_all_that_fit()
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            if len(self._entries) < self._capacity:
                return
        if self._closed:
            raise PublisherClosedError("the publisher is closed")

    def enqueue(self, waiter: QueuedPublish, ordered: bool = False) -> None:
        """Queue ``waiter`` behind the others; its ``set_result`` runs synchronously
        once room frees (at once, when there is room now and nobody is ahead of it),
        or its ``expire`` once its ``deadline`` passes first. ``ordered`` says its
        deadline is not earlier than that of any publish queued before with
        ``ordered`` (true for the publisher's default timeout).

        This is how a publish over capacity waits without a task or a coroutine of its
        own: it costs one queue entry and one deadline entry instead of a task and its
        frames, which matters when thousands of publishes are started at once. A
        cancelled waiter (``done()``) is skipped when its turn comes.
        """
        if self._closed:
            waiter.set_exception(PublisherClosedError("the publisher is closed"))
            return
        self._waiters.append(waiter)
        if len(self._entries) < self._capacity:
            # Room, and perhaps cancelled waiters ahead that nothing else would clear.
            self._wake_all_that_fit()
            if waiter.done():
                return  # sent already: no deadline to watch
        deadline = waiter.deadline
        if ordered:
            self._queue_order.append(waiter)
        else:
            heapq.heappush(self._queue_marks, (deadline, next(self._arrivals), waiter))
        if self._timer is None or deadline < self._timer_at:
            self._arm()

    def _wake_all_that_fit(self) -> None:
        """Wake waiters, first come first served, as far as there is room."""
        if self._after_tasks is not None:
            return  # tasks woken before go first; _after_woken goes on after them
        waiters = self._waiters
        entries = self._entries
        woken = 0
        while waiters and len(entries) + woken < self._capacity:
            waiter = waiters[0]
            is_task = isinstance(waiter, asyncio.Future)
            if woken and not is_task:
                # A queued publish sends itself at once, a woken task only when it runs:
                # the publishes behind the tasks must wait for them to keep the order.
                break
            waiters.popleft()
            if waiter.done():
                continue  # cancelled
            waiter.set_result(None)  # a queued publish enters the ledger here
            if is_task:
                woken += 1
        self._drop_sent()
        if woken:
            self._after_tasks = self._loop.call_soon(self._after_woken)

    def _drop_sent(self) -> None:
        """Let go of the queued publishes that no longer wait, at the head of the
        deadline queues (the ones sent in call order are all there)."""
        order = self._queue_order
        while order and order[0].done():
            order.popleft()
        marks = self._queue_marks
        while marks and marks[0][2].done():
            heapq.heappop(marks)

    def _after_woken(self) -> None:
        # The tasks woken last time have run (their wake-ups were scheduled first).
        self._after_tasks = None
        if self._waiters and not self._closed:
            self._wake_all_that_fit()

    # ------------------------------------------------------------------ deadlines

    def _arm(self) -> None:
        when = self._next_deadline()
        if when is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            return
        when = max(when, self._loop.time() + _TICK)
        if self._timer is not None:
            if self._timer_at <= when:
                return
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._on_timer)

    def _next_deadline(self) -> float | None:
        when = None
        unordered = self._unordered
        if len(unordered) < len(self._entries):
            # The oldest flight not in the heap: the first one of the dict's order.
            for cid, future in self._entries.items():
                if cid not in unordered:
                    when = future.flight[DEADLINE]
                    break
        heap = self._heap
        # Drop settled and re-sent flights' marks so the timer aims at a live deadline.
        while heap and not self._is_live(*heap[0]):
            heapq.heappop(heap)
        if heap and (when is None or heap[0][0] < when):
            when = heap[0][0]
        self._drop_sent()
        marks = self._queue_marks
        if marks and (when is None or marks[0][0] < when):
            when = marks[0][0]
        order = self._queue_order
        if order and (when is None or order[0].deadline < when):
            when = order[0].deadline
        return when

    def _on_timer(self) -> None:
        self._timer = None
        now = self._loop.time()
        entries = self._entries
        unordered = self._unordered
        expired: list[AckFuture] = []
        if len(unordered) < len(entries):
            for cid, future in entries.items():
                if cid in unordered:
                    continue
                if future.flight[DEADLINE] > now:
                    break
                expired.append(future)
            for due in expired:
                del entries[due.flight[CID]]
        heap = self._heap
        ordered = len(expired)
        while heap and heap[0][0] <= now:
            deadline, cid = heapq.heappop(heap)
            marked = entries.get(cid)
            if marked is not None and marked.flight[DEADLINE] == deadline:
                del entries[cid]
                unordered.discard(cid)
                expired.append(marked)
        if 0 < ordered < len(expired):
            # A late timer found both kinds due: they go in deadline order all the same.
            expired.sort(key=_deadline_of)
        marks, order = self._queue_marks, self._queue_order
        if (marks and marks[0][0] <= now) or (order and order[0].deadline <= now):
            # Before anything is woken below: a publish past its deadline is not sent.
            self._expire_queued(now)
        for due in expired:
            self.on_expired(due)
        if self._waiters:
            self._wake_all_that_fit()
        self._arm()

    def _expire_queued(self, now: float) -> None:
        due: list[QueuedPublish] = []
        order = self._queue_order
        while order and order[0].deadline <= now:
            due.append(order.popleft())
        ordered = len(due)
        marks = self._queue_marks
        while marks and marks[0][0] <= now:
            due.append(heapq.heappop(marks)[2])
        if 0 < ordered < len(due):
            # Both kinds due: they fail in deadline order all the same (a stable sort
            # keeps call order among equal deadlines).
            due.sort(key=_queued_deadline)
        for waiter in due:
            if not waiter.done():
                waiter.expire()
        # Let go of the expired (and cancelled) publishes at the head of the queue now,
        # rather than when room frees: they hold their messages.
        waiters = self._waiters
        while waiters and waiters[0].done():
            waiters.popleft()

    def _is_live(self, deadline: float, correlation_id: str) -> bool:
        # A correlation id sent again (a retry) is entered anew with its new deadline.
        future = self._entries.get(correlation_id)
        return future is not None and future.flight[DEADLINE] == deadline

    # ------------------------------------------------------------------ shutdown

    def reject_waiters(self) -> None:
        """Refuse new waiters and wake the waiting ones (they raise PublisherClosedError)."""
        self._closed = True
        self._queue_marks.clear()
        self._queue_order.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(
                    PublisherClosedError("the publisher closed while waiting for room")
                )

    def close(self) -> None:
        """Reject waiters and stop the timer (flights left in the ledger stay there)."""
        self.reject_waiters()
        if self._after_tasks is not None:
            self._after_tasks.cancel()
            self._after_tasks = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def drain(self) -> list[AckFuture]:
        """Remove and return every future (used by close to fail what is left)."""
        futures = list(self._entries.values())
        self._entries.clear()
        self._unordered.clear()
        self._heap.clear()
        return futures

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<InflightLedger {len(self._entries)}/{self._capacity} in flight>"
