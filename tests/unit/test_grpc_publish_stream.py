"""The gRPC PublishAsync stream's futures end with an Ack or a typed error, never with
anything else: each interleaving of answers, timeouts and stream ends arranged over a
stream in memory."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio
import pytest

from liftbridge_nats import (
    Ack,
    AckLostError,
    AckTimeoutError,
    IncorrectOffsetError,
    LiftbridgeError,
    NotConnectedError,
    PublishRejectedError,
    ReadonlyPartitionError,
    UnsentTimeoutError,
)
from liftbridge_nats._grpc_publish import AsyncPublisher
from liftbridge_nats._proto import api_pb2


class _Stream:
    """One PublishAsync call in memory: what was written, and answers the test sends."""

    def __init__(self) -> None:
        self.written: list[api_pb2.PublishRequest] = []
        self._answers: asyncio.Queue[Any] = asyncio.Queue()
        self.ended = False  # the call reports done() (the answers may not be read yet)
        self._flowing = asyncio.Event()  # cleared: writes wait, as on a full HTTP/2 window
        self._flowing.set()

    async def write(self, request: api_pb2.PublishRequest) -> None:
        await self._flowing.wait()
        if self.ended:
            raise asyncio.InvalidStateError("the call is done")
        self.written.append(request)

    async def read(self) -> Any:
        answer = await self._answers.get()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def done(self) -> bool:
        return self.ended

    async def done_writing(self) -> None:
        self.end()

    def cancel(self) -> bool:
        if not self.ended:
            self.end()
        return True

    # What the test does.

    def ack(self, request: api_pb2.PublishRequest, offset: int) -> None:
        ack = api_pb2.Ack(stream="s", offset=offset, correlationId=request.correlationId)
        self.answer(api_pb2.PublishResponse(ack=ack, correlationId=request.correlationId))

    def answer(self, response: api_pb2.PublishResponse) -> None:
        self._answers.put_nowait(response)

    def end(self, error: BaseException | None = None) -> None:
        self.ended = True
        self._flowing.set()  # a write waiting fails now
        self._answers.put_nowait(grpc.aio.EOF if error is None else error)

    def stall(self) -> None:
        """The broker stops reading."""
        self._flowing.clear()

    def flow(self) -> None:
        """The broker reads again."""
        self._flowing.set()


class _Router:
    """The part of the client's router a PublishAsync stream uses."""

    def __init__(self) -> None:
        self.streams: list[_Stream] = []
        self.pool = self

    def addresses(self) -> list[str]:
        return ["127.0.0.1:1"]

    def stub(self, address: str) -> _Router:
        return self

    def PublishAsync(self) -> _Stream:  # the gRPC method's name
        stream = _Stream()
        self.streams.append(stream)
        return stream


def _request(
    cid: str, *, policy: api_pb2.AckPolicy.ValueType = api_pb2.LEADER
) -> api_pb2.PublishRequest:
    return api_pb2.PublishRequest(stream="s", value=b"v", correlationId=cid, ackPolicy=policy)


async def _ended(future: asyncio.Future[Any]) -> Any:
    """What the future ended with: its result, or its exception."""
    try:
        return await asyncio.wait_for(future, 5)
    except LiftbridgeError as exc:
        return exc


async def test_an_answer_is_the_ack_or_the_error_it_carries() -> None:
    router = _Router()
    publisher = AsyncPublisher(router)  # type: ignore[arg-type]
    acked = await publisher.send(_request("a"), 5)
    refused = await publisher.send(_request("b"), 5)
    stream = router.streams[0]
    stream.ack(stream.written[0], 7)
    error = api_pb2.PublishAsyncError(code=api_pb2.PublishAsyncError.READONLY, message="ro")
    stream.answer(api_pb2.PublishResponse(correlationId="b", asyncError=error))
    ack = await _ended(acked)
    assert isinstance(ack, Ack) and ack.offset == 7 and ack.correlation_id == "a"
    assert isinstance(await _ended(refused), ReadonlyPartitionError)
    none = await publisher.send(_request("c", policy=api_pb2.NONE), 5)
    assert none.result() is None  # AckPolicy.NONE: nothing to wait for
    await publisher.close(grace=0)


