"""The Spark source's only contact with Liftbridge: coroutines over the public SDK.

Everything here is async and is driven from Spark's synchronous callbacks by one
event loop per call (``asyncio.run``) or per task (``asyncio.Runner``). No protobuf,
no envelopes: the gRPC :class:`~liftbridge_nats.client.Client` reads and looks up
metadata, the NATS-native :class:`~liftbridge_nats.publisher.Publisher` writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from liftbridge_nats.client import Client
from liftbridge_nats.errors import (
    InvalidArgumentError,
    NoSuchStreamError,
    NotConnectedError,
    PartitionPausedError,
    RpcError,
    RpcTimeoutError,
)
from liftbridge_nats.messages import Message, StartPosition, StopPosition
from liftbridge_nats.metadata import StreamInfo
from liftbridge_nats.subscription import Subscription

from ._options import ReadOptions
from ._planning import OffsetRange

__all__ = [
    "PartitionReader",
    "connect_nats",
    "fetch_high_watermarks",
    "iter_range",
    "probe_nats",
    "redact_url",
    "resolve_timestamp",
    "run",
    "sink_target",
]

_T = TypeVar("_T")
_log = logging.getLogger("liftbridge_nats.spark")


def _unknown_stream(stream: str, brokers: tuple[str, ...]) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"option 'stream': no stream named {stream!r} on brokers {','.join(brokers)}; "
        "check the name or create the stream first."
    )


@asynccontextmanager
async def _client(brokers: tuple[str, ...], rpc_timeout: float) -> AsyncIterator[Client]:
    """A connected Client; no broker answering is reported against ``brokers``."""
    client = Client(brokers, timeout=rpc_timeout)
    try:
        await client.connect()
    except NotConnectedError as exc:
        raise NotConnectedError(
            f"option 'brokers': no Liftbridge broker answered at {','.join(brokers)} ({exc}); "
            "check the addresses (the gRPC port, not NATS's)."
        ) from None
    try:
        yield client
    finally:
        await client.close()


def redact_url(url: str) -> str:
    """``url`` with any user-info (user, password, token) replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


async def connect_nats(
    servers: tuple[str, ...], rpc_timeout: float, *, reconnect: bool = True
) -> Any:
    """A nats-py connection; failing to connect is reported against ``nats_url``.

    ``reconnect=False`` gives up at the first refusal (a quick probe); a publishing
    task rides out a short NATS outage instead. Messages never show credentials
    carried in the URL.
    """
    import nats.aio.client
    import nats.errors

    errors: list[Exception] = []

    async def remember(exc: Exception) -> None:
        # nats-py logs every failed attempt with a traceback by default; the outcome
        # is reported once, below or by the Publisher.
        errors.append(exc)
        _log.debug("NATS connection error: %s", type(exc).__name__)

    # nats-py annotates its timeouts as int but takes seconds as floats.
    options: dict[str, Any] = {
        "servers": list(servers),
        "connect_timeout": rpc_timeout,
        "allow_reconnect": reconnect,
        "max_reconnect_attempts": 3 if reconnect else 1,
        "reconnect_time_wait": 2.0 if reconnect else 0.1,
        "error_cb": remember,
    }
    nc = nats.aio.client.Client()
    try:
        await nc.connect(**options)
        return nc
    except Exception as exc:
        # A refused connection leaves its socket open unless the client is closed.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 1.0)
        where = ",".join(redact_url(s) for s in servers)
        causes = [*errors, exc]
        if any(
            isinstance(e, nats.errors.AuthorizationError) or "authoriz" in str(e).lower()
            for e in causes
        ):
            raise NotConnectedError(
                f"option 'nats_url': NATS at {where} refused the credentials (authorization "
                "violation); check the user/password, token or NKey."
            ) from None
        detail = f"{type(exc).__name__}: {exc}"
        for s in servers:
            detail = detail.replace(s, redact_url(s))
        raise NotConnectedError(
            f"option 'nats_url': cannot connect to NATS at {where} ({detail}); check the URL "
            "and that the server runs."
        ) from None


async def probe_nats(servers: tuple[str, ...], rpc_timeout: float) -> None:
    """Connect once and close: lets a write with a bad ``nats_url`` fail on the driver."""
    nc = await connect_nats(servers, rpc_timeout, reconnect=False)
    await nc.close()


async def sink_target(brokers: tuple[str, ...], stream: str, rpc_timeout: float) -> StreamInfo:
    """The stream a sink writes to, with any paused partition resumed first.

    Liftbridge drops NATS publishes to a paused partition (auto-paused after being
    idle, or paused by hand) and resumes it only on a gRPC request; without this every
    task writing there would fail on missing acks.
    """
    async with _client(brokers, rpc_timeout) as client:
        try:
            info = await client.stream_info(stream, refresh=True)
        except NoSuchStreamError:
            raise _unknown_stream(stream, brokers) from None
        paused = [p.id for p in info.partitions.values() if p.paused]
        if paused:
            await client.resume_stream(stream, paused)
        return info


