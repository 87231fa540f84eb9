"""The one seam between the publisher and NATS: a small transport protocol.

The publisher, its sender and its ack listener talk to NATS only through a
:class:`PublishTransport` (the split follows httpx's ``AsyncBaseTransport``): write a
message now, send it the slow way, wait while the connection's buffer is full, flush,
and subscribe to the ack inbox. Two implementations exist: :class:`NatsTransport`
over a nats-py client (this module, the only one that imports nats-py on the publish
path; its fast path lives in :mod:`._natscompat`), and
:class:`liftbridge_nats.testing.MemoryTransport`, in memory, for fast tests of
ordering, backpressure, deadlines, cancellation and close.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nats import errors as nats_errors

from . import _natscompat
from ._errors import (
    InvalidArgumentError,
    LiftbridgeError,
    MaxPayloadExceededError,
    NotConnectedError,
    PublishError,
)
from ._log import get_logger

__all__ = [
    "FAST_PATH_ENV",
    "FastPath",
    "InboxSubscription",
    "NatsTransport",
    "PublishTransport",
    "too_large_error",
]

_log = get_logger("publisher")

# Setting this to 0 / off / false turns the fast path off by default (for every
# Publisher that does not say fast_path=... itself): a switch for operators, and how
# CI runs the publisher's tests on nats-py's public API.
FAST_PATH_ENV = "LIFTBRIDGE_NATS_FAST_PATH"

OnData = Callable[[bytes], None]
OnStatus = Callable[[str, str], None]

_STATUS = "Status"
# The random part of an inbox of ours: 64 bits, 11 characters (a NUID has 22).
_INBOX_TOKEN_BYTES = 8


@dataclass(frozen=True, slots=True)
class FastPath:
    """Whether a publisher uses the fast path to nats-py, and why not when it does not.

    True in a boolean context when it is on. ``reason`` is empty when it is on.
    """

    enabled: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.enabled


def fast_path_default() -> bool:
    """The default of ``Publisher(fast_path=...)``: on, unless the environment says no."""
    value = os.environ.get(FAST_PATH_ENV, "").strip().lower()
    return value not in ("0", "off", "false", "no")


def too_large_error(subject: str, cid: str, size: int, max_payload: int) -> MaxPayloadExceededError:
    """The error for a message larger than the NATS connection accepts (nothing sent)."""
    what = f"is {size} bytes with its envelope, more" if size >= 0 else "is larger"
    return MaxPayloadExceededError(
        f"the message for {subject!r} {what} than the NATS connection's max_payload "
        f"({max_payload} bytes); nothing was sent. Send a smaller message or raise "
        "max_payload on the NATS server (and clustering.replication.max.bytes on Liftbridge).",
        subject=subject,
        correlation_id=cid,
    )


class InboxSubscription(abc.ABC):
    """A live subscription to a publisher's ack inbox."""

    @property
    @abc.abstractmethod
    def direct(self) -> bool:
        """True when acks reach the handler without a per-message queue and task."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Unsubscribe (idempotent; never raises for a closed connection)."""


