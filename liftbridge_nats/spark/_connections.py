"""Connections kept per Python process: one Client, NATS connection and Publisher per
set of options, on the process's one event loop.

PySpark reuses a Python worker process for task after task (``spark.python.worker.reuse``,
true by default) and keeps the driver-side planning processes of a streaming query
alive across micro-batches. Connecting afresh in every call cost a TCP (and TLS)
handshake, a NATS handshake and a metadata fetch per batch; instead every call of a
process runs on the shared background loop of :mod:`liftbridge_nats.sync._portal` and
takes its connections from here.

* Keys are the connection options (brokers or NATS servers, timeout, TLS, credentials;
  for a Publisher also its ack timeout and in-flight bound), so queries with other
  options never share a connection.
* A connection found closed (nats-py gave up reconnecting, or it was discarded after a
  failure) is replaced on next use; callers :func:`discard` one that failed under them.
* Everything is closed on the loop when the loop shuts down (interpreter exit, or
  ``close_shared()``); a process that ends without running exit hooks (PySpark's
  forked workers end with ``os._exit``) has its sockets closed by the OS. Every
  publish was acked before its task returned, so nothing is in flight then.
* A process forked from one that had connections starts with none: they belong to the
  parent's loop, whose thread does not exist in the child.

All functions but :func:`opened` run on the loop (from coroutines driven by
:func:`liftbridge_nats.spark._io.run` or the portal). One lock per key makes concurrent
first uses (tasks of one process, gathered look-ups) open a single connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from liftbridge_nats import Client, Publisher
from liftbridge_nats._log import get_logger
from liftbridge_nats.sync import _portal

from . import _io
from ._security import GrpcTls, NatsAuth

__all__ = [
    "client",
    "close_all",
    "close_client",
    "discard",
    "nats",
    "opened",
    "publisher",
]

_log = get_logger("spark")


@dataclass(eq=False)
class _Cache:
    """The connections living on one loop of one process."""

    loop: asyncio.AbstractEventLoop
    clients: dict[tuple[Any, ...], Client] = field(default_factory=dict)
    nats: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    # Each Publisher beside the nats-py connection it publishes on.
    publishers: dict[tuple[Any, ...], tuple[Publisher[Any, Any], Any]] = field(default_factory=dict)
    locks: dict[tuple[Any, ...], asyncio.Lock] = field(default_factory=dict)
    unregister: Callable[[], None] | None = None

    def lock(self, key: tuple[Any, ...]) -> asyncio.Lock:
        found = self.locks.get(key)
        if found is None:
            found = self.locks[key] = asyncio.Lock()
        return found


_cache: _Cache | None = None
# Connections opened by this process, by kind ("client", "nats", "publisher").
_opened: Counter[str] = Counter()
# A forked child's inherited connections: kept referenced, never used or closed (they
# are the parent's; collecting them would report tasks of a loop that never runs).
_orphans: list[_Cache] = []


def _current() -> _Cache:
    """This loop's cache, made (and its closing registered) on first use."""
    global _cache
    loop = asyncio.get_running_loop()
    if _cache is None or _cache.loop is not loop:
        if _cache is not None:
            _log.debug("the event loop changed: the cached connections are dropped")
        _cache = _Cache(loop)
        # Only the shared loop closes through the portal; whoever runs another loop
        # (a test) calls close_all() on it.
        if threading.current_thread().name == _portal.THREAD_NAME:
            with contextlib.suppress(_portal.PortalClosedError):
                _cache.unregister = _portal.on_close(close_all)
    return _cache


def _client_key(brokers: tuple[str, ...], timeout: float, tls: GrpcTls | None) -> tuple[Any, ...]:
    return ("client", brokers, timeout, tls)


def _nats_key(
    servers: tuple[str, ...], timeout: float, auth: NatsAuth, reconnect: bool
) -> tuple[Any, ...]:
    return ("nats", servers, timeout, auth, reconnect)


