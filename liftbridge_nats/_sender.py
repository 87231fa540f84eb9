"""The publisher's sender: the one background task, for messages that cannot go at once.

Most messages go straight from the caller to nats-py's outgoing buffer. The others
wait here, in order, in a bounded outbox: messages published while NATS is disconnected
(nats-py's own reconnect buffer is small and fails when full), and messages sent again
(``retry=True``, or after a no-responders report). The sender task sends them when the
connection is up, skipping those that expired or were settled meanwhile. Everything a
message needs to be sent again is in its flight (the encoded bytes, subject, reply
subject), so a re-send is the same message with the same correlation id.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any

from nats import errors as nats_errors

from ._inflight import ATTEMPT, CID, DATA, FINAL, FUTURE, REPLY, SUBJECT, Flight, InflightLedger
from .errors import (
    InvalidArgumentError,
    LiftbridgeError,
    MessageTooLargeError,
    NotConnectedError,
    PublisherClosedError,
    PublishError,
)

__all__ = ["Sender", "send_error", "too_large_error"]

# While NATS is disconnected the sender polls for the reconnect (nats-py's reconnected
# callback belongs to the application that created the client).
_RECONNECT_POLL = 0.02


def too_large_error(subject: str, cid: str, size: int, max_payload: int) -> MessageTooLargeError:
    """The error for a message larger than the NATS connection accepts (nothing sent)."""
    what = f"is {size} bytes with its envelope, more" if size >= 0 else "is larger"
    return MessageTooLargeError(
        f"the message for {subject!r} {what} than the NATS connection's max_payload "
        f"({max_payload} bytes); nothing was sent. Send a smaller message or raise "
        "max_payload on the NATS server (and clustering.replication.max.bytes on Liftbridge).",
        subject=subject,
        correlation_id=cid,
    )


def send_error(exc: BaseException, subject: str, cid: str, max_payload: int) -> LiftbridgeError:
    """Translate what ``nc.publish`` raised into the SDK's error family."""
    if isinstance(exc, LiftbridgeError):
        return exc
    if isinstance(exc, nats_errors.MaxPayloadError):
        return too_large_error(subject, cid, -1, max_payload)
    if isinstance(exc, nats_errors.BadSubjectError):
        return InvalidArgumentError(f"NATS refused the subject {subject!r}")
    if isinstance(exc, nats_errors.ConnectionClosedError | nats_errors.ConnectionDrainingError):
        return NotConnectedError(
            "the NATS connection is closed or draining; nothing was sent. Connect a new "
            "client and create a new Publisher."
        )
    if isinstance(exc, nats_errors.OutboundBufferLimitError):
        return NotConnectedError(
            "NATS is disconnected and its outgoing buffer is full; nothing was sent. "
            "Publish again once NATS is back."
        )
    return PublishError(
        f"NATS could not send the message for {subject!r}: {exc!r}",
        subject=subject,
        correlation_id=cid,
    )


