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

from ._grpc import rpc_error
from ._proto import api_pb2
from .errors import (
    AckTimeoutError,
    EncryptionError,
    IncorrectOffsetError,
    LiftbridgeError,
    MessageTooLargeError,
    NoSuchStreamError,
    NotConnectedError,
    PublishError,
    PublishRejectedError,
    ReadonlyPartitionError,
    RpcError,
    RpcTimeoutError,
)
from .messages import Ack
from .wire import ack_from_proto

if TYPE_CHECKING:
    from ._router import Router

__all__ = ["AsyncPublisher", "ack_from_proto", "publish_error"]

PublishCall = grpc.aio.StreamStreamCall[api_pb2.PublishRequest, api_pb2.PublishResponse]


def publish_error(exc: LiftbridgeError) -> LiftbridgeError:
    """Turn a failed gRPC publish into the publish error the NATS path would raise."""
    if isinstance(exc, RpcTimeoutError):
        return AckTimeoutError("no ack within the timeout; the message may or may not be stored")
    if not isinstance(exc, RpcError) or isinstance(exc, ReadonlyPartitionError | NoSuchStreamError):
        return exc
    text = str(exc).lower()
    if "incorrect expected offset" in text or "incorrect offset" in text:
        return IncorrectOffsetError("the expected offset is stale (optimistic concurrency control)")
    if "exceeds max" in text or "too large" in text:
        return MessageTooLargeError("the message is larger than the server accepts")
    if "encryption" in text:
        return EncryptionError("the server could not encrypt the message")
    return exc


_ASYNC_ERRORS: dict[int, type[PublishError]] = {
    api_pb2.PublishAsyncError.INCORRECT_OFFSET: IncorrectOffsetError,
    api_pb2.PublishAsyncError.ENCRYPTION_FAILED: EncryptionError,
}


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

    async def send(self, req: api_pb2.PublishRequest) -> asyncio.Future[Ack | None]:
        """Write one request; the future resolves with its ack."""
        fut: asyncio.Future[Ack | None] = asyncio.get_running_loop().create_future()
        async with self._lock:
            call = self._ensure_call()
            if req.ackPolicy != api_pb2.NONE:
                self._pending[req.correlationId] = fut
            try:
                await call.write(req)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
                self._pending.pop(req.correlationId, None)
                self._call = None
                raise NotConnectedError(
                    f"PublishAsync stream broke: {exc}; retry the publish"
                ) from None
        if req.ackPolicy == api_pb2.NONE:
            fut.set_result(None)
        return fut

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
        failure: LiftbridgeError = NotConnectedError(
            "PublishAsync stream closed; retry the publish"
        )
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
                    cls = _ASYNC_ERRORS.get(resp.asyncError.code, PublishRejectedError)
                    if resp.asyncError.code == api_pb2.PublishAsyncError.READONLY:
                        fut.set_exception(
                            ReadonlyPartitionError(
                                resp.asyncError.message, code="FAILED_PRECONDITION"
                            )
                        )
                    elif resp.asyncError.code == api_pb2.PublishAsyncError.NOT_FOUND:
                        fut.set_exception(
                            NoSuchStreamError(resp.asyncError.message, code="NOT_FOUND")
                        )
                    else:
                        fut.set_exception(cls(resp.asyncError.message, correlation_id=cid))
                else:
                    fut.set_result(ack_from_proto(resp.ack))
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                failure = rpc_error(exc, "PublishAsync")
        finally:
            pending, self._pending = self._pending, {}
            for fut in pending.values():
                if not fut.done():
                    fut.set_exception(failure)

    async def close(self, grace: float = 5.0) -> None:
        """Close the stream after waiting up to ``grace`` seconds for outstanding acks;
        futures still unacked then fail with NotConnectedError."""
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
