"""Publishing over gRPC: error mapping, and the ``PublishAsync`` stream behind
``Client.publish_to_stream_async`` (not to be confused with ``Publisher.publish_async``,
which publishes over NATS).

This path exists for completeness and for environments without NATS access; the
NATS-native Publisher is faster and is what the documentation recommends.

Every future :class:`AsyncPublisher` hands out ends with the :class:`Ack` the broker
sent for its message (None only for ``AckPolicy.NONE``, at once) or with a typed error:
never with an answer that carries neither. The futures waiting on a stream belong to
that stream: when it ends, they fail, and a new stream's futures are not touched by the
end of an older one.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from ._errors import (
    AckLostError,
    AckTimeoutError,
    BadRequestError,
    EncryptionError,
    IncorrectOffsetError,
    LiftbridgeError,
    MaxBytesExceededError,
    NoSuchStreamError,
    NotConnectedError,
    PublishRejectedError,
    ReadonlyPartitionError,
    RpcError,
    RpcTimeoutError,
    ServerError,
    UnsentTimeoutError,
    for_ack_error,
)
from ._grpc import rpc_error
from ._messages import Ack, AckError
from ._proto import api_pb2
from .wire import ack_from_proto

if TYPE_CHECKING:
    from ._router import Router

__all__ = ["AsyncPublisher", "ack_from_proto", "async_error", "publish_error"]

PublishCall = grpc.aio.StreamStreamCall[api_pb2.PublishRequest, api_pb2.PublishResponse]


# Liftbridge turns an ack error into a PublishAsyncError (and, for Publish, into a
# gRPC status carrying the same words); the words tell which ack error it was.
_ACK_ERROR_WORDS = (
    ("incorrect expected offset", AckError.INCORRECT_OFFSET),
    ("incorrect offset", AckError.INCORRECT_OFFSET),
    ("exceeds max", AckError.TOO_LARGE),
    ("too large", AckError.TOO_LARGE),
    ("encryption", AckError.ENCRYPTION),
)
_Async = api_pb2.PublishAsyncError
# PublishAsyncError codes that are not ack errors, as the gRPC status Publish uses.
_ASYNC_STATUS = {
    _Async.BAD_REQUEST: "INVALID_ARGUMENT",
    _Async.NOT_FOUND: "NOT_FOUND",
    _Async.INTERNAL: "INTERNAL",
    _Async.READONLY: "FAILED_PRECONDITION",
    _Async.PERMISSION_DENIED: "PERMISSION_DENIED",
}
_ASYNC_RPC_ERRORS: dict[int, type[RpcError]] = {
    _Async.BAD_REQUEST: BadRequestError,
    _Async.NOT_FOUND: NoSuchStreamError,
    _Async.READONLY: ReadonlyPartitionError,
}


def _ack_error_in(text: str) -> AckError | None:
    low = text.lower()
    for words, error in _ACK_ERROR_WORDS:
        if words in low:
            return error
    return None


def _rejected(error: AckError, detail: str, cid: str | None) -> PublishRejectedError:
    cls = for_ack_error(error)
    what = {
        IncorrectOffsetError: "the expected offset is stale (optimistic concurrency control); "
        "fetch the partition's newest offset and publish with expected_offset set to it + 1",
        MaxBytesExceededError: "the message is larger than the server's "
        "clustering.replication.max.bytes; send a smaller message or raise that limit",
        EncryptionError: "the server could not encrypt the message; check its encryption key "
        "and logs",
    }.get(cls, "the server rejected the message; its logs may tell more")
    return cls(f"{what} (server: {detail})", correlation_id=cid)


def publish_error(exc: LiftbridgeError) -> LiftbridgeError:
    """Turn a failed gRPC publish into the publish error the NATS path would raise."""
    if isinstance(exc, RpcTimeoutError):
        return AckTimeoutError(
            f"no ack within the timeout ({exc}); the message may or may not be stored"
        )
    if not isinstance(exc, RpcError) or isinstance(exc, ReadonlyPartitionError | NoSuchStreamError):
        return exc
    error = _ack_error_in(str(exc))
    return exc if error is None else _rejected(error, str(exc), None)


def async_error(err: api_pb2.PublishAsyncError, cid: str) -> LiftbridgeError:
    """The error for a PublishAsync response that carries ``asyncError``."""
    detail = err.message or _Async.Code.Name(err.code)
    if err.code == _Async.INCORRECT_OFFSET:
        return _rejected(AckError.INCORRECT_OFFSET, detail, cid)
    if err.code == _Async.ENCRYPTION_FAILED:
        return _rejected(AckError.ENCRYPTION, detail, cid)
    error = _ack_error_in(detail)
    if error is not None:  # TOO_LARGE comes as BAD_REQUEST
        return _rejected(error, detail, cid)
    status = _ASYNC_STATUS.get(err.code)
    if status is None:
        return _rejected(AckError.UNKNOWN, detail, cid)
    return _ASYNC_RPC_ERRORS.get(err.code, ServerError)(f"publish failed: {detail}", code=status)


def _answer_error(resp: api_pb2.PublishResponse, cid: str) -> LiftbridgeError | None:
    """The error a PublishAsync answer carries (None for a usable ack)."""
    if resp.HasField("asyncError"):
        return async_error(resp.asyncError, cid)
    if not resp.HasField("ack"):
        # Not something a v1.9.0 broker sends; an Ack made of defaults would be a lie.
        return AckLostError(
            "the broker answered the PublishAsync message without an ack or an error; it "
            "may or may not have been stored. Check the partition, or publish it again "
            "with expected_offset to be safe.",
            correlation_id=cid,
        )
    code = resp.ack.ackError
    if code:  # brokers report these as asyncError; an ack carrying one is no success
        try:
            error = AckError(code)
        except ValueError:  # a newer server's code
            error = AckError.UNKNOWN
        return _rejected(error, f"ack error {code}", cid)
    return None


def _timeout_error(cid: str, timeout: float, *, written: bool) -> AckTimeoutError:
    if not written:
        return UnsentTimeoutError(
            f"the message waited {timeout}s for its turn on the PublishAsync stream (the "
            "messages before it were still being written: the broker reads slowly or not "
            "at all) and was never written, so it was not stored; publishing it again is "
            "safe. Raise the timeout, or check the broker.",
            correlation_id=cid,
        )
    return AckTimeoutError(
        f"no ack within {timeout}s of the call that published the message over the "
        "PublishAsync stream; it may or may not have been stored. Raise the timeout, or "
        "publish it again (with expected_offset to be safe).",
        correlation_id=cid,
    )


# The futures of the messages written to one PublishAsync stream, by correlation id.
_Pending = dict[str, asyncio.Future[Ack | None]]


class AsyncPublisher:
    """One PublishAsync stream to a broker, matching acks to futures by correlation id."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self._call: (
            grpc.aio.StreamStreamCall[api_pb2.PublishRequest, api_pb2.PublishResponse] | None
        ) = None
        self._reader: asyncio.Task[None] | None = None
        # The current stream's; each stream's reader holds its own (see _read).
        self._pending: _Pending = {}
        # One write at a time, in call order: True while one is under way, and the
        # callers waiting for their turn (first come, first served).
        self._writing = False
        self._turns: deque[asyncio.Future[None]] = deque()

    async def send(self, req: api_pb2.PublishRequest, timeout: float) -> asyncio.Future[Ack | None]:
        """Write one request and return the future of its ack.

        ``timeout`` bounds the whole publish from this call: the wait for the stream
        (writes go one at a time, in call order), the write (a broker that stopped
        reading holds it up once HTTP/2's window is full) and the wait for the ack.
        When it passes first, the call returns the future failed with
        :class:`AckTimeoutError`: never written (``maybe_stored`` false), or cut off
        while written. grpc cancels a stream whose write is cut off, so that also ends
        the stream: the messages still waiting for their acks on it fail with
        :class:`AckLostError` (they were written earlier, so with the same timeout
        their deadlines have passed already), and the next publish opens a new one.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        fut: asyncio.Future[Ack | None] = loop.create_future()
        cid = req.correlationId
        if self._writing or self._turns:
            # Others write first: wait for the stream, not past the deadline.
            if not await self._take_turn(deadline):
                fut.set_exception(_timeout_error(cid, timeout, written=False))
                return fut
        else:
            self._writing = True  # free: taken at once
        try:
            call = self._ensure_call()
            pending = self._pending
            if req.ackPolicy != api_pb2.NONE:
                pending[cid] = fut
            try:
                async with asyncio.timeout_at(deadline):
                    await call.write(req)
            except BaseException as exc:
                pending.pop(cid, None)
                if self._call is call:
                    self._call = None
                # Broken, or cut off (grpc cancels the call then): ended here, so that
                # its reader fails what it still waits for and close() does not wait on
                # a stream nobody writes to.
                call.cancel()
                if isinstance(exc, TimeoutError):
                    fut.set_exception(_timeout_error(cid, timeout, written=True))
                    return fut
                if isinstance(exc, grpc.aio.AioRpcError | asyncio.InvalidStateError):
                    raise NotConnectedError(
                        f"PublishAsync stream broke: {exc}; retry the publish"
                    ) from None
                raise
        finally:
            self._pass_turn()
        if req.ackPolicy == api_pb2.NONE:
            fut.set_result(None)
        elif not fut.done():
            timer = loop.call_at(deadline, self._expire, pending, cid, fut, timeout)
            fut.add_done_callback(lambda _: timer.cancel())
        return fut

    async def _take_turn(self, deadline: float) -> bool:
        """Wait for the stream until ``deadline``; False when it did not come by then."""
        turn = asyncio.get_running_loop().create_future()
        self._turns.append(turn)
        try:
            async with asyncio.timeout_at(deadline):
                await turn
        except BaseException as exc:
            if turn.done() and not turn.cancelled():
                self._pass_turn()  # handed over as the wait ended: the next one's now
            else:
                turn.cancel()  # skipped when its turn comes
            if isinstance(exc, TimeoutError):
                return False
            raise
        return True

    def _pass_turn(self) -> None:
        """The write under way ended: the next caller's turn (or nobody's)."""
        turns = self._turns
        while turns:
            turn = turns.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._writing = False

    @staticmethod
    def _expire(
        pending: _Pending, cid: str, fut: asyncio.Future[Ack | None], timeout: float
    ) -> None:
        if pending.get(cid) is fut:
            del pending[cid]
        if not fut.done():
            fut.set_exception(_timeout_error(cid, timeout, written=True))

    def _ensure_call(
        self,
    ) -> grpc.aio.StreamStreamCall[api_pb2.PublishRequest, api_pb2.PublishResponse]:
        if self._call is None or self._call.done():
            address = random.choice(self._router.addresses())
            call = self._router.pool.stub(address).PublishAsync()
            self._call = call
            # A new stream, new futures: the reader of an older one, still ending, fails
            # only the futures of the messages written to that one.
            self._pending = {}
            self._reader = asyncio.ensure_future(self._read(call, self._pending))
            return call
        return self._call

    async def _read(
        self,
        call: grpc.aio.StreamStreamCall[api_pb2.PublishRequest, api_pb2.PublishResponse],
        pending: _Pending,
    ) -> None:
        reason = "the stream closed"
        try:
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    break
                assert isinstance(resp, api_pb2.PublishResponse)
                cid = resp.correlationId or resp.ack.correlationId
                fut = pending.pop(cid, None)
                if fut is None or fut.done():
                    continue
                error = _answer_error(resp, cid)
                if error is None:
                    fut.set_result(ack_from_proto(resp.ack))
                else:
                    fut.set_exception(error)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                reason = str(rpc_error(exc, "the stream"))
        finally:
            left = list(pending.items())
            pending.clear()
            for cid, fut in left:
                if not fut.done():
                    # Written, never acked: the broker may have stored it.
                    fut.set_exception(
                        AckLostError(
                            f"PublishAsync ended before the ack came ({reason}); the message "
                            "may or may not have been stored. Publish it again with "
                            "expected_offset to be safe, or check the partition first.",
                            correlation_id=cid,
                        )
                    )

    async def close(self, grace: float = 5.0) -> None:
        """Close the stream after waiting up to ``grace`` seconds for outstanding acks;
        futures still unacked then fail with :class:`AckLostError`."""
        call, self._call = self._call, None
        reader, self._reader = self._reader, None
        if call is not None:
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                await call.done_writing()
            if reader is not None and self._pending:
                # The server ends the stream once every ack is sent.
                await asyncio.wait([reader], timeout=grace)
            call.cancel()
        if reader is not None:
            await asyncio.gather(reader, return_exceptions=True)
