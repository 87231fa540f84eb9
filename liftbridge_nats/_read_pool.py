"""The read side's connections: one HTTP/2 connection per broker, shared by every
Subscribe call to that broker, driven by the event loop.

:mod:`._h2` does the protocol; this module owns the sockets (plain or TLS), opens a
connection on first use, starts calls on it, and ends every call of a connection
that breaks, so that each subscription finds out and resubscribes. A broker that
says GOAWAY keeps its running calls and gets a new connection for new ones.
No thread is involved: the event loop reads every connection. Subscriptions reach
the pool through :class:`H2ReadTransport`, the network's
:class:`~._read_transport.ReadTransport`.

A broker that breaks HTTP/2 (see :mod:`._h2` for what is checked) gets a GOAWAY with
the error's code and its connection is dropped; every call on it ends as UNAVAILABLE
(a malformed call alone ends as INTERNAL), so that each subscription finds out and
resubscribes. So is a broker that leaves more than 1 MiB of what it made us send
(PING answers, resets) unread. The SETTINGS we send are :mod:`._h2`'s: no push, a
16 KiB initial window (each call opens its own at once), a 64 KiB header list.

A connection lost under running calls, or one that cannot be opened, is logged at
WARNING under ``liftbridge_nats.subscription`` (once per connection; failures to
connect at most every 10 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import TYPE_CHECKING, Protocol

from ._errors import ClientClosedError
from ._h2 import UNAVAILABLE, H2Connection, H2ProtocolError, Status
from ._log import RateLimitedLog, get_logger, redact
from ._recvsize import cap_read_size, fit_read_size
from ._stream_reader import (
    MAX_BYTES,
    MAX_MESSAGES,
    CallHandle,
    CallStatusError,
    Delivery,
    StreamReader,
    status_error,
)

if TYPE_CHECKING:
    from ._proto import api_pb2

__all__ = ["SUBSCRIBE_PATH", "H2ReadTransport", "ReadPool", "TLSSource"]

SUBSCRIBE_PATH = "/proto.API/Subscribe"
# How long closing waits for a connection's transport to go (a TLS close exchanges
# close_notify with the broker) before it aborts the transport.
_CLOSE_WAIT = 1.0
# The most bytes a connection may have waiting to be written before it is dropped.
_MAX_WRITE_BACKLOG = 1024 * 1024

_log = get_logger("subscription")
# A broker that is down is tried again by every subscription that needs it.
_unreachable_log = RateLimitedLog(_log, interval=10.0)


class TLSSource(Protocol):
    """What the pool needs of the client's TLS settings (a ``TLSConfig``)."""

    @property
    def server_name(self) -> str | None:
        """The name to check the broker's certificate against (None: the host)."""
        ...

    def ssl_context(self) -> ssl.SSLContext:
        """A client-side TLS context."""
        ...


class _Call(CallHandle):
    __slots__ = ("_connection", "_stream_id")

    def __init__(self, connection: _Connection, stream_id: int) -> None:
        self._connection = connection
        self._stream_id = stream_id

    def grant(self, increment: int) -> None:
        conn = self._connection
        conn.h2.grant(self._stream_id, increment)
        conn.flush()

    def cancel(self) -> None:
        conn = self._connection
        conn.h2.cancel(self._stream_id)
        conn.flush()
        conn.close_if_idle()


