"""Where each gRPC call goes, and what happens when it lands on the wrong broker.

The router owns the channel pool and the metadata cache. Calls come in three kinds:
any broker (metadata, stream admin: the server forwards them to the Raft leader),
a partition's leader (subscribe, partition metadata, cursors), and a named broker
(the consumer-group coordinator).

Retries read the error's flags (:mod:`liftbridge_nats._errors`), with backoff inside
the call's deadline: a ``retriable`` error is retried until the deadline. A
leader-routed call refreshes the metadata before retrying when the error says it is
stale (``invalid_metadata``), and retries a few times on such an error even when it is
not retriable (a stream created a moment ago that this broker does not know yet). A
write whose error says it may have been applied (``maybe_stored``, a timeout) is never
sent again: that is the caller's decision.

Logged under ``liftbridge_nats.client``: partition leaders that moved and brokers that
joined or left (seen in a metadata refresh) and leader-routed calls that succeeded
after retries at INFO; each failed attempt and each refresh at DEBUG.
"""

# Per-call ``timeout`` arguments are part of the public API (seconds, retries included).

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

import grpc.aio

from ._checks import check_seconds
from ._errors import (
    ClientClosedError,
    LiftbridgeError,
    NoLeaderError,
    NoSuchStreamError,
    RpcTimeoutError,
)
from ._grpc import Backoff, ChannelPool, TLSConfig, rpc_error
from ._log import get_logger, redact
from ._metadata import Metadata, MetadataCache
from ._proto import api_pb2
from ._stream_reader import MAX_BYTES, MAX_MESSAGES

__all__ = ["Router", "Stub"]

T = TypeVar("T")
if TYPE_CHECKING:
    from ._proto.api_pb2_grpc import APIAsyncStub as Stub

    Call = Callable[[Stub, float], Awaitable[T]]

# A stream created a moment ago may not yet be known to the broker answering
# FetchMetadata: an error that only says "stale metadata" is retried this many times.
_STALE_METADATA_RETRIES = 4
# How long a broker may survey its peers before answering FetchMetadata (plus margin).
_SURVEY_TIME = 5.0
# Leader moves named in one log line, at most (a broker's death moves hundreds).
_MOVES_LOGGED = 20

_log = get_logger("client")


def _log_changes(old: Metadata, new: Metadata) -> None:
    """Log partition leaders that moved and brokers that came or went between two
    metadata snapshots (streams known to both; nothing when nothing changed)."""
    moves = []
    for name, stream in new.streams.items():
        before = old.streams.get(name)
        if before is None:
            continue
        for pid, info in stream.partitions.items():
            was = before.partitions.get(pid)
            if was is not None and was.leader != info.leader:
                moves.append(f"{name}/{pid} {was.leader or '(none)'} -> {info.leader or '(none)'}")
    if moves:
        more = f" and {len(moves) - _MOVES_LOGGED} more" if len(moves) > _MOVES_LOGGED else ""
        _log.info("partition leaders moved: %s%s", ", ".join(sorted(moves)[:_MOVES_LOGGED]), more)
    if old.brokers:
        was_ids = {b.id for b in old.brokers}
        now_ids = {b.id for b in new.brokers}
        if was_ids != now_ids:
            _log.info(
                "brokers now %s (joined: %s; left: %s)",
                ", ".join(sorted(now_ids)) or "none",
                ", ".join(sorted(now_ids - was_ids)) or "none",
                ", ".join(sorted(was_ids - now_ids)) or "none",
            )


