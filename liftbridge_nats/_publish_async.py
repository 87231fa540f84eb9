"""Publishing over gRPC: ack conversion, error mapping, the PublishAsync stream.

This path exists for completeness and for environments without NATS access; the
NATS-native Publisher is faster and is what the documentation recommends.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
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


class AsyncPublisher:
    """One PublishAsync stream to a broker, matching acks to futures by correlation id."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self._call: (
            grpc.aio.StreamStreamCall[api_pb2.PublishRequest, api_pb2.PublishResponse] | None
        ) = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[str, asyncio.Future[Ack | None]] = {}
        self._lock = asyncio.Lock()

    async def send(self, req: api_pb2.PublishRequest, timeout: float) -> asyncio.Future[Ack | None]:
        """Write one request; the future resolves with its ack, or fails with
        :class:`AckTimeoutError` when none came within ``timeout`` seconds of the write."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Ack | None] = loop.create_future()
        cid = req.correlationId
        async with self._lock:
            call = self._ensure_call()
            if req.ackPolicy != api_pb2.NONE:
                self._pending[cid] = fut
            try:
                await call.write(req)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
                self._pending.pop(cid, None)
                self._call = None
                raise NotConnectedError(
                    f"PublishAsync stream broke: {exc}; retry the publish"
                ) from None
        if req.ackPolicy == api_pb2.NONE:
            fut.set_result(None)
        elif not fut.done():
            timer = loop.call_later(timeout, self._expire, cid, fut, timeout)
            fut.add_done_callback(lambda _: timer.cancel())
        return fut

    def _expire(self, cid: str, fut: asyncio.Future[Ack | None], timeout: float) -> None:
        if self._pending.get(cid) is fut:
            del self._pending[cid]
        if not fut.done():
            fut.set_exception(
                AckTimeoutError(
                    f"no ack within {timeout}s of writing the message to the PublishAsync "
                    "stream; it may or may not have been stored. Raise the timeout, or "
                    "publish it again (with expected_offset to be safe).",
                    correlation_id=cid,
                )
            )

    def _ensure_call(
        self,
    ) -> grpc.aio.StreamStreamCall[api_pb2.PublishRequest, api_pb2.PublishResponse]:
        if self._call is None or self._call.done():
            address = random.choice(self._router.addresses())
            call = self._router.pool.stub(address).PublishAsync()
            self._call = call
            self._reader = asyncio.ensure_future(self._read(call))
            return call
        return self._call

    async def _read(
        self, call: grpc.aio.StreamStreamCall[api_pb2.PublishRequest, api_pb2.PublishResponse]
    ) -> None:
        reason = "the stream closed"
        try:
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    break
                assert isinstance(resp, api_pb2.PublishResponse)
                cid = resp.correlationId or resp.ack.correlationId
                fut = self._pending.pop(cid, None)
                if fut is None or fut.done():
                    continue
                if resp.HasField("asyncError"):
                    fut.set_exception(async_error(resp.asyncError, cid))
                else:
                    fut.set_result(ack_from_proto(resp.ack))
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                reason = str(rpc_error(exc, "the stream"))
        finally:
            pending, self._pending = self._pending, {}
            for cid, fut in pending.items():
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
