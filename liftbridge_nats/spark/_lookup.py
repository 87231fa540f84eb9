"""Driver-side look-ups: which streams a query reads, how far each partition goes, and
the offsets behind ``earliest`` and timestamps.

:class:`Lookups` wraps one connected :class:`~liftbridge_nats.Client` for the
duration of one planning step; the client is the process's cached one
(:mod:`._connections`), so a plan after the first costs no new connection. Liftbridge has no
offset-for-time or oldest-offset call: both are answered by subscribing at that
position (bounded by the high watermark) and taking the first message's offset.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

from liftbridge_nats import (
    BrokerUnavailableError,
    Client,
    InvalidArgumentError,
    NoSuchStreamError,
    NotConnectedError,
    PartitionPausedError,
    RpcError,
    StartPosition,
    StopPosition,
    StreamInfo,
)

from . import _connections
from ._options import ReadOptions, StreamSelection
from ._planning import Lookup, Offsets
from ._positions import EARLIEST, At, Position
from ._security import GrpcTls

__all__ = ["Lookups", "first_offset", "lookups", "sink_target"]

# Subscriptions opened at once when looking offsets up (each has a reader thread).
_PARALLEL_LOOKUPS = 8


def _unknown_streams(
    option: str, names: Iterable[str], brokers: tuple[str, ...]
) -> InvalidArgumentError:
    missing = ", ".join(repr(n) for n in sorted(names))
    return InvalidArgumentError(
        f"option {option!r}: no stream named {missing} on brokers {','.join(brokers)}; "
        "check the name or create the stream first."
    )


async def first_offset(
    client: Client,
    stream: str,
    partition: int,
    position: Position,
    hw: int,
    *,
    resume: bool,
    wait: float,
) -> int:
    """The first offset stored from ``position`` (:data:`EARLIEST` or an :class:`At`)
    up to ``hw``; ``hw + 1`` when there is none.

    A partition whose every message was removed (retention deletes whole segments)
    answers a subscription from its oldest offset by waiting for the next message:
    when none comes within ``wait`` seconds, nothing is stored up to ``hw``.
    """
    if isinstance(position, At):
        sub = client.subscribe(
            stream,
            partition=partition,
            start_position=StartPosition.TIMESTAMP,
            start_time=position.ms / 1000,
            stop_position=StopPosition.OFFSET,
            stop_offset=hw,
            resume=resume,
        )
    else:
        assert position == EARLIEST, position
        sub = client.subscribe(
            stream,
            partition=partition,
            start_position=StartPosition.EARLIEST,
            stop_position=StopPosition.OFFSET,
            stop_offset=hw,
            resume=resume,
        )
    try:
        async with sub, asyncio.timeout(wait):
            async for msg in sub:
                return msg.offset
    except TimeoutError:
        pass
    return hw + 1


class Lookups:
    """Look-ups of one planning step, over one connected client."""

    def __init__(self, client: Client, opts: ReadOptions) -> None:
        self._client = client
        self._opts = opts
        names = opts.selection.names
        self._option = "streamPattern" if not names else "stream" if len(names) == 1 else "streams"

    async def streams(self, selection: StreamSelection, *, must_exist: bool = True) -> list[str]:
        """The existing streams ``selection`` covers, sorted.

        Named streams that do not exist are an error when ``must_exist`` (a query
        starting); a pattern may match nothing.
        """
        if selection.pattern is None:
            meta = await self._client.fetch_metadata(list(selection.names))
            missing = [n for n in selection.names if n not in meta.streams]
            if missing and must_exist:
                raise _unknown_streams(self._option, missing, self._opts.brokers)
            return sorted(n for n in selection.names if n in meta.streams)
        meta = await self._client.fetch_metadata()
        return sorted(n for n in meta.streams if selection.matches(n))

    async def _high_watermarks(self, stream: str) -> dict[int, int]:
        client, resume = self._client, self._opts.resume_paused
        try:
            info = await client.stream_info(stream, refresh=True)
        except NoSuchStreamError:
            raise _unknown_streams(self._option, [stream], self._opts.brokers) from None
        ids = sorted(info.partitions)
        paused = [p for p in ids if info.partitions[p].paused]
        if paused and resume:
            # A no-op for partitions that run (v1.9.0 metadata may still say paused).
            await client.resume_stream(stream, paused)
        try:
            parts = await asyncio.gather(*(client.fetch_partition_metadata(stream, p) for p in ids))
        except RpcError:
            if paused and not resume:
                raise PartitionPausedError(
                    f"stream {stream!r}: partition(s) {paused} are paused and cannot be "
                    "read; resume them, or set option 'resumePaused' to true.",
                    code="FAILED_PRECONDITION",
                ) from None
            raise
        return {p: part.high_watermark for p, part in zip(ids, parts, strict=True)}

    async def high_watermarks(self, streams: Iterable[str]) -> Offsets:
        """The high watermark (-1 when empty) of every partition, asked of its leader.

        Metadata from an arbitrary broker can lag the leader's high watermark; the
        leader's own answer is exact, which is what makes a planned read a true
        snapshot. A paused partition (auto-paused when idle, or paused by hand) can be
        neither asked nor read: with ``resumePaused`` it is resumed first, otherwise
        the read fails saying so.
        """
        names = list(streams)
        found = await asyncio.gather(*(self._high_watermarks(s) for s in names))
        return dict(zip(names, found, strict=True))

    async def offsets(
        self, wanted: Iterable[Lookup], high_watermarks: Offsets
    ) -> dict[Lookup, int]:
        """The offset behind each ``(stream, partition, position)`` of ``wanted``."""
        gate = asyncio.Semaphore(_PARALLEL_LOOKUPS)

        async def one(item: Lookup) -> tuple[Lookup, int]:
            stream, partition, position = item
            async with gate:
                hw = high_watermarks[stream][partition]
                offset = await first_offset(
                    self._client,
                    stream,
                    partition,
                    position,
                    hw,
                    resume=self._opts.resume_paused,
                    wait=self._opts.timeout,
                )
                return item, offset

        return dict(await asyncio.gather(*(one(w) for w in sorted(wanted, key=str))))


@asynccontextmanager
async def lookups(opts: ReadOptions) -> AsyncIterator[Lookups]:
    """A :class:`Lookups` over the process's client for the read's options.

    A broker that cannot be reached drops the client, so that the next step connects
    again.
    """
    client = await _connections.client(opts.brokers, opts.timeout, opts.tls)
    async with _dropped_if_unreachable(client):
        yield Lookups(client, opts)


@asynccontextmanager
async def _dropped_if_unreachable(client: Client) -> AsyncIterator[None]:
    try:
        yield
    except (BrokerUnavailableError, NotConnectedError):
        await _connections.discard(client)
        raise


async def sink_target(
    brokers: tuple[str, ...], stream: str, rpc_timeout: float, tls: GrpcTls | None
) -> StreamInfo:
    """The stream a sink writes to, with any paused partition resumed first.

    Liftbridge drops NATS publishes to a paused partition (auto-paused after being
    idle, or paused by hand) and resumes it only on a gRPC request; without this every
    task writing there would fail on missing acks.
    """
    client = await _connections.client(brokers, rpc_timeout, tls)
    async with _dropped_if_unreachable(client):
        try:
            info = await client.stream_info(stream, refresh=True)
        except NoSuchStreamError:
            raise _unknown_streams("stream", [stream], brokers) from None
        paused = [p.id for p in info.partitions.values() if p.paused]
        if paused:
            await client.resume_stream(stream, paused)
        return info