class Router:
    """Routes calls to brokers; see the module docstring."""

    def __init__(
        self,
        seeds: tuple[str, ...],
        *,
        tls: TLSConfig | None,
        timeout: float,
        metadata_max_age: float,
        read_ahead_messages: int = MAX_MESSAGES,
        read_ahead_bytes: int = MAX_BYTES,
    ) -> None:
        self.seeds = seeds
        self.timeout = timeout
        self.pool = ChannelPool(
            tls,
            connect_timeout=timeout,
            read_ahead_messages=read_ahead_messages,
            read_ahead_bytes=read_ahead_bytes,
        )
        self.cache = MetadataCache(metadata_max_age)
        self._refreshing: asyncio.Task[Metadata] | None = None
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Close every channel."""
        self._closed = True
        task, self._refreshing = self._refreshing, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.pool.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the client is closed; open a new Client")

    # ------------------------------------------------------------------ metadata

    def addresses(self) -> list[str]:
        """Broker addresses to try, known brokers first, then the seeds."""
        known = [b.address for b in self.cache.current.brokers]
        return list(dict.fromkeys([*known, *self.seeds]))

    async def fetch_metadata(
        self,
        streams: Iterable[str] | None = None,
        groups: Iterable[str] | None = None,
        *,
        timeout: float | None = None,
    ) -> Metadata:
        """FetchMetadata from any broker and merge it into the cache."""
        stream_list = None if streams is None else list(streams)
        group_list = None if groups is None else list(groups)
        req = api_pb2.FetchMetadataRequest(streams=stream_list or [], groups=group_list or [])

        async def call(stub: Stub, left: float) -> api_pb2.FetchMetadataResponse:
            # No gRPC deadline: a broker surveys its peers for this answer until the
            # request's deadline when one is set (so a dead peer costs the whole
            # deadline and the call fails), and for 3 s when none is.
            try:
                async with asyncio.timeout(max(left, _SURVEY_TIME)):
                    return await stub.FetchMetadata(req)
            except TimeoutError:
                raise RpcTimeoutError(
                    "fetch metadata timed out; retry", code="DEADLINE_EXCEEDED"
                ) from None

        resp = await self.call_any("fetch metadata", call, timeout=timeout, idempotent=True)
        old = self.cache.current
        md = self.cache.update(resp, stream_list, group_list)
        if _log.isEnabledFor(logging.INFO):
            _log_changes(old, self.cache.current)
        _log.debug(
            "metadata: %d brokers, %d streams (asked for %s)",
            len(resp.brokers),
            len(resp.streamMetadata),
            "all streams" if stream_list is None else ", ".join(stream_list) or "brokers only",
        )
        return md

    async def await_stream_state(self, stream: str, *, exists: bool, within: float) -> None:
        """Poll every known broker until each agrees that ``stream`` exists (or not).

        Best effort: a broker that does not answer, or is still behind after
        ``within`` seconds, is left alone.
        """
        req = api_pb2.FetchMetadataRequest(streams=[stream])
        deadline = asyncio.get_running_loop().time() + within

        async def agree(address: str) -> None:
            delay = 0.005
            while asyncio.get_running_loop().time() < deadline:
                try:
                    async with asyncio.timeout(
                        max(0.1, deadline - asyncio.get_running_loop().time())
                    ):
                        resp = await self.pool.stub(address).FetchMetadata(req)
                except (grpc.aio.AioRpcError, TimeoutError):
                    return
                known = any(
                    s.name == stream and s.error == api_pb2.StreamMetadata.OK
                    for s in resp.streamMetadata
                )
                if known == exists:
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.1)

        await asyncio.gather(*(agree(address) for address in self.addresses()))

    async def refresh(self) -> Metadata:
        """Refresh every stream's metadata; concurrent callers share one fetch."""
        self._check_open()
        task = self._refreshing
        if task is None or task.done():
            task = asyncio.ensure_future(self.fetch_metadata())
            self._refreshing = task
        return await asyncio.shield(task)

    async def _refresh_quietly(self) -> None:
        # The retry loop reports the original failure, not the refresh's.
        with contextlib.suppress(LiftbridgeError):
            await self.refresh()

    async def leader_address(self, stream: str, partition: int, *, replica: bool = False) -> str:
        """Address of the partition's leader (or of a random ISR member)."""
        md = self.cache.current
        info = md.partition(stream, partition)
        if info is None or not info.leader or self.cache.stale:
            md = await self.refresh()
            info = md.partition(stream, partition)
        if info is None:
            what = "stream" if stream not in md.streams else f"partition {partition} of stream"
            raise NoSuchStreamError(
                f"no {what} {stream!r} in the cluster metadata; create it first",
                code="NOT_FOUND",
            )
        broker_id = random.choice(info.isr) if replica and info.isr else info.leader
        if not broker_id:
            raise NoLeaderError(
                f"partition {partition} of stream {stream!r} has no leader yet; retry shortly",
                code="UNAVAILABLE",
            )
        return await self.broker_address(broker_id)

    async def broker_address(self, broker_id: str) -> str:
        """Address of a broker by id (refreshing the broker list once if unknown)."""
        broker = self.cache.current.broker(broker_id)
        if broker is None:
            broker = (await self.refresh()).broker(broker_id)
        if broker is None:
            raise NoLeaderError(
                f"broker {broker_id!r} is not in the cluster metadata; retry shortly",
                code="UNAVAILABLE",
            )
        return broker.address

    # ------------------------------------------------------------------ calls

    async def call_any(
        self, what: str, fn: Call[T], *, timeout: float | None = None, idempotent: bool = False
    ) -> T:
        """Send to any broker, moving to the next one when a broker is unreachable.

        Calls sent this way are writes (stream administration, publishing, group
        membership) unless the caller says ``idempotent=True``.
        """
        addresses = self.addresses()
        offset = random.randrange(len(addresses))

        async def choose(attempt: int) -> str:
            nonlocal addresses
            if attempt and attempt % len(addresses) == 0:
                addresses = self.addresses()
            return addresses[(offset + attempt) % len(addresses)]

        return await self._retry(what, choose, fn, timeout, refresh=False, idempotent=idempotent)

    async def call_leader(
        self,
        what: str,
        stream: str,
        partition: int,
        fn: Call[T],
        *,
        timeout: float | None = None,
        replica: bool = False,
        idempotent: bool = True,
    ) -> T:
        """Send to the leader of a partition (or an ISR replica), following leader changes.

        Calls sent this way are reads or idempotent writes (a cursor set twice to the
        same offset) unless the caller says ``idempotent=False``.
        """

        async def choose(_attempt: int) -> str:
            return await self.leader_address(stream, partition, replica=replica)

        return await self._retry(what, choose, fn, timeout, refresh=True, idempotent=idempotent)

    async def call_broker(
        self, what: str, broker_id: str, fn: Call[T], *, timeout: float | None = None
    ) -> T:
        """Send to one named broker; retries only reconnect, they do not move the call."""

        async def choose(_attempt: int) -> str:
            return await self.broker_address(broker_id)

        return await self._retry(
            what, choose, fn, timeout, refresh=False, idempotent=True, attempts=3
        )

    async def _retry(
        self,
        what: str,
        choose: Callable[[int], Awaitable[str]],
        fn: Call[T],
        timeout: float | None,
        *,
        refresh: bool,
        idempotent: bool,
        attempts: int | None = None,
    ) -> T:
        self._check_open()
        if timeout is not None:
            check_seconds(timeout, "timeout")
        loop = asyncio.get_running_loop()
        backoff = Backoff(loop.time() + (self.timeout if timeout is None else timeout))
        attempt = stale = 0
        while True:
            err: LiftbridgeError
            try:
                address = "(none)"
                address = await choose(attempt)
                result = await fn(self.pool.stub(address), max(backoff.remaining(), 0.001))
                if attempt:
                    # A leader change followed is news; another broker answering a
                    # call any broker can take is routine.
                    _log.log(
                        logging.INFO if refresh else logging.DEBUG,
                        "%s succeeded on broker %s after %d failed attempts",
                        what,
                        redact(address),
                        attempt,
                    )
                return result
            except grpc.aio.AioRpcError as exc:
                if self._closed:  # close() cancelled the call (CANCELLED is never the server's)
                    raise ClientClosedError(
                        f"{what} did not finish: the client was closed meanwhile"
                    ) from None
                err = rpc_error(exc, what)
            except LiftbridgeError as exc:
                # Raised while routing (from possibly lagging metadata) or by ``fn``.
                err = exc
            attempt += 1
            if err.retriable:
                retry = idempotent or not err.maybe_stored
            else:
                # Fresh metadata can only cure a call that metadata routed.
                retry = refresh and err.invalid_metadata and stale < _STALE_METADATA_RETRIES
                stale += retry
            if self._closed or not retry or (attempts is not None and attempt >= attempts):
                raise err
            _log.debug(
                "%s: attempt %d on broker %s failed, retrying: %s",
                what,
                attempt,
                redact(address),
                err,
            )
            if not await backoff.sleep():
                raise err
            if refresh and err.invalid_metadata:
                await self._refresh_quietly()