class _Connection(asyncio.Protocol):
    """One broker connection: an asyncio protocol around an :class:`H2Connection`."""

    def __init__(
        self,
        pool: ReadPool,
        address: str,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None,
    ) -> None:
        self.address = address
        self.h2 = H2Connection(address, scheme="https" if ssl_context else "http")
        self._pool = pool
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self._transport: asyncio.Transport | None = None
        self._fit_reads = False  # see fit_read_size
        self._pending: list[tuple[StreamReader, str, bytes]] = []
        self._connecting: asyncio.Task[None] | None = None
        self._broken = False
        # Set when the transport is gone: a TLS transport told to close still exchanges
        # close_notify, and one left to the garbage collector warns of an unclosed socket.
        self._lost: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ state

    @property
    def usable(self) -> bool:
        """Whether a new call may go on this connection."""
        return not self._broken and self.h2.can_start

    def start(self, reader: StreamReader, path: str, request: bytes) -> None:
        """Start a call now, or as soon as the connection is up."""
        if self._transport is None:
            self._pending.append((reader, path, request))
            if self._connecting is None:
                self._connecting = asyncio.ensure_future(self._connect())
            return
        self._start(reader, path, request)

    def _start(self, reader: StreamReader, path: str, request: bytes) -> None:
        if reader.finished:
            return  # cancelled while the connection was being made
        stream_id = self.h2.start_call(path, request, reader, window=reader.window)
        reader.attach(_Call(self, stream_id))
        self.flush()

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        host, _, port = self.address.rpartition(":")
        try:
            async with asyncio.timeout(self._pool.connect_timeout):
                await loop.create_connection(
                    lambda: self,
                    host.strip("[]"),
                    int(port),
                    ssl=self._ssl,
                    server_hostname=(self._server_hostname or host.strip("[]"))
                    if self._ssl
                    else None,
                )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            error = _unreachable(exc)
            _unreachable_log.log(
                "cannot connect to broker %s to read: %s", redact(self.address), error.details()
            )
            self._fail(error)
            return
        except asyncio.CancelledError:
            self._fail(ClientClosedError("the client is closed; open a new Client"))
            raise
        pending, self._pending = self._pending, []
        for reader, path, request in pending:
            if self._broken:
                reader.fail(status_error(Status(UNAVAILABLE, "the connection broke")))
            else:
                self._start(reader, path, request)

    def _fail(self, error: BaseException) -> None:
        self._broken = True
        self._pool.forget(self)
        pending, self._pending = self._pending, []
        for reader, _, _ in pending:
            reader.fail(error)

    # ------------------------------------------------------------------ protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._fit_reads = cap_read_size(transport)
        self._lost = asyncio.get_running_loop().create_future()
        self._pool.live.add(self)
        self.h2.initiate()
        self.flush()

    def data_received(self, data: bytes) -> None:
        if self._fit_reads:
            fit_read_size(self._transport, len(data))
        try:
            self.h2.receive(data)
        except H2ProtocolError as exc:
            # The calls have ended (UNAVAILABLE) and a GOAWAY with the error's code is
            # queued: send it, then drop the connection.
            self._abort(f"the broker broke the HTTP/2 protocol ({exc.code_name}): {exc}")
            return
        except Exception as exc:  # a bug of ours: end the calls, never the event loop
            _log.error(
                "reading from broker %s failed (%s: %s); dropping the connection",
                redact(self.address),
                type(exc).__name__,
                exc,
                exc_info=True,
            )
            self._abort(f"reading the connection failed: {type(exc).__name__}: {exc}")
            return
        self.flush()
        transport = self._transport
        if transport is not None and transport.get_write_buffer_size() > _MAX_WRITE_BACKLOG:
            # Our writes are a few small frames a call; a backlog this large means a
            # broker that sends frames to be answered (PINGs, say) and reads nothing.
            self._abort(
                f"the broker reads nothing of what it makes us send "
                f"({transport.get_write_buffer_size()} bytes waiting)"
            )
            return
        self.close_if_idle()

    def eof_received(self) -> bool | None:
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        closing = self._broken  # closed by us: nothing to report
        self._pool.live.discard(self)
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        self._broken = True
        self._pool.forget(self)
        detail = f"the broker closed the connection ({exc})" if exc else "Socket closed"
        calls = self.h2.open_calls + len(self._pending)
        if calls and not closing:
            _log.warning(
                "lost the connection to broker %s with %d subscriptions on it (%s); "
                "they subscribe again",
                redact(self.address),
                calls,
                detail,
            )
        self.h2.connection_lost(detail)
        pending, self._pending = self._pending, []
        for reader, _, _ in pending:
            reader.fail(status_error(Status(UNAVAILABLE, detail)))

    # ------------------------------------------------------------------ helpers

    def flush(self) -> None:
        """Write what the protocol queued."""
        outbox = self.h2.outbox
        if outbox and self._transport is not None and not self._transport.is_closing():
            self._transport.write(bytes(outbox))
        outbox.clear()

    def close_if_idle(self) -> None:
        """A connection told to go away closes once its last call has ended."""
        if self.h2.goaway is not None and not self.h2.open_calls:
            self.close()

    def _abort(self, detail: str) -> None:
        """Drop a connection the broker broke: its calls end (UNAVAILABLE), what the
        protocol queued (a GOAWAY) is written, and the transport closes, at once or
        after :data:`_CLOSE_WAIT` if the broker does not take those bytes."""
        self._pool.drop_log.log(
            "dropping the connection to broker %s: %s; its subscriptions subscribe again",
            redact(self.address),
            detail,
        )
        self._broken = True
        self._pool.forget(self)
        self.h2.connection_lost(detail)
        transport = self._transport
        if transport is None:
            return
        self.flush()
        transport.close()  # reads nothing more; writes the GOAWAY first
        lost = self._lost
        if lost is not None and not lost.done():
            handle = asyncio.get_running_loop().call_later(_CLOSE_WAIT, transport.abort)
            lost.add_done_callback(lambda _: handle.cancel())

    def close(self) -> None:
        """Say GOAWAY and close (calls still open end as the transport goes)."""
        self._broken = True
        self._pool.forget(self)
        self.h2.close()
        self.flush()
        if self._transport is not None:
            self._transport.close()

    async def wait_lost(self, timeout: float) -> None:
        """Wait until the transport is gone, aborting it after ``timeout`` seconds."""
        lost = self._lost
        if lost is None or lost.done():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await asyncio.shield(lost)
            return
        if self._transport is not None:
            self._transport.abort()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await asyncio.shield(lost)

    async def stop_connecting(self) -> None:
        """Give up a connection attempt in progress (for closing) and wait for it."""
        task = self._connecting
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _unreachable(exc: BaseException) -> CallStatusError:
    if isinstance(exc, ssl.SSLError):
        detail = f"TLS handshake failed: {exc}"
    elif isinstance(exc, TimeoutError):
        detail = "connection timed out"
    else:
        detail = (
            f"failed to connect: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
        )
    return status_error(Status(UNAVAILABLE, detail))