async def fetch_high_watermarks(
    brokers: tuple[str, ...], stream: str, rpc_timeout: float, *, resume_paused: bool = True
) -> dict[int, int]:
    """The high watermark of every partition, each asked of its leader.

    Metadata from an arbitrary broker can lag the leader's high watermark; the leader's
    own answer is exact, which is what makes a planned read a true snapshot. A paused
    partition (auto-paused when idle, or paused by hand) can be neither asked nor read:
    with ``resume_paused`` it is resumed first, otherwise the read fails saying so.
    """
    async with _client(brokers, rpc_timeout) as client:
        try:
            info = await client.stream_info(stream, refresh=True)
        except NoSuchStreamError:
            raise _unknown_stream(stream, brokers) from None
        ids = sorted(info.partitions)
        paused = [p for p in ids if info.partitions[p].paused]
        if paused and resume_paused:
            # A no-op for partitions that run (v1.9.0 metadata may still say paused).
            await client.resume_stream(stream, paused)
        try:
            parts = await asyncio.gather(*(client.fetch_partition_metadata(stream, p) for p in ids))
        except RpcError:
            if paused and not resume_paused:
                raise PartitionPausedError(
                    f"stream {stream!r}: partition(s) {paused} are paused and cannot be "
                    "read; resume them, or set option 'resumePaused' to true.",
                    code="FAILED_PRECONDITION",
                ) from None
            raise
        return {p: part.high_watermark for p, part in zip(ids, parts, strict=True)}


async def resolve_timestamp(
    opts: ReadOptions, high_watermarks: Mapping[int, int], timestamp_ms: int
) -> dict[int, int]:
    """Per partition, the first offset stored at or after ``timestamp_ms``.

    Liftbridge has no offset-for-time lookup call, so this subscribes at the timestamp
    (bounded by the high watermark) and takes the first message's offset; a partition
    with nothing that recent gets ``hw + 1`` (an empty range).
    """
    ns = timestamp_ms * 1_000_000
    out: dict[int, int] = {}
    async with _client(opts.brokers, opts.timeout) as client:
        for partition, hw in sorted(high_watermarks.items()):
            out[partition] = hw + 1
            if hw < 0:
                continue
            sub = client.subscribe(
                opts.stream,
                partition=partition,
                start_position=StartPosition.TIMESTAMP,
                start_time=ns,
                stop_position=StopPosition.OFFSET,
                stop_offset=hw,
            )
            async with sub:
                async for msg in sub:
                    out[partition] = msg.offset
                    break
    return out


class PartitionReader:
    """Reads one :class:`OffsetRange` in chunks, on an event loop its caller drives."""

    def __init__(
        self, brokers: tuple[str, ...], timeout: float, rng: OffsetRange, *, resume: bool = True
    ) -> None:
        self._rng = rng
        self._resume = resume
        self._timeout = timeout
        self._client = Client(brokers, timeout=timeout)
        self._sub: Subscription | None = None
        self._next = rng.from_offset
        self.done = rng.count == 0

    async def open(self) -> None:
        """Connect and subscribe at the range's first offset."""
        if self.done:
            return
        await self._client.connect()
        self._sub = self._client.subscribe(
            self._rng.stream,
            partition=self._rng.partition,
            start_position=StartPosition.OFFSET,
            start_offset=self._rng.from_offset,
            stop_position=StopPosition.OFFSET,
            stop_offset=self._rng.until_offset - 1,
            # Paused after planning (auto-pause when idle): resume rather than fail.
            resume=self._resume,
        )
        await self._sub.start()

    async def chunk(self, size: int) -> list[Message]:
        """Up to ``size`` more messages of the range; sets :attr:`done` at its end."""
        out: list[Message] = []
        sub = self._sub
        if sub is None or self.done:
            self.done = True
            return out
        last = self._rng.until_offset - 1
        silence = self._timeout * 3
        loop = asyncio.get_running_loop()
        try:
            # Every message up to the planned end is committed, so a long silence means
            # something is wrong (a leader that never came back): fail the task and let
            # Spark retry it rather than hang. One deadline, pushed back per message.
            async with asyncio.timeout(silence) as deadline:
                while len(out) < size:
                    try:
                        msg = await anext(sub)
                    except StopAsyncIteration:
                        self.done = True
                        break
                    deadline.reschedule(loop.time() + silence)
                    if msg.offset > last:
                        # Compaction can remove the range's last offset; a later one
                        # ends the range too.
                        self.done = True
                        break
                    self._next = msg.offset + 1
                    out.append(msg)
                    if msg.offset >= last:
                        self.done = True
                        break
        except TimeoutError:
            raise RpcTimeoutError(
                f"stream {self._rng.stream!r} partition {self._rng.partition}: no message "
                f"for {silence:.0f} s while reading offset {self._next} of "
                f"[{self._rng.from_offset}, {self._rng.until_offset}); check the "
                "partition's leader, or raise the 'timeout' option.",
                code="DEADLINE_EXCEEDED",
            ) from None
        return out

    async def close(self) -> None:
        """Close the subscription and the client's channels."""
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.aclose()
        await self._client.close()


def iter_range(
    brokers: tuple[str, ...],
    timeout: float,
    rng: OffsetRange,
    chunk_size: int,
    *,
    resume: bool = True,
) -> Iterator[list[Message]]:
    """Chunks of messages of ``rng``, pulled on one event loop owned by this generator.

    ``asyncio.Runner`` keeps a single loop across the chunks (the subscription lives
    on it) and closes it when the generator finishes or is closed early, e.g. by a
    ``limit()`` that needs no more rows.
    """
    if rng.count == 0:
        return
    with asyncio.Runner() as runner:
        reader = PartitionReader(brokers, timeout, rng, resume=resume)
        try:
            runner.run(reader.open())
            while not reader.done:
                msgs = runner.run(reader.chunk(chunk_size))
                if msgs:
                    yield msgs
        finally:
            runner.run(reader.close())


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run one SDK coroutine on a fresh event loop (driver-side planning calls)."""
    return asyncio.run(coro)