class Sender:
    """Owns the outbox and the task that drains it into NATS.

    ``outbox`` is public so that the publisher's hot path can check cheaply whether
    older messages wait (new ones must then queue behind them, to keep the order).
    """

    def __init__(
        self,
        nc: Any,
        ledger: InflightLedger,
        loop: asyncio.AbstractEventLoop,
        *,
        max_buffered_bytes: int,
        is_open: Callable[[], bool],
    ) -> None:
        self._nc = nc
        self._ledger = ledger
        self._loop = loop
        self._max_bytes = max_buffered_bytes
        self._is_open = is_open
        self.outbox: deque[Flight] = deque()
        self._bytes = 0
        self._wakeup = asyncio.Event()
        self._room = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.resent = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the sender task."""
        if self._task is None:
            self._task = self._loop.create_task(self._run(), name="liftbridge-publisher-sender")

    async def stop(self, make_error: Callable[[Flight], BaseException]) -> None:
        """Stop the task; fail the unsettled flights still waiting with ``make_error``."""
        for flight in self.outbox:
            if not flight[FUTURE].done():
                flight[FUTURE].set_exception(make_error(flight))
        self.outbox.clear()
        self._bytes = 0
        self._room.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------------ queries

    def is_live(self, flight: Flight) -> bool:
        """True while ``flight`` still needs sending (not expired, settled or cancelled)."""
        if flight[ATTEMPT] < 0:  # AckPolicy.NONE: not in the ledger
            return not flight[FUTURE].done()
        return self._ledger.get(flight[CID]) is flight

    def waiting(self) -> int:
        """How many messages wait for NATS now."""
        return sum(1 for flight in self.outbox if self.is_live(flight))

    # ------------------------------------------------------------------ sending

    async def send(self, flight: Flight) -> None:
        """Send now through the public ``nc.publish``, or keep it while disconnected.

        Raises the SDK error (the flight is then out of the ledger) when the message
        cannot be sent at all.
        """
        nc = self._nc
        if self.outbox or not nc.is_connected:
            if nc.is_closed:
                self._forget(flight)
                raise send_error(
                    nats_errors.ConnectionClosedError(),
                    flight[SUBJECT],
                    flight[CID],
                    nc.max_payload,
                )
            await self._keep(flight)
            return
        try:
            await nc.publish(flight[SUBJECT], flight[DATA], flight[REPLY])
        except Exception as exc:
            self._forget(flight)
            raise send_error(exc, flight[SUBJECT], flight[CID], nc.max_payload) from exc

    def resend(self, flight: Flight) -> None:
        """Queue a flight (already back in the ledger) to be sent again."""
        if not self._is_open():
            return
        self.resent += 1
        self.outbox.append(flight)
        self._bytes += len(flight[DATA])
        self._wakeup.set()

    async def _keep(self, flight: Flight) -> None:
        """Queue a flight; wait (until its deadline) while the outbox is full."""
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
                self._forget(flight)
                raise NotConnectedError(
                    "NATS is disconnected and the publisher's reconnect buffer "
                    f"({self._max_bytes} bytes) stayed full until the message's deadline; "
                    "publish again once NATS is back, or raise max_buffered_bytes"
                ) from None
            if not self._is_open():
                self._forget(flight)
                raise PublisherClosedError("the publisher closed while the message waited")
        self.outbox.append(flight)
        self._bytes += size
        self._wakeup.set()

    def _prune(self) -> None:
        """Drop flights that expired or were settled while they waited for NATS."""
        live = [f for f in self.outbox if self.is_live(f)]
        self.outbox.clear()  # in place: the publisher holds a reference to this deque
        self.outbox.extend(live)
        self._bytes = sum(len(f[DATA]) for f in live)

    def _forget(self, flight: Flight) -> None:
        # The message never left.
        self._ledger.discard(flight[CID], flight[FUTURE])

    async def _run(self) -> None:
        nc = self._nc
        outbox = self.outbox
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while outbox:
                if nc.is_closed:
                    self._fail_all()
                    break
                if not nc.is_connected:
                    await asyncio.sleep(_RECONNECT_POLL)
                    continue
                flight = outbox.popleft()
                self._bytes -= len(flight[DATA])
                self._room.set()
                if not self.is_live(flight):
                    continue
                try:
                    await nc.publish(flight[SUBJECT], flight[DATA], flight[REPLY])
                except nats_errors.OutboundBufferLimitError:
                    # Disconnected between the check and the send: keep it, in order.
                    outbox.appendleft(flight)
                    self._bytes += len(flight[DATA])
                    await asyncio.sleep(_RECONNECT_POLL)
                except Exception as exc:
                    self._forget(flight)
                    future = flight[FUTURE]
                    if not future.done():
                        future.set_exception(
                            send_error(exc, flight[SUBJECT], flight[CID], nc.max_payload)
                        )
                else:
                    if flight[ATTEMPT] < 0 and not flight[FUTURE].done():
                        flight[FUTURE].set_result(None)  # AckPolicy.NONE: sent is done

    def _fail_all(self) -> None:
        while self.outbox:
            flight = self.outbox.popleft()
            self._forget(flight)
            if not flight[FUTURE].done():
                flight[FUTURE].set_exception(
                    NotConnectedError(
                        "the NATS connection was closed before the message could be sent"
                    )
                )
        self._bytes = 0