async def test_an_answer_without_an_ack_is_an_error_never_an_empty_ack() -> None:
    router = _Router()
    publisher = AsyncPublisher(router)  # type: ignore[arg-type]
    empty = await publisher.send(_request("a"), 5)
    rejected = await publisher.send(_request("b"), 5)
    stream = router.streams[0]
    stream.answer(api_pb2.PublishResponse(correlationId="a"))
    bad_offset = api_pb2.Ack(correlationId="b", ackError=api_pb2.Ack.INCORRECT_OFFSET)
    stream.answer(api_pb2.PublishResponse(correlationId="b", ack=bad_offset))
    lost = await _ended(empty)
    assert isinstance(lost, AckLostError) and lost.maybe_stored
    assert "without an ack or an error" in str(lost)
    refused = await _ended(rejected)
    assert isinstance(refused, IncorrectOffsetError) and isinstance(refused, PublishRejectedError)
    await publisher.close(grace=0)


async def test_no_answer_times_out_and_a_late_one_is_dropped() -> None:
    router = _Router()
    publisher = AsyncPublisher(router)  # type: ignore[arg-type]
    future = await publisher.send(_request("a"), 0.05)
    timed_out = await _ended(future)
    assert isinstance(timed_out, AckTimeoutError) and timed_out.maybe_stored
    stream = router.streams[0]
    stream.ack(stream.written[0], 1)  # late
    after = await publisher.send(_request("b"), 5)
    stream.ack(stream.written[1], 2)
    ack = await _ended(after)
    assert isinstance(ack, Ack) and ack.offset == 2
    assert future.exception() is timed_out
    await publisher.close(grace=0)


@pytest.mark.parametrize(
    "ending", [None, grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, details="gone")]
)
async def test_a_stream_that_ends_fails_what_it_did_not_answer(
    ending: BaseException | None,
) -> None:
    router = _Router()
    publisher = AsyncPublisher(router)  # type: ignore[arg-type]
    answered = await publisher.send(_request("a"), 5)
    unanswered = await publisher.send(_request("b"), 5)
    stream = router.streams[0]
    stream.ack(stream.written[0], 0)
    stream.end(ending)
    assert isinstance(await _ended(answered), Ack)
    lost = await _ended(unanswered)
    assert isinstance(lost, AckLostError) and lost.correlation_id == "b"
    await publisher.close(grace=0)


async def test_the_end_of_an_old_stream_leaves_a_new_streams_messages_alone() -> None:
    router = _Router()
    publisher = AsyncPublisher(router)  # type: ignore[arg-type]
    old = await publisher.send(_request("a"), 5)
    first = router.streams[0]
    first.ended = True  # the call is done; its reader has yet to read the end
    new = await publisher.send(_request("b"), 5)  # goes out on a new stream
    second = router.streams[1]
    assert [r.correlationId for r in second.written] == ["b"]
    first.end()  # now the old reader ends, failing what was written to it
    assert isinstance(await _ended(old), AckLostError)
    second.ack(second.written[0], 1)
    ack = await _ended(new)
    assert isinstance(ack, Ack) and ack.offset == 1
    await publisher.close(grace=0)


async def test_a_write_to_a_broken_stream_raises_and_leaves_nothing_pending() -> None:
    router = _Router()
    publisher = AsyncPublisher(router)  # type: ignore[arg-type]
    written = await publisher.send(_request("a"), 5)
    stream = router.streams[0]

    async def broken(request: api_pb2.PublishRequest) -> None:
        raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, details="reset")

    stream.write = broken  # type: ignore[method-assign]
    with pytest.raises(NotConnectedError, match="retry the publish"):
        await publisher.send(_request("b"), 5)
    assert "b" not in publisher._pending
    # The broken stream is ended: what was written to it before fails as lost.
    assert isinstance(await _ended(written), AckLostError)
    await asyncio.wait_for(publisher.close(grace=0), 5)


