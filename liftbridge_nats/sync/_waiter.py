"""A one-shot result for the one thread that blocks on it: lighter than a Future.

The blocking ``publish`` waits for one ack and nobody else ever looks at it, so it
needs neither a :class:`concurrent.futures.Future`'s condition variable, nor its
callbacks, nor its cancellation: one lock, taken at creation, released by the loop
with the outcome, and taken again by the waiting thread (an acquire that Ctrl-C
interrupts).
"""

from __future__ import annotations

import _thread
from typing import Generic, TypeVar

__all__ = ["Waiter"]

T = TypeVar("T")


class Waiter(Generic[T]):
    """Set once (on the loop), waited for once (by the thread that made it)."""

    __slots__ = ("_done", "_error", "_lock", "_result")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self._done = False
        self._result: T | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        """True once the outcome is set."""
        return self._done

    def set_result(self, result: T) -> None:
        """Set the outcome to ``result`` (ignored once set)."""
        if not self._done:
            self._result, self._done = result, True
            self._lock.release()

    def set_exception(self, error: BaseException) -> None:
        """Set the outcome to ``error`` (ignored once set)."""
        if not self._done:
            self._error, self._done = error, True
            self._lock.release()

    def wait(self) -> T:
        """Block until the outcome is set; return it or raise it."""
        self._lock.acquire()
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]  # set, possibly to None
