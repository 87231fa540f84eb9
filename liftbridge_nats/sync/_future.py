"""A :class:`concurrent.futures.Future` that builds its condition variable only when
someone needs it.

``publish_async`` makes one future per message, and most are settled before anybody
looks at them. The stock future's :class:`threading.Condition`, built at construction,
taken and notified at settlement and taken again to read the outcome, is then a large
part of what the blocking ``publish_async`` costs on top of the async one.

This one has no condition (nor the lists of waiters and callbacks used under it, which
a caller that keeps its futures would keep too) until a method of the stock future asks
for it (``cancel``, ``add_done_callback``, a wait that must block,
:func:`concurrent.futures.wait`, :func:`~concurrent.futures.as_completed`): from then
on it is a stock future. A future settled before that is settled under one module lock
instead, which also guards the building of conditions, so exactly one of the two
happens first: either the settlement sees the condition (and notifies through it, as
the stock future does), or whoever built the condition then finds the future settled.
Once ``FINISHED`` (a state no future leaves), its outcome is read without a lock.
"""

from __future__ import annotations

import concurrent.futures
import threading
from concurrent.futures._base import FINISHED, PENDING
from typing import Any, TypeVar

__all__ = ["LazyFuture"]

T = TypeVar("T")

# The stock future's lists of waiters and callbacks, made on first use: a future settled
# before anybody waited on it never needs them. (Each is one more object for the garbage
# collector to walk, for as long as the caller keeps the future.)
_LAZY_LISTS = frozenset({"_waiters", "_done_callbacks"})

# Held to settle a future that has no condition, or to build one. Reentrant: a
# finalizer run by the garbage collector inside either may settle a future itself.
_guard = threading.RLock()


class LazyFuture(concurrent.futures.Future[T]):
    """A :class:`concurrent.futures.Future` (it is one, and behaves as one) whose
    condition variable is built on first need, so that one nobody waited on costs a
    fraction of a stock future."""

    # Set for good, under the guard, once the condition is built. (A flag, not a look
    # into __dict__: that would make each future a dict of its own, which CPython
    # otherwise does without.)
    _condition_built = False

    def __init__(self) -> None:  # the stock attributes, but for the lazy ones
        self._state = PENDING
        self._result: Any = None
        self._exception: BaseException | None = None

    def __getattr__(self, name: str) -> Any:
        # Called only for attributes not set yet: the stock methods' first use of
        # _condition builds it, and of its lists (used under it) makes them.
        if name != "_condition" and name not in _LAZY_LISTS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        with _guard:
            try:  # made meanwhile by another thread
                return object.__getattribute__(self, name)
            except AttributeError:
                made: Any = threading.Condition() if name == "_condition" else []
                setattr(self, name, made)
                if name == "_condition":
                    self._condition_built = True
                return made

    def _settled_quietly(self, result: Any, exception: BaseException | None) -> bool:
        """Settle without a condition if none was built: True when done so."""
        if self._condition_built:
            return False
        with _guard:
            # Nobody waits and no callback is registered: both need the condition.
            # (Settled already: the stock method raises, outside the lock.)
            if not self._condition_built and self._state == PENDING:
                self._result = result
                self._exception = exception
                self._state = FINISHED
                return True
        return False

    def set_result(self, result: T) -> None:
        """Settle with ``result`` (:class:`~concurrent.futures.InvalidStateError` if
        already settled or cancelled)."""
        if not self._settled_quietly(result, None):
            super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        """Settle with ``exception`` (:class:`~concurrent.futures.InvalidStateError`
        if already settled or cancelled)."""
        if not self._settled_quietly(None, exception):
            super().set_exception(exception)

    def done(self) -> bool:
        """True once settled or cancelled."""
        return self._state == FINISHED or super().done()

    def result(self, timeout: float | None = None) -> T:
        """The result (or raise the error), waiting up to ``timeout`` seconds for it."""
        if self._state == FINISHED:
            error = self._exception
            if error is None:
                return self._result  # type: ignore[no-any-return]
            try:
                raise error
            finally:
                del error, self  # no cycle through this frame (as in the stock future)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error (None when it succeeded), waiting up to ``timeout`` seconds."""
        if self._state == FINISHED:
            return self._exception
        return super().exception(timeout)