class PublishTransport(abc.ABC):
    """What the publisher needs from a NATS connection.

    :meth:`write` is the hot path: synchronous, it hands one message to the connection
    or returns False. Then :attr:`congested` tells whether the connection's buffer was
    full (wait with :meth:`wait_writable` and write again); otherwise the message goes
    the slow way, :meth:`send`, which also reports a connection that is down.
    """

    congested: bool = False
    """True after :meth:`write` refused a message because the outgoing buffer was full."""

    @property
    @abc.abstractmethod
    def fast_path(self) -> FastPath:
        """Whether :meth:`write` can take messages at all."""

    @property
    @abc.abstractmethod
    def max_payload(self) -> int:
        """The largest message the connection accepts, in bytes."""

    @property
    @abc.abstractmethod
    def connected(self) -> bool:
        """True while messages can be sent now."""

    @property
    @abc.abstractmethod
    def closed(self) -> bool:
        """True once the connection is closed for good."""

    @property
    def fast_sent(self) -> int:
        """Messages taken by :meth:`write`."""
        return 0

    @property
    def public_sent(self) -> int:
        """Messages sent by :meth:`send`."""
        return 0

    @abc.abstractmethod
    def new_inbox(self) -> str:
        """A fresh, unique inbox subject prefix."""

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:  # noqa: B027 - optional hook
        """Called once by the publisher's start(), on its event loop."""

    @abc.abstractmethod
    def write(self, subject: str, reply: bytes, data: bytes) -> bool:
        """Hand a message to the connection now; False when it was not taken.

        ``reply`` is the NATS reply subject (empty for none), as bytes.
        """

    @abc.abstractmethod
    async def wait_writable(self) -> None:
        """Wait until the outgoing buffer has room again, or a short while passed."""

    @abc.abstractmethod
    async def send(self, subject: str, reply: bytes, data: bytes, correlation_id: str = "") -> bool:
        """Send through the connection's public API; False when it is down right now.

        Raises a :class:`LiftbridgeError` when the message cannot be sent at all.
        """

    @abc.abstractmethod
    async def flush(self) -> None:
        """Make sure the server has seen everything written so far."""

    @abc.abstractmethod
    async def subscribe(
        self, subject: str, on_data: OnData, on_status: OnStatus, *, pending_limit: int
    ) -> InboxSubscription:
        """Subscribe to ``subject`` (a wildcard inbox): plain messages go to ``on_data``,
        NATS status messages to ``on_status(subject, status)``."""


class _NatsInbox(InboxSubscription):
    def __init__(self, sub: Any, acks: _natscompat.DirectAcks | None) -> None:
        self._sub = sub
        self._acks = acks

    @property
    def direct(self) -> bool:
        return self._acks is not None and self._acks.attached

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is None:
            return
        if self._acks is not None:
            self._acks.detach()
        # A closed or draining connection already dropped the subscription; the call
        # still stops its delivery task.
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


