"""How the blocking classes call their async twins: one helper, one naming rule.

Every blocking method runs its async twin's method on the shared loop through
:func:`run` (coroutines) or :func:`on_loop` (plain methods, run where the object's
state lives). Inside a running event loop both refuse at once, naming the blocking call
and the async one to await instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from anyio.from_thread import BlockingPortal

from ._portal import check_blocking_allowed, submit, wait

__all__ = ["on_loop", "run"]

P = ParamSpec("P")
T = TypeVar("T")


def run(
    portal: BlockingPortal,
    fn: Callable[P, Awaitable[T]],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """``await fn(*args, **kwargs)`` on ``portal``'s loop, blocking this thread.

    ``fn`` is a bound method of an async object (``Client.create_stream``...): its
    class and name make the in-loop error's advice.
    """
    _check(fn)

    async def go() -> T:
        return await fn(*args, **kwargs)

    return wait(submit(go, portal=portal))


def on_loop(
    portal: BlockingPortal,
    fn: Callable[P, T],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """``fn(*args, **kwargs)``, a plain method of an async object, on ``portal``'s loop
    thread (where that object's state lives), blocking this thread."""
    _check(fn)

    async def go() -> T:
        return fn(*args, **kwargs)

    return wait(submit(go, portal=portal))


def _check(fn: Callable[..., object]) -> None:
    owner = type(getattr(fn, "__self__", None)).__name__
    name = getattr(fn, "__name__", "call")
    check_blocking_allowed(
        f"liftbridge_nats.sync.{owner}.{name}()", f"liftbridge_nats.{owner}.{name}"
    )
