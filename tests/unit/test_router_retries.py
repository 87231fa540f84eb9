"""The router's retries read the error flags (no network: each call is a function that
fails as told; the channels it is handed are never used)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import grpc
import grpc.aio
import pytest

from liftbridge_nats import (
    ClientClosedError,
    InvalidArgumentError,
    LiftbridgeError,
    NoSuchStreamError,
    NotLeaderError,
    RpcTimeoutError,
)
from liftbridge_nats._router import Router

if TYPE_CHECKING:
    from liftbridge_nats._router import Stub


@pytest.fixture
async def router() -> AsyncIterator[Router]:
    r = Router(("127.0.0.1:1", "127.0.0.1:2"), tls=None, timeout=2.0, metadata_max_age=30)
    yield r
    await r.close()


def failing(
    *errors: BaseException,
) -> tuple[list[str], Callable[[Stub, float], Awaitable[str]]]:
    """A call that raises ``errors`` one by one, then returns "ok"."""
    seen: list[str] = []
    queue = list(errors)

    async def call(stub: Stub, left: float) -> str:
        assert left > 0
        seen.append("attempt")
        if queue:
            raise queue.pop(0)
        return "ok"

    return seen, call


def deadline_exceeded() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(), grpc.aio.Metadata(), "slow"
    )


async def test_a_read_is_retried_after_a_timeout(router: Router) -> None:
    seen, call = failing(deadline_exceeded())
    assert await router.call_any("read", call, idempotent=True) == "ok"
    assert len(seen) == 2


async def test_a_write_that_may_have_been_applied_is_not_sent_again(router: Router) -> None:
    seen, call = failing(deadline_exceeded())
    with pytest.raises(RpcTimeoutError) as err:
        await router.call_any("write", call)
    assert err.value.maybe_stored and err.value.retriable
    assert len(seen) == 1


async def test_a_write_is_retried_when_it_was_certainly_not_applied(router: Router) -> None:
    seen, call = failing(NotLeaderError("moved"), NotLeaderError("moved"))
    assert await router.call_any("write", call) == "ok"
    assert len(seen) == 3


@pytest.mark.parametrize(
    "error",
    [InvalidArgumentError("bad"), NoSuchStreamError("gone")],
    ids=lambda e: type(e).__name__,
)
async def test_not_retriable_errors_end_the_call(router: Router, error: LiftbridgeError) -> None:
    # NoSuchStreamError only says "stale metadata": fresh metadata cannot change what a
    # broker picked at random answered, so only leader-routed calls retry it.
    seen, call = failing(error)
    with pytest.raises(type(error)):
        await router.call_any("read", call, idempotent=True)
    assert len(seen) == 1


async def test_retriable_errors_are_retried_until_the_deadline(router: Router) -> None:
    seen, call = failing(*(NotLeaderError("moved") for _ in range(1000)))
    with pytest.raises(NotLeaderError):
        await router.call_any("read", call, idempotent=True, timeout=0.5)
    assert 3 <= len(seen) < 20


async def test_a_call_cut_short_by_close_says_so() -> None:
    r = Router(("127.0.0.1:1",), tls=None, timeout=2.0, metadata_max_age=30)

    async def call(stub: Stub, left: float) -> str:
        await r.close()
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.CANCELLED, grpc.aio.Metadata(), grpc.aio.Metadata(), "closed"
        )

    with pytest.raises(ClientClosedError):
        await r.call_any("read", call, idempotent=True)