async def test_a_stalled_stream_ends_each_publish_by_the_deadline_of_its_call() -> None:
    router = _Router()
    publisher = AsyncPublisher(router)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    unacked = await publisher.send(_request("a"), 5)
    stream = router.streams[0]
    stream.stall()  # the broker stopped reading
    started = loop.time()
    cut_off = asyncio.ensure_future(publisher.send(_request("b"), 0.3))
    behind = asyncio.ensure_future(publisher.send(_request("c"), 0.1))
    # Each call returns by its own deadline, its future already failed: c first, while
    # b still holds the stream.
    never_written = await asyncio.wait_for(behind, 1)
    assert loop.time() - started < 0.25 and not cut_off.done()
    cut = await asyncio.wait_for(cut_off, 1)
    assert loop.time() - started < 0.6
    unsent = await _ended(never_written)
    assert isinstance(unsent, UnsentTimeoutError) and not unsent.maybe_stored
    assert "never written" in str(unsent) and "publishing it again is safe" in str(unsent)
    maybe = await _ended(cut)
    assert isinstance(maybe, AckTimeoutError) and maybe.maybe_stored
    # Cut off mid-write, the stream is ended (as grpc does): what it carried is lost.
    assert stream.ended and isinstance(await _ended(unacked), AckLostError)
    # The next publish goes out on a new stream, with its whole time.
    after = await publisher.send(_request("d"), 5)
    fresh = router.streams[1]
    assert [r.correlationId for r in stream.written] == ["a"]
    assert [r.correlationId for r in fresh.written] == ["d"]
    fresh.ack(fresh.written[0], 3)
    ack = await _ended(after)
    assert isinstance(ack, Ack) and ack.offset == 3
    await publisher.close(grace=0)


async def test_the_ack_deadline_counts_from_the_call_not_from_the_write() -> None:
    router = _Router()
    publisher = AsyncPublisher(router)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    await publisher.send(_request("a", policy=api_pb2.NONE), 5)
    stream = router.streams[0]
    stream.stall()
    started = loop.time()
    sending = asyncio.ensure_future(publisher.send(_request("b"), 0.4))
    await asyncio.sleep(0.25)
    stream.flow()  # written 0.25 s into its time
    future = await asyncio.wait_for(sending, 1)
    assert [r.correlationId for r in stream.written] == ["a", "b"]
    with pytest.raises(AckTimeoutError):
        await asyncio.wait_for(future, 1)
    assert 0.4 <= loop.time() - started < 0.6  # not 0.25 + 0.4 s
    await publisher.close(grace=0)


async def test_concurrent_publishes_are_written_in_call_order_one_at_a_time() -> None:
    router = _Router()
    publisher = AsyncPublisher(router)  # type: ignore[arg-type]
    await publisher.send(_request("first", policy=api_pb2.NONE), 5)
    stream = router.streams[0]
    stream.stall()
    sends = [asyncio.ensure_future(publisher.send(_request(f"m{i}"), 5)) for i in range(8)]
    await asyncio.sleep(0.01)
    sends[3].cancel()  # a caller that leaves while waiting for its turn is skipped
    await asyncio.sleep(0.01)
    stream.flow()
    done = await asyncio.gather(*sends, return_exceptions=True)
    assert isinstance(done[3], asyncio.CancelledError)
    expected = ["first"] + [f"m{i}" for i in range(8) if i != 3]
    assert [r.correlationId for r in stream.written] == expected
    for offset, request in enumerate(stream.written[1:]):
        stream.ack(request, offset)
    acks = [await _ended(f) for f in done if isinstance(f, asyncio.Future)]
    assert [a.offset for a in acks] == list(range(7))
    assert not publisher._writing and not publisher._turns
    await publisher.close(grace=0)
