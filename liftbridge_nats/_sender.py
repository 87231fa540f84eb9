"""The publisher's sender: the one background task, for messages that cannot go at once,
and the retry policy.

Most messages go straight from the caller to the transport (nats-py's outgoing buffer
on the fast path). The others wait here, in order, in a bounded outbox: messages
published while NATS is disconnected (nats-py's own reconnect buffer is small and fails
when full), and messages sent again
(``retry=True``, or after a no-responders report). The sender task sends them when the
connection is up, skipping those that expired or were settled meanwhile. Everything a
message needs to be sent again is in its flight (the encoded bytes, subject, reply
subject), so a re-send is the same message with the same correlation id. The outbox
keeps each message's future beside the flight it was queued with: when a newer attempt
replaced that flight (a retry), the queued one is stale and skipped.

The sender also owns the retry policy, as aiokafka's sender decides what a failed
produce request becomes: what happens when a message's ack does not come by its
attempt's deadline (the ledger's ``on_expired``: with ``retry`` the same bytes go again,
else :class:`~liftbridge_nats.AckTimeoutError`) and when NATS reports that nobody
received it (the ack listener's ``on_no_responders``: with ``retry`` a re-send after a
back-off of 25 ms doubling to 500 ms, else :class:`~liftbridge_nats.NoRespondersError`;
either way the stream routes may resume a paused partition in the background).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable

from ._acks import no_responders_exception
from ._errors import AckTimeoutError, LiftbridgeError, NotConnectedError, PublisherClosedError
from ._inflight import (
    ATTEMPT,
    CID,
    DATA,
    FINAL,
    REPLY,
    SUBJECT,
    AckFuture,
    Flight,
    InflightLedger,
    next_attempt,
)
from ._log import RateLimitedLog, get_logger
from ._transport import PublishTransport

__all__ = ["Outgoing", "Sender"]

_log = get_logger("publisher")

# While NATS is disconnected the sender polls for the reconnect (nats-py's reconnected
# callback belongs to the application that created the client).
_RECONNECT_POLL = 0.02
# Resend back-off after a no-responders report (retry=True): 25 ms doubling to 500 ms.
BACKOFF_FIRST = 0.025
BACKOFF_MAX = 0.5
# Re-sends are logged at most once per this many seconds (a fail-over re-sends in bulk).
_RESEND_LOG_INTERVAL = 10.0

# A message in the outbox: its future, and the flight (attempt) it was queued with.
Outgoing = tuple[AckFuture, Flight]


class Sender:
    """Owns the outbox and the task that drains it into NATS, and the retry policy.

    ``outbox`` is public so that the publisher's hot path can check cheaply whether
    older messages wait (new ones must then queue behind them, to keep the order).
    Built, the sender takes over ``ledger.on_expired``; hand :meth:`on_no_responders`
    to the ack listener. ``retry``: send again after an ack timeout or a no-responders
    report (until the message's deadline); ``ack_timeout``: each attempt's wait for its
    ack; ``is_open``: whether the publisher still publishes (no re-send once it closes);
    ``nobody_listened(subject, within)``: told of every no-responders report while
    open (the stream routes resume a paused partition within that many seconds).
    """

    def __init__(
        self,
        transport: PublishTransport,
        ledger: InflightLedger,
        loop: asyncio.AbstractEventLoop,
        *,
        max_buffered_bytes: int,
        is_open: Callable[[], bool],
        ack_timeout: float,
        retry: bool = False,
        nobody_listened: Callable[[str, float], None] | None = None,
    ) -> None:
        self._transport = transport
        self._ledger = ledger
        self._loop = loop
        self._max_bytes = max_buffered_bytes
        self._is_open = is_open
        self._ack_timeout = ack_timeout
        self._retry = retry
        self._nobody_listened = nobody_listened
        ledger.on_expired = self.on_expired
        # Re-sends waiting for their back-off (retry after a no-responders report).
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._resend_log = RateLimitedLog(_log, logging.WARNING, _RESEND_LOG_INTERVAL)
        self.timed_out = 0
        self.outbox: deque[Outgoing] = deque()
        self._bytes = 0
        self._wakeup = asyncio.Event()
        self._room = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.resent = 0
        # Loop time at which the sender found NATS disconnected (None while connected).
        self._outage: float | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the sender task."""
        if self._task is None:
            self._task = self._loop.create_task(self._run(), name="liftbridge-publisher-sender")

    def stop_retries(self) -> None:
        """Cancel the re-sends waiting for their back-off (the publisher is closing)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    async def stop(self, make_error: Callable[[Flight], BaseException]) -> None:
        """Stop the task; fail the unsettled messages still waiting with ``make_error``
        (given each one's flight)."""
        for future, flight in self.outbox:
            if not future.done():
                future.set_exception(make_error(flight))
        self.outbox.clear()
        self._bytes = 0
        self._room.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------------ queries

    def is_live(self, future: AckFuture, flight: Flight) -> bool:
        """True while ``flight`` still needs sending (not expired, settled, cancelled or
        replaced by a newer attempt)."""
        if flight[ATTEMPT] < 0:  # AckPolicy.NONE: not in the ledger
            return not future.done()
        return self._ledger.get(flight[CID]) is future and future.flight is flight

    def waiting(self) -> int:
        """How many messages wait for NATS now."""
        return sum(1 for future, flight in self.outbox if self.is_live(future, flight))

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the messages in the outbox (a plain read: safe from another thread)."""
        return self._bytes

    # ------------------------------------------------------------------ sending

    async def send(self, future: AckFuture) -> None:
        """Send or keep a message (its future's flight) the caller could not hand to the
        transport's fast path.

        With the fast path off (and nothing waiting before it), the message goes through
        the transport's public path at once. Otherwise it is kept in order (NATS is
        disconnected, or its buffer is full) for the sender task, waiting while the
        outbox is full. Raises the SDK error (the message is then out of the ledger)
        when the message cannot be sent at all.
        """
        transport = self._transport
        flight = future.flight
        if not self.outbox and transport.connected and not transport.fast_path:
            try:
                if await transport.send(flight[SUBJECT], flight[REPLY], flight[DATA], flight[CID]):
                    return
            except LiftbridgeError:
                self._forget(future, flight)
                raise
        if transport.closed:
            self._forget(future, flight)
            raise NotConnectedError(
                "the NATS connection is closed; nothing was sent. Connect a new client "
                "and create a new Publisher."
            )
        await self._keep(future, flight)

    def defer(self, future: AckFuture) -> bool:
        """Keep a message the fast path could not take now (NATS's buffer is full or
        NATS is disconnected), without waiting; False when the outbox has no room for it."""
        flight = future.flight
        size = len(flight[DATA])
        if (self.outbox and self._bytes + size > self._max_bytes) or self._transport.closed:
            return False
        self.outbox.append((future, flight))
        self._bytes += size
        self._wakeup.set()
        return True

    def resend(self, future: AckFuture) -> None:
        """Queue a message (already back in the ledger, with its next flight) to be sent
        again."""
        if not self._is_open():
            return
        flight = future.flight
        self.resent += 1
        self.outbox.append((future, flight))
        self._bytes += len(flight[DATA])
        self._wakeup.set()

    # ------------------------------------------------------------------ retry policy

    def on_expired(self, future: AckFuture) -> None:
        """Ledger callback: a message's attempt deadline passed without an ack."""
        if future.done():
            return
        flight = future.flight
        now = self._loop.time()
        if self._retry and now < flight[FINAL] and self._is_open():
            again = next_attempt(flight, now + self._ack_timeout)
            future.flight = again
            self._ledger.add(future, False)
            self.resend(future)
            self._resend_log.log(
                "no ack for a message on %r within ack_timeout (%.3g s): sent again "
                "(attempt %d, correlation id %s)",
                flight[SUBJECT],
                self._ack_timeout,
                again[ATTEMPT] + 1,
                flight[CID],
            )
            return
        self.timed_out += 1
        future.set_exception(
            AckTimeoutError(
                f"no ack for the message published on {flight[SUBJECT]!r} (correlation id "
                f"{flight[CID]}) before its deadline: no stream may be attached to the "
                "subject, or its partition may be readonly, paused or without a leader. The "
                "message may or may not have been stored. Check the stream (publish_to_stream "
                "names readonly partitions and resumes paused ones), raise the timeout, or "
                "publish again.",
                subject=flight[SUBJECT],
                correlation_id=flight[CID],
            )
        )

    def on_no_responders(self, future: AckFuture) -> None:
        """Listener callback: NATS reports that nobody received this message."""
        flight = future.flight
        now = self._loop.time()
        if self._nobody_listened is not None and self._is_open():
            self._nobody_listened(flight[SUBJECT], self._ack_timeout)
        if self._retry and self._is_open():
            delay = min(BACKOFF_MAX, BACKOFF_FIRST * (2 ** flight[ATTEMPT]))
            if now + delay < flight[FINAL]:
                # This attempt, too, waits ack_timeout for its ack once sent.
                again = next_attempt(flight, now + delay + self._ack_timeout)
                # Back in the ledger at once: the deadline keeps running meanwhile.
                future.flight = again
                self._ledger.add(future, False)
                old = self._timers.pop(flight[CID], None)
                if old is not None:
                    old.cancel()
                self._timers[flight[CID]] = self._loop.call_later(
                    delay, self._resend_later, future, again
                )
                self._resend_log.log(
                    "nobody listens on %r (no stream, paused partition, or a fail-over in "
                    "progress): sending the message again in %.3g s (attempt %d, correlation "
                    "id %s)",
                    flight[SUBJECT],
                    delay,
                    again[ATTEMPT] + 1,
                    flight[CID],
                )
                return
        future.set_exception(no_responders_exception(flight[SUBJECT], flight[CID]))

    def _resend_later(self, future: AckFuture, flight: Flight) -> None:
        self._timers.pop(flight[CID], None)
        if self.is_live(future, flight):  # not settled, expired or sent again
            self.resend(future)

    # ------------------------------------------------------------------ keeping

    async def _keep(self, future: AckFuture, flight: Flight) -> None:
        """Queue a message; wait (until its deadline) while the outbox is full."""
        size = len(flight[DATA])
        if self.outbox and self._bytes + size > self._max_bytes:
            self._prune()
        while self.outbox and self._bytes + size > self._max_bytes:
            self._room.clear()
            left = flight[FINAL] - self._loop.time()
            try:
                if left <= 0:
                    raise TimeoutError
                await asyncio.wait_for(self._room.wait(), left)
            except TimeoutError:
                self._forget(future, flight)
                raise NotConnectedError(
                    "NATS is disconnected and the publisher's reconnect buffer "
                    f"({self._max_bytes} bytes) stayed full until the message's deadline; "
                    "publish again once NATS is back, or raise max_buffered_bytes"
                ) from None
            if not self._is_open():
                self._forget(future, flight)
                raise PublisherClosedError("the publisher closed while the message waited")
        self.outbox.append((future, flight))
        self._bytes += size
        self._wakeup.set()

    def _prune(self) -> None:
        """Drop messages that expired or were settled while they waited for NATS."""
        live = [(f, flight) for f, flight in self.outbox if self.is_live(f, flight)]
        self.outbox.clear()  # in place: the publisher holds a reference to this deque
        self.outbox.extend(live)
        self._bytes = sum(len(flight[DATA]) for _, flight in live)

    def _forget(self, future: AckFuture, flight: Flight) -> None:
        # The message never left.
        self._ledger.discard(flight[CID], future)

    async def _run(self) -> None:
        transport = self._transport
        fast = bool(transport.fast_path)
        outbox = self.outbox
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while outbox:
                if transport.closed:
                    self._fail_all()
                    break
                if not transport.connected:
                    self._disconnected()
                    await asyncio.sleep(_RECONNECT_POLL)
                    continue
                if self._outage is not None:
                    self._reconnected()
                if fast:
                    await self._write_out()
                    continue
                entry = outbox.popleft()
                future, flight = entry
                self._bytes -= len(flight[DATA])
                self._room.set()
                if not self.is_live(future, flight):
                    continue
                try:
                    sent = await transport.send(
                        flight[SUBJECT], flight[REPLY], flight[DATA], flight[CID]
                    )
                except LiftbridgeError as exc:
                    self._forget(future, flight)
                    if not future.done():
                        future.set_exception(exc)
                    continue
                if sent:
                    if flight[ATTEMPT] < 0 and not future.done():
                        future.set_result(None)  # AckPolicy.NONE: sent is done
                else:
                    # Disconnected between the check and the send: keep it, in order.
                    outbox.appendleft(entry)
                    self._bytes += len(flight[DATA])
                    await asyncio.sleep(_RECONNECT_POLL)

    async def _write_out(self) -> None:
        """Hand the outbox to the transport's fast path, in order, as far as it takes
        it; then wait for its buffer (or the connection) if something is left."""
        outbox = self.outbox
        write = self._transport.write
        live = self._ledger.get
        written = 0
        while outbox:
            future, flight = outbox[0]
            if future.done() or (
                flight[ATTEMPT] >= 0
                and (live(flight[CID]) is not future or future.flight is not flight)
            ):
                outbox.popleft()  # settled, expired or cancelled while it waited
                written += len(flight[DATA])
                continue
            if not write(flight[SUBJECT], flight[REPLY], flight[DATA]):
                break
            outbox.popleft()
            written += len(flight[DATA])
            if flight[ATTEMPT] < 0:
                future.set_result(None)  # AckPolicy.NONE: sent is done
        self._bytes -= written
        self._room.set()
        if outbox:
            # The buffer is full (or the connection just went): wait, in order.
            if self._transport.congested:
                await self._transport.wait_writable()
            else:
                await asyncio.sleep(_RECONNECT_POLL)

    def _disconnected(self) -> None:
        if self._outage is None:
            self._outage = self._loop.time()
            _log.warning(
                "NATS is disconnected: %d message(s) wait in the publisher's buffer "
                "(at most %d bytes) for the reconnect",
                len(self.outbox),
                self._max_bytes,
            )

    def _reconnected(self) -> None:
        assert self._outage is not None
        _log.info(
            "NATS is connected again after %.1f s: sending the %d message(s) kept meanwhile",
            self._loop.time() - self._outage,
            len(self.outbox),
        )
        self._outage = None

    def _fail_all(self) -> None:
        while self.outbox:
            future, flight = self.outbox.popleft()
            self._forget(future, flight)
            if not future.done():
                future.set_exception(
                    NotConnectedError(
                        "the NATS connection was closed before the message could be sent"
                    )
                )
        self._bytes = 0
