"""Blocking iterators over the async read side: a subscription, and any async iterator.

A :class:`Subscription` takes messages from the loop in batches (what the async
subscription has buffered, after waiting for the first), so that reading costs one
cross-thread hop per batch; it has no commits, so a batch taken and not yet iterated
changes nothing on the server.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from anyio.from_thread import BlockingPortal

from .._messages import K, Message, V
from ._bridge import run
from ._portal import check_blocking_allowed, submit, wait

if TYPE_CHECKING:
    from .._subscription import Subscription as AsyncSubscription
    from .._subscription import SubscriptionOptions

__all__ = ["BlockingIterator", "Subscription"]

T = TypeVar("T")

# The most messages one hop to the loop brings back.
_BATCH = 1024


class Subscription(Generic[V, K]):
    """An iterator of :class:`~liftbridge_nats.Message` from one partition, blocking
    for the next message; made by :meth:`Client.subscribe`.

    Use it as ``with client.subscribe(...) as sub: for msg in sub: ...``: the block's
    end closes the server stream, as :meth:`close` does. The iteration ends at the
    subscription's stop position, or once closed. Iterate it from one thread at a
    time.
    """

    def __init__(self, aio: AsyncSubscription[V, K], portal: BlockingPortal) -> None:
        self._aio = aio
        self._portal = portal
        self._buffer: deque[Message[V, K]] = deque()
        self._last_offset: int | None = None

    def __enter__(self) -> Subscription[V, K]:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def aio(self) -> AsyncSubscription[V, K]:
        """The async :class:`liftbridge_nats.Subscription` underneath; use it only on
        the SDK's loop."""
        return self._aio

    @property
    def options(self) -> SubscriptionOptions:
        """What was asked for: stream, partition, start and stop."""
        return self._aio.options

    @property
    def last_offset(self) -> int | None:
        """Offset of the last message the iteration returned, None before the first."""
        return self._last_offset

    @property
    def closed(self) -> bool:
        """True once the iteration has ended and every taken message was returned."""
        return self._aio.closed and not self._buffer

    def start(self) -> None:
        """Subscribe now (see :meth:`liftbridge_nats.Subscription.start`)."""
        run(self._portal, self._aio.start)

    def close(self) -> None:
        """Stop reading and close the server stream (idempotent)."""
        self._buffer.clear()
        run(self._portal, self._aio.aclose)

    def __iter__(self) -> Subscription[V, K]:
        return self

    def __next__(self) -> Message[V, K]:
        if not self._buffer:
            check_blocking_allowed(
                "iterating a liftbridge_nats.sync.Subscription",
                "`async for message in subscription` (liftbridge_nats.Subscription)",
            )
            self._buffer.extend(wait(submit(self._take, _BATCH, portal=self._portal)))
            if not self._buffer:
                raise StopIteration
        message = self._buffer.popleft()
        self._last_offset = message.offset
        return message

    async def _take(self, limit: int) -> list[Message[V, K]]:
        """The next message (waiting for it), and what else is buffered (on the loop)."""
        try:
            first = await anext(self._aio)
        except StopAsyncIteration:
            return []
        return [first, *self._aio.take_many(limit - 1)]


class BlockingIterator(Generic[T]):
    """Blocking iteration over an async iterator of the SDK (one hop per item), with
    ``start``/``close`` and ``with`` as its async twin has; made by
    :meth:`Client.activity`."""

    def __init__(
        self,
        aio: AsyncIterator[T],
        portal: BlockingPortal,
        start: Callable[[], Awaitable[None]],
        close: Callable[[], Awaitable[None]],
    ) -> None:
        self._aio = aio
        self._portal = portal
        self._start = start
        self._close = close

    def __enter__(self) -> BlockingIterator[T]:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Subscribe now."""
        run(self._portal, self._start)

    def close(self) -> None:
        """Stop reading (idempotent)."""
        run(self._portal, self._close)

    def __iter__(self) -> BlockingIterator[T]:
        return self

    def __next__(self) -> T:
        check_blocking_allowed(
            f"iterating a {type(self._aio).__name__} blocking",
            f"`async for item in {type(self._aio).__name__}`",
        )
        found, item = wait(submit(self._next, portal=self._portal))
        if not found:
            raise StopIteration
        return item  # type: ignore[return-value]  # found: an item

    async def _next(self) -> tuple[bool, T | None]:
        try:
            return True, await anext(self._aio)
        except StopAsyncIteration:
            return False, None