class ReadPool:
    """HTTP/2 connections for reading, one per broker address, opened on first use."""

    def __init__(
        self,
        tls: TLSSource | None,
        *,
        connect_timeout: float = 10.0,
        max_messages: int = MAX_MESSAGES,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self._tls = tls
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._ssl: ssl.SSLContext | None = None
        self.connect_timeout = connect_timeout
        self._connections: dict[str, _Connection] = {}
        self._everything: set[_Connection] = set()
        self._readers: set[StreamReader] = set()
        self._closed = False
        self.live: set[_Connection] = set()
        """Connections whose transport is not gone yet (open, or closing)."""
        # A broker that breaks every call it answers breaks each new connection too, as
        # often as the subscriptions make progress on it: hundreds of times a second,
        # each worth a warning.
        self.drop_log = RateLimitedLog(_log, interval=10.0)

    @property
    def open_calls(self) -> int:
        """Calls running now, over every connection (for tests and diagnostics)."""
        return len(self._readers)

    @property
    def connections(self) -> int:
        """Connections open or opening now."""
        return len(self._everything)

    def _ssl_context(self) -> ssl.SSLContext | None:
        if self._tls is None:
            return None
        if self._ssl is None:
            self._ssl = self._tls.ssl_context()
        return self._ssl

    def subscribe(
        self,
        address: str,
        request: bytes,
        *,
        skip_through: int | None,
        delivery: Delivery | None = None,
    ) -> StreamReader:
        """Start a Subscribe call (a serialized request) to ``address``; its reader
        (read-ahead bounded by the pool's ``max_messages`` and ``max_bytes``; counting
        and deserializing as ``delivery`` says)."""
        if self._closed:
            raise ClientClosedError("the client is closed; open a new Client")
        reader = StreamReader(
            skip_through=skip_through,
            max_messages=self.max_messages,
            max_bytes=self.max_bytes,
            delivery=delivery,
        )
        conn = self._connections.get(address)
        if conn is None or not conn.usable:
            conn = _Connection(
                self,
                address,
                self._ssl_context(),
                self._tls.server_name if self._tls is not None else None,
            )
            self._connections[address] = conn
            self._everything.add(conn)
        self._readers.add(reader)
        reader.add_finished_callback(self._readers.discard)
        conn.start(reader, SUBSCRIBE_PATH, request)
        return reader

    def forget(self, conn: _Connection) -> None:
        """A connection is broken or closing: it takes no new calls."""
        if self._connections.get(conn.address) is conn:
            del self._connections[conn.address]
        self._everything.discard(conn)

    async def close(self) -> None:
        """Cancel every call and close every connection."""
        self._closed = True
        for reader in list(self._readers):
            reader.cancel()
        conns = list(self._everything)
        self._everything.clear()
        self._connections.clear()
        for conn in conns:
            await conn.stop_connecting()
            conn.close()
        # Also the connections that went away earlier (GOAWAY, errors) and still close.
        closing = list(self.live)
        if closing:
            await asyncio.gather(*(conn.wait_lost(_CLOSE_WAIT) for conn in closing))


class H2ReadTransport:
    """The read transport over HTTP/2 (see :mod:`._read_transport`): each Subscribe
    a call on the :class:`ReadPool`'s connection to the broker."""

    def __init__(self, pool: ReadPool) -> None:
        self.pool = pool

    def subscribe(
        self,
        address: str,
        request: api_pb2.SubscribeRequest,
        *,
        skip_through: int | None,
        delivery: Delivery | None = None,
    ) -> StreamReader:
        """Start a Subscribe call to ``address`` (see :meth:`ReadPool.subscribe`)."""
        return self.pool.subscribe(
            address, request.SerializeToString(), skip_through=skip_through, delivery=delivery
        )

    async def close(self) -> None:
        """Cancel every call and close every connection."""
        await self.pool.close()