class NatsTransport(PublishTransport):
    """The transport over a connected nats-py client.

    ``fast_path`` (default: on, see :data:`FAST_PATH_ENV`) uses :mod:`._natscompat`
    when its probe accepts the client; otherwise every message goes through the
    public ``nc.publish`` and every ack through an ordinary subscription callback.
    """

    def __init__(self, nc: Any, *, fast_path: bool | None = None) -> None:
        self._nc = nc
        self._wanted = fast_path_default() if fast_path is None else bool(fast_path)
        if not self._wanted:
            reason = (
                "turned off by Publisher(fast_path=False)"
                if fast_path is not None
                else f"turned off by {FAST_PATH_ENV}"
            )
            self._fast = FastPath(False, reason)
        else:
            self._fast = self._probe()
        self._writer: _natscompat.DirectWriter | None = None
        self._public_sent = 0

    @property
    def fast_path(self) -> FastPath:
        return self._fast

    @property
    def max_payload(self) -> int:
        return int(self._nc.max_payload)

    @property
    def connected(self) -> bool:
        return bool(self._nc.is_connected)

    @property
    def closed(self) -> bool:
        return bool(getattr(self._nc, "is_closed", False))

    @property
    def fast_sent(self) -> int:
        return self._writer.sent if self._writer is not None else 0

    @property
    def public_sent(self) -> int:
        return self._public_sent

    @property
    def congested(self) -> bool:  # type: ignore[override]
        return self._writer is not None and self._writer.congested

    def new_inbox(self) -> str:
        # nats-py's inbox is the connection's inbox prefix and a 22-character NUID.
        # Liftbridge stores every message's ack inbox and reply subject, which begin
        # with this inbox, replicates them and sends them to every reader: keep the
        # connection's prefix (permissions may name it) and a shorter random token.
        inbox = str(self._nc.new_inbox())
        head, dot, _ = inbox.rpartition(".")
        return f"{head}.{secrets.token_urlsafe(_INBOX_TOKEN_BYTES)}" if dot else inbox

    def _probe(self) -> FastPath:
        found = _natscompat.probe(self._nc)
        return FastPath(found.ok, found.reason)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._wanted and self._writer is None:
            # Probed again: a client given before it connected has no flusher queue yet.
            self._fast = self._probe()
        if self._fast and self._writer is None:
            self._writer = _natscompat.DirectWriter(self._nc, loop)
            # The hot path calls the writer's method itself: no layer in between.
            self.write = self._writer.write  # type: ignore[method-assign]

    def write(self, subject: str, reply: bytes, data: bytes) -> bool:
        return False  # replaced per instance (see __init__ and bind)

    async def wait_writable(self) -> None:
        if self._writer is not None:
            await self._writer.wait_writable()

    async def send(self, subject: str, reply: bytes, data: bytes, correlation_id: str = "") -> bool:
        nc = self._nc
        try:
            await nc.publish(subject, data, reply.decode())
        except nats_errors.OutboundBufferLimitError:
            if nc.is_closed:
                closed = nats_errors.ConnectionClosedError()
                raise _translate(closed, subject, correlation_id, nc) from None
            return False  # disconnected between the caller's check and the send
        except Exception as exc:
            raise _translate(exc, subject, correlation_id, nc) from exc
        self._public_sent += 1
        return True

    async def flush(self) -> None:
        # Shielded: cancelling nc.flush() leaves a cancelled future in nats-py's PONG
        # queue, and nats-py 2.x then fails in its read loop when the PONG arrives.
        flush = asyncio.ensure_future(self._nc.flush())
        flush.add_done_callback(_consume_result)
        await asyncio.shield(flush)

    async def subscribe(
        self, subject: str, on_data: OnData, on_status: OnStatus, *, pending_limit: int
    ) -> InboxSubscription:
        async def on_message(msg: Any) -> None:
            headers = msg.headers
            if headers is not None and _STATUS in headers:
                on_status(msg.subject, headers[_STATUS])
            else:
                on_data(msg.data)

        subscribing = asyncio.ensure_future(
            self._nc.subscribe(
                subject, cb=on_message, pending_msgs_limit=pending_limit, pending_bytes_limit=0
            )
        )
        try:
            sub = await asyncio.shield(subscribing)
        except asyncio.CancelledError:
            # nats-py registers the subscription (and starts its task) part-way through
            # subscribe(); let it finish and undo it, then give up.
            with contextlib.suppress(Exception):
                await (await subscribing).unsubscribe()
            raise
        acks = None
        if self._fast:
            acks = _natscompat.DirectAcks(self._nc)
            if not acks.attach(sub, on_data):
                acks = None
        inbox = _NatsInbox(sub, acks)
        try:
            # The server must know the subscription before any message can be acked.
            await self.flush()
        except BaseException:
            await inbox.close()
            raise
        return inbox


def log_choice(fast: FastPath) -> None:
    """Log the path a publisher took, once per publisher."""
    if fast:
        _log.debug("liftbridge-nats publisher: fast path on")
    elif fast.reason.startswith("turned off"):
        _log.info("liftbridge-nats publisher: fast path off (%s)", fast.reason)
    else:
        _log.warning(
            "liftbridge-nats publisher: fast path off, using nats-py's public API (%s); "
            "results are the same, throughput is lower",
            fast.reason,
        )


def _translate(exc: BaseException, subject: str, cid: str, nc: Any) -> LiftbridgeError:
    """What nats-py raised, as the SDK's error family."""
    if isinstance(exc, LiftbridgeError):
        return exc
    if isinstance(exc, nats_errors.MaxPayloadError):
        return too_large_error(subject, cid, -1, nc.max_payload)
    if isinstance(exc, nats_errors.BadSubjectError):
        return InvalidArgumentError(f"NATS refused the subject {subject!r}")
    if isinstance(exc, nats_errors.ConnectionClosedError | nats_errors.ConnectionDrainingError):
        return NotConnectedError(
            "the NATS connection is closed or draining; nothing was sent. Connect a new "
            "client and create a new Publisher."
        )
    return PublishError(
        f"NATS could not send the message for {subject!r}: {exc!r}",
        subject=subject,
        correlation_id=cid,
    )


def _consume_result(task: asyncio.Future[Any]) -> None:
    """Retrieve a background flush's outcome, so that a failure after its caller was
    cancelled is not reported as "exception was never retrieved"."""
    if not task.cancelled():
        task.exception()
