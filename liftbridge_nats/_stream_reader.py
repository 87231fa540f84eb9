"""One Subscribe stream, read by a worker thread and handed to the event loop.

Why a thread: grpc.aio spends about 40 us of CPU on each streamed message, while a
synchronous call on a channel with the SingleThreadedUnaryStream option reads one in
about 6 us, and its blocking ``next()`` releases the GIL. So each subscription gets one
thread that reads its call, turns every protobuf ``Message`` into the public
:class:`~liftbridge_nats.messages.Message`, and appends it to a deque.

The hand-over costs no system call per message. The thread wakes the event loop only
when the consumer is waiting (the consumer publishes a future, then looks at the deque
once more, so a message appended meanwhile is never missed), and even then not for
every message: waking the loop costs more CPU than reading a message, so a consumer
that keeps up with a fast stream would otherwise be woken for each one. The thread
wakes it at once for a message that came after a pause (a live stream at a modest
rate: no added latency) or after an idle wait, and otherwise once per batch; a timer
on the loop side collects a batch that stops short, within :data:`FLUSH_DELAY`.

The deque is bounded by a message count and by value bytes: when it is full the thread
stops calling ``next()`` until the consumer has drained it to half, and gRPC flow
control holds the server back.

The end of the stream travels through the same deque, after the last message, as a
:class:`StreamEnd`, so messages read before an error are still delivered. The first
message of a Subscribe (the server's empty "subscription established") is not a record:
the thread reports it as :data:`OPENED`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import grpc

from ._proto import api_pb2
from .messages import Message
from .wire import message_from_proto

__all__ = [
    "OPENED",
    "Item",
    "StreamEnd",
    "StreamReader",
]

if TYPE_CHECKING:
    # A synchronous server-streaming Subscribe call: an iterator with cancel().
    SubscribeCall = grpc._CallIterator[api_pb2.Message]

MAX_MESSAGES: Final = 4096
"""Messages buffered per subscription before the reader thread pauses."""
MAX_BYTES: Final = 4 * 1024 * 1024
"""Value bytes buffered per subscription before the reader thread pauses."""
BATCH: Final = 64
"""Messages that arrive back to back are announced to a waiting consumer in batches
of this many."""
LIVE_GAP: Final = 0.0002
"""A message that took longer than this (seconds) to arrive is announced at once."""
FLUSH_DELAY: Final = 0.001
"""The longest a waiting consumer leaves messages of an unfinished batch unread."""


class _Opened:
    __slots__ = ()

    def __repr__(self) -> str:
        return "OPENED"


OPENED: Final = _Opened()
"""The server accepted the subscription (its first, empty message arrived)."""


class StreamEnd:
    """The last item of a stream: why it ended.

    ``cancelled`` is True when :meth:`StreamReader.cancel` ended it (whatever the call
    raised then). Otherwise ``error`` is None when the server closed the stream
    normally, the :class:`grpc.RpcError` the call failed with (``code()``,
    ``details()``), or any other exception the reader thread met (a bug, re-raised on
    the loop side).
    """

    __slots__ = ("cancelled", "error")

    def __init__(self, error: BaseException | None, *, cancelled: bool = False) -> None:
        self.error = error
        self.cancelled = cancelled

    def __repr__(self) -> str:
        return f"StreamEnd({self.error!r}, cancelled={self.cancelled})"


Item = Message | _Opened | StreamEnd


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class StreamReader:
    """Reads one Subscribe call in a thread; the event loop takes items with :meth:`get`.

    ``skip_through`` drops messages at or below that offset (a resubscription after a
    fail-over may replay some; see :mod:`.subscription`). Create it on the event loop,
    call :meth:`start`, and always finish with :meth:`aclose` (or :meth:`cancel` and,
    later, :meth:`wait_finished`).
    """

    def __init__(
        self,
        call: SubscribeCall,
        *,
        skip_through: int | None = None,
        name: str = "liftbridge-subscribe",
        max_messages: int = MAX_MESSAGES,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self._call = call
        self._loop = asyncio.get_running_loop()
        self._skip_through = -1 if skip_through is None else skip_through
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._buffer: deque[Item] = deque()
        # Value bytes put in and taken out, each written by one thread only (so that
        # neither needs a lock); the thread publishes its count before it waits.
        self._produced_bytes = 0
        self._consumed_bytes = 0
        # Re-entrant: cancel() may run from a finalizer (see Subscription) in the middle
        # of this thread's own wait for room.
        self._room = threading.Condition(threading.RLock())
        self._blocked = False  # the thread waits for room (set and cleared under _room)
        self._closing = False
        self._waiter: asyncio.Future[None] | None = None
        # The consumer's last wait ended by its timer with nothing to read: the stream
        # is idle, so the next wait has no timer and wants each message at once (eager).
        self._idle = False
        self._eager = False
        self._finished: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the reader thread."""
        self._thread.start()

    @property
    def finished(self) -> bool:
        """True once the reader thread has ended."""
        return self._finished.done()

    def add_finished_callback(self, callback: Callable[[StreamReader], object]) -> None:
        """Call ``callback(self)`` on the event loop once the thread has ended."""
        self._finished.add_done_callback(lambda _: callback(self))

    # ------------------------------------------------------------------ loop side

    def get(self) -> Item | None:
        """The next item, or None when none is buffered yet (event loop only)."""
        buffer = self._buffer
        if not buffer:
            return None
        item = buffer.popleft()
        if type(item) is Message:
            self._consumed_bytes += len(item.value)
            if self._blocked:
                self._make_room()
        return item

    def _make_room(self) -> None:
        # Resume the thread at half the bounds, so that it pauses once per half-buffer.
        if (
            len(self._buffer) <= self._max_messages // 2
            and self._produced_bytes - self._consumed_bytes <= self._max_bytes // 2
        ):
            with self._room:
                self._room.notify()

    async def wait(self) -> None:
        """Return once items are buffered; cancellable.

        Messages arriving back to back may be left to gather for up to
        :data:`FLUSH_DELAY` first. The stream always ends with a :class:`StreamEnd`
        (after :meth:`cancel` too), so a wait never outlasts the stream.
        """
        if self._buffer:
            return
        waiter = self._loop.create_future()
        idle = self._idle
        self._eager = idle  # before _waiter: the thread reads them in the other order
        self._waiter = waiter
        # Look again: the thread appends first and reads _waiter second, so either it
        # saw this waiter or its message is already in the buffer.
        if self._buffer:
            self._waiter = None
            return
        timer = None if idle else self._loop.call_later(FLUSH_DELAY, _wake, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if self._waiter is waiter:
                self._waiter = None
        self._idle = not self._buffer

    async def next_item(self) -> Item:
        """Wait for the next item and take it."""
        while True:
            item = self.get()
            if item is not None:
                return item
            await self.wait()

    def cancel(self) -> None:
        """Cancel the call and release the thread (any thread; returns at once)."""
        self._closing = True
        self._call.cancel()
        with self._room:
            self._room.notify()

    async def wait_finished(self) -> None:
        """Wait until the reader thread has ended (after :meth:`cancel` or the stream's end)."""
        if self._thread.ident is None:
            return  # never started
        await asyncio.shield(self._finished)
        # The thread's last act was to schedule _finished: it is exiting now.
        self._thread.join()

    async def aclose(self) -> None:
        """Cancel the call and wait for the thread to end (idempotent)."""
        self.cancel()
        await self.wait_finished()

    # ------------------------------------------------------------------ thread side

    def _run(self) -> None:
        end: BaseException | None = None
        try:
            self._read()
        except grpc.RpcError as exc:
            end = exc
        except BaseException as exc:  # the loop side re-raises it
            end = exc
            self._call.cancel()  # the call must not outlive its reader
        try:
            self._put(StreamEnd(end, cancelled=self._closing))
            self._loop.call_soon_threadsafe(self._finished_soon)
        except RuntimeError:
            pass  # the event loop is closed: nobody is left to tell

    def _finished_soon(self) -> None:
        if not self._finished.done():
            self._finished.set_result(None)

    def _read(self) -> None:
        stream = iter(self._call)
        for _handshake in stream:
            self._put(OPENED)
            break
        buffer = self._buffer
        append = buffer.append
        skip_through = self._skip_through
        max_messages = self._max_messages
        max_bytes = self._max_bytes
        convert = message_from_proto
        clock = time.perf_counter
        produced = 0
        asked = clock()
        for pb in stream:
            came = clock()
            if pb.offset > skip_through:
                msg = convert(pb)
                append(msg)
                produced += len(msg.value)
                if self._waiter is not None and (
                    came - asked > LIVE_GAP or len(buffer) >= BATCH or self._eager
                ):
                    self._notify()
                if len(buffer) >= max_messages or produced - self._consumed_bytes >= max_bytes:
                    self._produced_bytes = produced
                    self._wait_for_room()
                if self._closing:
                    return
            asked = clock()

    def _put(self, item: Item) -> None:
        self._buffer.append(item)
        if self._waiter is not None:
            self._notify()

    def _notify(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._loop.call_soon_threadsafe(_wake, waiter)

    def _wait_for_room(self) -> None:
        half_messages = self._max_messages // 2
        half_bytes = self._max_bytes // 2
        with self._room:
            self._blocked = True
            while not self._closing and (
                len(self._buffer) > half_messages
                or self._produced_bytes - self._consumed_bytes > half_bytes
            ):
                self._room.wait()
            self._blocked = False