async def client(brokers: tuple[str, ...], timeout: float, tls: GrpcTls | None) -> Client:
    """The process's connected :class:`~liftbridge_nats.Client` for these options.

    Raises :class:`~liftbridge_nats.NotConnectedError` (naming the option to check)
    when no broker answers.
    """
    cache = _current()
    key = _client_key(brokers, timeout, tls)
    async with cache.lock(key):
        found = cache.clients.get(key)
        if found is not None:
            return found
        made = await _io.connect_client(brokers, timeout, tls)
        cache.clients[key] = made
        _opened["client"] += 1
        return made


async def nats(
    servers: tuple[str, ...], timeout: float, auth: NatsAuth, *, reconnect: bool = True
) -> Any:
    """The process's nats-py connection for these options, replaced once closed.

    ``reconnect=False`` is a separate connection that fails at the first refusal: the
    driver's check that NATS answers, which must not wait out reconnect attempts.
    """
    cache = _current()
    key = _nats_key(servers, timeout, auth, reconnect)
    async with cache.lock(key):
        found = cache.nats.get(key)
        if found is not None and not found.is_closed:
            return found
        made = await _io.connect_nats(servers, timeout, auth, reconnect=reconnect)
        cache.nats[key] = made
        _opened["nats"] += 1
        return made


async def publisher(
    servers: tuple[str, ...],
    timeout: float,
    auth: NatsAuth,
    *,
    ack_timeout: float,
    max_inflight: int,
) -> Publisher[Any, Any]:
    """The process's started Publisher over :func:`nats`'s connection.

    Replaced when it, or its NATS connection, was closed.
    """
    cache = _current()
    key = ("publisher", _nats_key(servers, timeout, auth, True), ack_timeout, max_inflight)
    async with cache.lock(key):
        found = cache.publishers.get(key)
        if found is not None:
            pub, on = found
            if not pub.closed and not on.is_closed:
                return pub
            await _quietly(pub.close)
        nc = await nats(servers, timeout, auth)
        made: Publisher[Any, Any] = Publisher(
            nc, ack_timeout=ack_timeout, max_inflight=max_inflight
        )
        await made.start()
        cache.publishers[key] = (made, nc)
        _opened["publisher"] += 1
        return made


async def discard(connection: Any) -> None:
    """Forget ``connection`` (a Client, nats-py connection or Publisher) and close it,
    so that the next use opens a new one. Unknown objects are ignored."""
    cache = _current()
    for key, (pub, nc) in list(cache.publishers.items()):
        if connection is pub or connection is nc:
            del cache.publishers[key]
            await _quietly(pub.close)
    for table in (cache.clients, cache.nats):
        for key, value in list(table.items()):
            if value is connection:
                del table[key]
                await _quietly(value.close)


async def close_client(brokers: tuple[str, ...], timeout: float, tls: GrpcTls | None) -> None:
    """Close and forget the client for these options, if this loop has one."""
    cache = _current()
    found = cache.clients.pop(_client_key(brokers, timeout, tls), None)
    if found is not None:
        await _quietly(found.close)


async def close_all() -> None:
    """Close every connection of this loop's cache (publishers first, then NATS)."""
    global _cache
    cache = _cache
    if cache is None or cache.loop is not asyncio.get_running_loop():
        return
    _cache = None
    if cache.unregister is not None:
        cache.unregister()
    for pub, _ in cache.publishers.values():
        await _quietly(pub.close)
    closers = [*cache.clients.values(), *cache.nats.values()]
    await asyncio.gather(*(_quietly(c.close) for c in closers))


def opened() -> dict[str, int]:
    """Connections this process has opened so far, by kind (for tests and benchmarks)."""
    return dict(_opened)


async def _quietly(close: Callable[[], Awaitable[Any]]) -> None:
    # A connection that is already broken may fail to close cleanly; it is being
    # dropped either way.
    try:
        await asyncio.wait_for(close(), 5.0)
    except Exception as exc:
        _log.debug("closing a cached connection: %s", type(exc).__name__)


def _after_fork_in_child() -> None:
    global _cache
    if _cache is not None:
        _orphans.append(_cache)
    _cache = None
    _opened.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
