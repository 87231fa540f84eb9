"""Every access to nats-py's private attributes, in one module: the publisher's fast path.

The public ``await nc.publish(...)`` and an ordinary subscription callback cost about as
much per message as everything else the publisher does. nats-py's own work is small:
a publish appends a ``PUB`` command to the client's outgoing buffer and wakes its
flusher task; an incoming message goes from the protocol parser to ``_process_msg``.
The fast path does exactly that, synchronously:

* :class:`DirectWriter` appends ``PUB`` commands to the client's outgoing buffer
  (``_pending``, ``_pending_data_size``), as ``nc.publish`` does, and at the start of
  the next turn of the loop (once writes carry several messages each: with the next
  data from the server, or 200 µs after the last write) hands the buffer to the
  TCP transport itself (``_transport``, as the flusher does) when the socket keeps up;
  otherwise it wakes the flusher through ``_flush_queue``, as ``nc.publish`` does.
  When the buffer is over the client's pending limit it refuses the command and
  :meth:`DirectWriter.wait_writable` waits until the flusher has written the buffer
  out: the same backpressure ``nc.publish`` applies, without leaving the fast path.
  Once 256 KiB wait in the buffer (or half the pending limit) and the socket has kept
  up, the buffer goes to the transport at once, so that a caller publishing for long
  without yielding has the server at work meanwhile;
* :class:`DirectAcks` puts one dispatcher in place of the client's ``_process_msg``
  (an attribute of that client object only; the class is untouched): a plain message
  for a registered subscription goes to its handler at once, everything else
  (status messages such as "no responders", other subscriptions) to the original
  method. The dispatcher is shared by every publisher on the connection and removed
  when the last one leaves;
* with it, a reader takes the place of the client's protocol parser's ``parse`` (again
  on that parser object only): it walks each chunk read from the socket and hands the
  ``MSG`` frames of registered subscriptions to their handlers without the parser's
  per-message regular expression, buffer deletions and awaited call. Every other frame
  (other subscriptions, status and header messages, ``PING``, ``INFO``, ``-ERR``) goes
  to the parser itself, in order, so nats-py sees the same protocol stream minus our
  acks; from another subscription's message on, the parser reads the rest of the chunk
  as it always did (acks among them take the dispatcher). A client whose parser looks
  different keeps its parser and gets the dispatcher alone. The reader also caps how
  much each of the client's connections reads from its socket at once (the transport
  under ``_transport._io_writer``; see :mod:`._recvsize`).

:func:`probe` checks once, when a publisher is built, that the client looks like the
nats-py this was written for (the range pyproject allows; CI runs the oldest and the
newest). When it does not, it says why, and the publisher uses nats-py's public API
only: same bytes on the wire, same results, slower. That fallback is for an unexpected
client, never a way to handle load.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ._log import get_logger
from ._recvsize import cap_read_size

__all__ = ["DirectAcks", "DirectWriter", "Probe", "is_installed", "probe", "reads_frames"]

_log = get_logger("publisher")

_SUBJECT_CACHE_LIMIT = 4096
_CRLF = b"\r\n"
# " <size>\r\n" (after a reply subject) and "<size>\r\n", by payload size.
# Each with the bytes it adds to the pending buffer together with the payload and CRLF.
_TAILS_AFTER_REPLY: dict[int, tuple[bytes, int]] = {}
_TAILS: dict[int, tuple[bytes, int]] = {}


def _tail(size: int, after_reply: bool) -> tuple[bytes, int]:
    tails = _TAILS_AFTER_REPLY if after_reply else _TAILS
    if len(tails) >= _SUBJECT_CACHE_LIMIT:
        tails.clear()
    tail = (b" %d\r\n" if after_reply else b"%d\r\n") % size
    entry = tails[size] = (tail, len(tail) + size + 2)
    return entry


# While waiting for the flusher, look again this often: a flusher that died with the
# connection never resolves the future it was handed.
_DRAIN_POLL = 0.05
# Once this many bytes (or half the client's pending limit) wait for the flusher, a
# write hands them to the socket itself.
_WRITE_THROUGH = 256 * 1024
# Once the writes carry this many commands each, a turn's commands wait for data from
# the server, or until this long after the last write (see DirectWriter._hold).
_HOLD_FROM = 4
_HOLD = 0.0002
# The attribute of a nats-py client that holds the ack routing table (set by us).
_TABLE_ATTR = "_liftbridge_nats_direct_acks"

Handler = Callable[[bytes], None]
ProcessMsg = Callable[[int, bytes, bytes, bytes, Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Probe:
    """Whether the fast path can be used with a client, and why not when it cannot."""

    ok: bool
    reason: str = ""


def probe(nc: Any) -> Probe:
    """Check the private attributes the fast path uses; never raises."""
    try:
        checks = (
            (isinstance(getattr(type(nc), "CONNECTED", None), int), "no CONNECTED status"),
            (isinstance(getattr(nc, "_status", None), int), "no int _status"),
            (isinstance(getattr(nc, "_pending", None), list), "no _pending list"),
            (isinstance(getattr(nc, "_pending_data_size", None), int), "no _pending_data_size"),
            (isinstance(getattr(nc, "_max_pending_size", None), int), "no _max_pending_size"),
            (isinstance(getattr(nc, "_flush_queue", None), asyncio.Queue), "no _flush_queue"),
            (
                isinstance(getattr(getattr(nc, "_flush_queue", None), "_queue", None), deque),
                "no deque in _flush_queue",
            ),
            (hasattr(nc, "_flusher_task"), "no _flusher_task"),
            (_has_counters(nc, "out_msgs", "out_bytes", "in_msgs", "in_bytes"), "no stats"),
            (_process_msg_ok(nc), "_process_msg has another signature"),
        )
    except Exception as exc:  # a client whose attributes raise is no client we know
        return Probe(False, f"inspecting the client failed: {exc!r}")
    missing = [why for ok, why in checks if not ok]
    if missing:
        return Probe(
            False,
            f"{type(nc).__module__}.{type(nc).__qualname__} does not look like the nats-py "
            f"client this version was written for ({'; '.join(missing)})",
        )
    return Probe(True)


def _has_counters(nc: Any, *names: str) -> bool:
    stats = getattr(nc, "stats", None)
    return isinstance(stats, dict) and all(name in stats for name in names)


def _process_msg_ok(nc: Any) -> bool:
    process = getattr(nc, "_process_msg", None)
    if process is None:
        return False
    if isinstance(getattr(nc, _TABLE_ATTR, None), _RouteTable):
        return True  # our dispatcher (a plain function), installed by another publisher
    return _coroutine_function_of(process, "sid", "subject", "reply", "data", "headers")


def _coroutine_function_of(function: Any, *params: str) -> bool:
    """True when ``function`` is a coroutine function with exactly these parameters."""
    if not inspect.iscoroutinefunction(function):
        return False
    try:
        return list(inspect.signature(function).parameters) == list(params)
    except (TypeError, ValueError):
        return False


class DirectWriter:
    """Appends ``PUB`` commands to a nats-py client's outgoing buffer.

    Use only on a client :func:`probe` accepted. :meth:`write` returns False when the
    command was not taken: the client is not connected (or draining), its flusher is
    not running, or the buffer is over its pending limit (then :attr:`congested` is
    True and :meth:`wait_writable` waits for the flusher). What a turn of the loop
    wrote goes to the socket at the start of the next (:meth:`_hand_over`), or, when
    writes already carry several commands each, with the next data from the server or
    200 µs after the last write (:meth:`_hold`); a write that fills the buffer past
    256 KiB (or half the pending limit) goes at once, unless the socket is behind.
    """

    __slots__ = (
        "_batch",
        "_connected",
        "_flushed",
        "_handing_over",
        "_heads",
        "_held",
        "_loop",
        "_nc",
        "_timer",
        "_waiters",
        "_write_through_at",
        "_written",
        "_written_at",
        "congested",
        "sent",
    )

    def __init__(self, nc: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._nc = nc
        self._loop = loop
        self._heads: dict[str, tuple[bytes, int]] = {}
        # Connected and not draining, in one comparison (what is_connected and
        # is_draining_pubs look at).
        self._connected = type(nc).CONNECTED
        # The last flusher wake-up we queued: resolved once the flusher wrote the
        # buffer that held our commands.
        self._flushed: asyncio.Future[None] | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._handing_over = False
        # The last hand-over: when, how many commands, and the count sent until then.
        self._written_at = 0.0
        self._batch = 0
        self._written = 0
        self._held: asyncio.TimerHandle | None = None
        limit = nc._max_pending_size
        self._write_through_at = min(_WRITE_THROUGH, limit // 2) if limit > 0 else _WRITE_THROUGH
        self.congested = False
        self.sent = 0

    def write(self, subject: str, reply: bytes, data: bytes) -> bool:
        """Queue one message for the socket; False if it was not taken."""
        nc = self._nc
        if nc._status != self._connected:
            self.congested = False
            return False
        head = self._heads.get(subject)
        if head is None:
            head = self._head(subject)
        size = len(data)
        # The command goes in as pieces ("PUB <subject> ", reply, " <size>\r\n", payload,
        # "\r\n"): the flusher joins the whole buffer anyway, so nothing is joined
        # twice and the payload is copied once.
        if reply:
            tail = _TAILS_AFTER_REPLY.get(size) or _tail(size, True)
            pieces: tuple[bytes, ...] = (head[0], reply, tail[0], data, _CRLF)
            pending_size = nc._pending_data_size + head[1] + len(reply) + tail[1]
        else:
            tail = _TAILS.get(size) or _tail(size, False)
            pieces = (head[0], tail[0], data, _CRLF)
            pending_size = nc._pending_data_size + head[1] + tail[1]
        if pending_size > nc._max_pending_size > 0 and nc._pending_data_size:
            # nc.publish would append it and then wait for the flusher; refusing it
            # lets the caller keep it (in order) until the flusher caught up.
            self.congested = True
            return False
        if not self._handing_over:
            # The first command of this turn of the loop: the buffer goes to the socket
            # in the next turn (see _hand_over), with every command added meanwhile.
            flusher = nc._flusher_task
            if flusher is None or flusher.done():
                self.congested = False
                return False
            self._handing_over = True
            if self._batch < _HOLD_FROM or not self._hold():
                self._loop.call_soon(self._hand_over)
        nc._pending.extend(pieces)
        nc._pending_data_size = pending_size
        if pending_size >= self._write_through_at:
            self._write_through(nc)
        stats = nc.stats
        stats["out_msgs"] += 1
        stats["out_bytes"] += size
        self.sent += 1
        return True

    def _hold(self) -> bool:
        """Keep this turn's commands until data from the server arrives, or until
        ``_HOLD`` after the last write; False (nothing held) when that moment is past
        or no reader of ours sees data arrive on this client.

        Each write costs the NATS server a read and a forward to the subscriber, about
        as much as the messages in it when they are few: at a steady rate of tens of
        thousands of messages a second, in turns of the loop that each publish a few,
        those reads and forwards load the machine the servers share. Once writes carry
        several commands each (``_HOLD_FROM``: the rate is above the loop's turns), a
        turn's commands wait for the next data from the server (acks come all the
        time then), or until ``_HOLD`` after the last write. asyncio's selector counts
        its timeouts in whole milliseconds: when nothing arrives, the loop wakes for
        the hold's end within a millisecond, not at once. A slower publisher (a message
        or two per write) never waits.
        """
        loop = self._loop
        at = self._written_at + _HOLD
        if loop.time() >= at:
            return False
        table = getattr(self._nc, _TABLE_ATTR, None)
        if not isinstance(table, _RouteTable) or table.reader is None:
            return False
        table.held.append(self)
        self._held = loop.call_at(at, self._hand_over)
        return True

    def _hand_over(self) -> None:
        """Give what this turn of the loop added to the buffer to the socket.

        Called at the start of the next turn of the loop, or, for commands held (see
        :meth:`_hold`), when data arrives or the hold ends. Written here, as the flusher
        would, when the socket keeps up: the flusher's wake-up (a future, its queue, a
        turn of its task and of ``drain()``) per turn of the loop costs more than the
        write itself when a few messages go per turn (a steady rate rather than
        bursts). When the socket is behind, or the client is not connected, or its
        transport is not TCP, the flusher is woken instead: it writes and waits for
        the socket to drain, and nats-py's pending limit paces the callers, as with
        ``nc.publish``.
        """
        if not self._handing_over:
            return  # handed over already (held, then the data or the timer came second)
        self._handing_over = False
        if self._held is not None:
            self._held.cancel()
            self._held = None
        nc = self._nc
        if not nc._pending_data_size:
            return  # the flusher (or a write-through) took it already
        if nc._status == self._connected and self._write_through(nc):
            self._written_at = self._loop.time()
            self._batch = self.sent - self._written
            self._written = self.sent
            return
        queue = nc._flush_queue
        if queue is not None and not queue._queue:  # asyncio.Queue.empty(), without the call
            self._flushed = flushed = self._loop.create_future()
            queue.put_nowait(flushed)

    def _write_through(self, nc: Any) -> bool:
        """Hand the client's outgoing buffer to its socket now, as its flusher would;
        False when it was left for the flusher.

        Also called while a turn of the loop adds commands: a caller that publishes
        thousands of messages without yielding (a burst of ``publish()`` calls, or many
        tasks run in one turn of the loop) would otherwise send nothing before it
        yields, and the server would idle while the client encodes. When the socket is
        behind, the buffer waits for the flusher (and nats-py's pending limit paces the
        caller, as before)."""
        transport: Any = getattr(nc, "_transport", None)
        writer = getattr(transport, "_io_writer", None)
        if writer is None:
            if transport is not None:
                # Not the TCP transport (websockets queue their own writes): the
                # flusher alone writes for this client.
                self._write_through_at = sys.maxsize
            return False
        try:
            if writer.transport.get_write_buffer_size() > self._write_through_at:
                return False
            transport.writelines(nc._pending)
        except (AttributeError, RuntimeError):
            # The transport is closing: nothing was written, the flusher meets it.
            return False
        nc._pending = []
        nc._pending_data_size = 0
        return True

    @property
    def usable(self) -> bool:
        """True while the client is connected and its flusher runs."""
        nc = self._nc
        flusher = nc._flusher_task
        return nc._status == self._connected and flusher is not None and not flusher.done()

    async def wait_writable(self) -> None:
        """Wait until the flusher has written out the buffer as it is now, or a short
        while (``_DRAIN_POLL``) passed; the caller then tries :meth:`write` again.

        Every waiter shares one flusher wake-up and one timer, so a burst of thousands
        of refused publishes costs one future each, not one flush each.
        """
        if not self.usable:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append(waiter)
        if len(self._waiters) == 1:
            flushed = self._flushed
            queue = self._nc._flush_queue
            if (flushed is None or flushed.done()) and not queue.full():
                self._flushed = flushed = self._loop.create_future()
                queue.put_nowait(flushed)
            if flushed is not None and not flushed.done():
                flushed.add_done_callback(self._wake)
            # A flusher that died with the connection never resolves its future.
            self._timer = self._loop.call_later(_DRAIN_POLL, self._wake)
        await waiter

    def _wake(self, _: object = None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _head(self, subject: str) -> tuple[bytes, int]:
        if len(self._heads) >= _SUBJECT_CACHE_LIMIT:
            self._heads.clear()
        head = b"PUB %b " % subject.encode()
        entry = self._heads[subject] = (head, len(head))
        return entry


class _RouteTable:
    """The dispatcher installed on one client, and the handlers it serves."""

    __slots__ = ("handlers", "held", "original", "parser", "reader", "shadowed")

    def __init__(self, original: ProcessMsg, shadowed: ProcessMsg | None) -> None:
        self.original = original
        # Writers holding a turn's commands until data arrives (see DirectWriter._hold).
        self.held: list[DirectWriter] = []
        # An instance attribute that was there before us (to put back), if any.
        self.shadowed = shadowed
        self.handlers: dict[int, Handler] = {}
        # The client's protocol parser and the reader put in place of its parse, if any.
        self.parser: Any = None
        self.reader: Callable[[bytes], Awaitable[None]] | None = None


# nats-py's protocol parser: its class, its states and its limit for a control line.
try:
    from nats.protocol import parser as _parser_module
except ImportError:  # pragma: no cover - nats-py always has it
    _parser_module = None  # type: ignore[assignment]
_MSG = b"MSG "


def _parser_of(nc: Any) -> Any:
    """The protocol parser of ``nc`` when it looks like the one :func:`_make_reader`
    was written for (the nats-py versions pyproject allows); None otherwise."""
    ps = getattr(nc, "_ps", None)
    module = _parser_module
    if module is None or not isinstance(ps, getattr(module, "Parser", ())):
        return None
    if not (
        isinstance(getattr(module, "AWAITING_CONTROL_LINE", None), int)
        and isinstance(getattr(module, "MAX_CONTROL_LINE_SIZE", None), int)
    ):
        return None
    if "parse" in vars(ps):
        return None  # somebody else's parse sits there already
    if not (
        isinstance(getattr(ps, "buf", None), bytearray)
        and isinstance(getattr(ps, "state", None), int)
        and isinstance(getattr(ps, "needed", None), int)
    ):
        return None
    return ps if _coroutine_function_of(getattr(type(ps), "parse", None), "self", "data") else None


def _make_reader(nc: Any, table: _RouteTable, ps: Any) -> Callable[[bytes], Awaitable[None]]:
    """The ``parse`` that reads the frames of registered subscriptions itself.

    What it leaves to the parser, the parser gets in order: a control line (``PING``,
    ``INFO`` ...) alone, and from a frame of another subscription, a header message
    or anything unusual on, the rest of the chunk. A frame cut by the end of a chunk
    goes to the parser too: it keeps the partial frame (a large payload grows in its
    buffer, copied once), the reader hands it the rest of that frame from the next
    chunk and reads on from there.
    """
    handlers = table.handlers
    stats = nc.stats
    parse_slowly = type(ps).parse.__get__(ps)
    control_line = _parser_module.AWAITING_CONTROL_LINE
    # A partial control line longer than nats-py's limit for one is left to its parser.
    longest_line = _parser_module.MAX_CONTROL_LINE_SIZE
    capped: Any = None  # the connection's transport whose reads were capped

    async def parse(data: bytes = b"") -> None:
        nonlocal capped
        if table.held:
            # Data from the server: what writers held goes out now (DirectWriter._hold).
            held, table.held = table.held, []
            for writer in held:
                writer._hand_over()
        transport = getattr(nc, "_transport", None)
        if transport is not capped:  # a new connection (nats-py makes one per server)
            capped = transport
            cap_read_size(getattr(getattr(transport, "_io_writer", None), "transport", None))
        if ps.state != control_line:
            # The parser is inside a message it began: it gets that message's rest.
            rest = ps.needed + 2 - len(ps.buf)
            if rest >= len(data) or rest < 0:
                await parse_slowly(data)
                return
            await parse_slowly(data[:rest])
            data = data[rest:]
            if ps.state != control_line:
                await parse_slowly(data)
                return
        buf = ps.buf
        if buf:
            if len(buf) > longest_line:
                await parse_slowly(data)  # no line end for that long: the parser's problem
                return
            # The start of a control line: read it with the rest.
            buf += data
            data = bytes(buf)
            del buf[:]
        end = len(data)
        pos = 0
        starts = data.startswith
        find = data.find
        # The control line, up to the size, of the last frame handed to a handler here,
        # and that handler: the acks of one inbox repeat it, so the next one is told by
        # one comparison instead of being split into fields.
        known = b""
        known_size = 0
        known_handler: Handler | None = None
        while pos < end:
            eol = find(_CRLF, pos)
            if eol < 0:
                break  # a control line not all here yet
            if known_size and starts(known, pos):
                handler = known_handler
                size_field = data[pos + known_size : eol]
            elif starts(_MSG, pos):
                fields = data[pos + 4 : eol].split(b" ")
                if len(fields) == 3:
                    sid_field = fields[1]
                    size_field = fields[2]
                elif len(fields) == 4:
                    sid_field = fields[1]
                    size_field = fields[3]
                else:
                    break  # not the canonical form: the parser decides
                handler = handlers.get(int(sid_field)) if sid_field.isdigit() else None
                if handler is not None:
                    known = data[pos : eol - len(size_field)]
                    known_size = len(known)
                    known_handler = handler
            elif starts(b"HMSG", pos):
                break  # its length is the parser's to read
            else:
                await parse_slowly(data[pos : eol + 2])  # PING, PONG, INFO, +OK, -ERR
                known_size = 0  # whatever ran meanwhile may have changed the handlers
                pos = eol + 2
                continue
            if not size_field.isdigit():
                break
            start = eol + 2
            stop = start + int(size_field)
            if stop + 2 > end:
                break  # the payload is not all here yet
            if handler is None:
                # Somebody else's message: the parser reads it and the rest of the chunk
                # as it always did, so the application's own subscriptions on this
                # connection cost what they did (and one split line per chunk).
                break
            stats["in_msgs"] += 1
            stats["in_bytes"] += stop - start
            try:
                handler(data[start:stop])
            except Exception:  # never break the client's read loop on our account
                _log.exception("liftbridge-nats: an ack handler failed")
            pos = stop + 2
        if pos < end:
            await parse_slowly(data[pos:] if pos else data)

    return parse


def _make_dispatcher(nc: Any, table: _RouteTable) -> Callable[..., Awaitable[None]]:
    handlers = table.handlers
    original = table.original
    stats = nc.stats
    # nats-py's parser awaits what _process_msg returns. For our acks that is a future
    # that is already done: no coroutine object and frame per ack.
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done.set_result(None)

    def process_msg(
        sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any
    ) -> Awaitable[None]:
        handler = handlers.get(sid)
        if handler is None or headers is not None:
            return original(sid, subject, reply, data, headers)
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        try:
            handler(data)
        except Exception:  # never break the client's read loop on our account
            _log.exception("liftbridge-nats: an ack handler failed")
        return done

    return process_msg


class DirectAcks:
    """One subscription's registration in its client's dispatcher.

    :meth:`attach` returns False (and changes nothing) when the client does not look
    like the nats-py this was written for; the subscription then keeps receiving its
    messages the ordinary way.
    """

    __slots__ = ("_nc", "_sid")

    def __init__(self, nc: Any) -> None:
        self._nc = nc
        self._sid: int | None = None

    @property
    def attached(self) -> bool:
        """True while messages of the subscription bypass its queue."""
        return self._sid is not None

    def attach(self, subscription: Any, handler: Handler) -> bool:
        """Send plain messages of ``subscription`` to ``handler`` from now on."""
        nc = self._nc
        sid = getattr(subscription, "_id", None)
        if self._sid is not None or not isinstance(sid, int) or not _process_msg_ok(nc):
            return False
        if not _has_counters(nc, "in_msgs", "in_bytes"):
            return False
        table = getattr(nc, _TABLE_ATTR, None)
        if not isinstance(table, _RouteTable):
            table = _RouteTable(nc._process_msg, vars(nc).get("_process_msg"))
            setattr(nc, _TABLE_ATTR, table)
            nc._process_msg = _make_dispatcher(nc, table)
            ps = _parser_of(nc)
            if ps is not None:
                table.parser = ps
                table.reader = ps.parse = _make_reader(nc, table, ps)
            else:
                _log.debug(
                    "liftbridge-nats: acks go through nats-py's parser (its parser is not "
                    "the one this version was written for)"
                )
        table.handlers[sid] = handler
        self._sid = sid
        return True

    def detach(self) -> None:
        """Stop bypassing; the last registration of a client restores its method."""
        sid, self._sid = self._sid, None
        if sid is None:
            return
        nc = self._nc
        table = getattr(nc, _TABLE_ATTR, None)
        if not isinstance(table, _RouteTable):
            return
        table.handlers.pop(sid, None)
        if not table.handlers:
            # The client's own methods again, as if we had never been there.
            ps = table.parser
            if ps is not None and vars(ps).get("parse") is table.reader:
                del ps.parse
            if table.shadowed is not None:
                nc._process_msg = table.shadowed
            elif "_process_msg" in vars(nc):
                del nc._process_msg
            delattr(nc, _TABLE_ATTR)


def is_installed(nc: Any) -> bool:
    """True while a dispatcher of ours sits on ``nc`` (for tests)."""
    return isinstance(getattr(nc, _TABLE_ATTR, None), _RouteTable)


def reads_frames(nc: Any) -> bool:
    """True while our reader stands in for the parse of ``nc``'s parser (for tests)."""
    table = getattr(nc, _TABLE_ATTR, None)
    ps = getattr(nc, "_ps", None)
    return (
        isinstance(table, _RouteTable)
        and table.reader is not None
        and vars(ps).get("parse") is table.reader
    )
