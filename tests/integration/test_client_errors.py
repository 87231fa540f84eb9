"""gRPC status codes become typed errors; checked on real answers elsewhere, here on
every mapping rule, including server texts that only appear during fail-overs."""

from __future__ import annotations

import grpc
import grpc.aio
import pytest

from liftbridge_nats import (
    AckTimeoutError,
    BadRequestError,
    BrokerUnavailableError,
    EncryptionError,
    IncorrectOffsetError,
    InvalidArgumentError,
    LiftbridgeError,
    LocalError,
    MaxBytesExceededError,
    MessageTooLargeError,
    NoLeaderError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    PartitionPausedError,
    PublishRejectedError,
    ReadonlyPartitionError,
    RemoteError,
    RpcError,
    RpcTimeoutError,
    ServerError,
    StreamExistsError,
)
from liftbridge_nats._cursors import cursor_partition
from liftbridge_nats._grpc import parse_brokers, rpc_error
from liftbridge_nats._grpc_publish import async_error, publish_error
from liftbridge_nats._proto import api_pb2


def status(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize(
    ("code", "details", "cls", "flags"),
    [
        # flags: maybe_stored, retriable, invalid_metadata
        (grpc.StatusCode.ALREADY_EXISTS, "stream already exists", StreamExistsError, "---"),
        (grpc.StatusCode.NOT_FOUND, "stream does not exist", NoSuchStreamError, "--m"),
        (grpc.StatusCode.NOT_FOUND, "No such partition", NoSuchPartitionError, "--m"),
        (grpc.StatusCode.FAILED_PRECONDITION, "Server not partition leader", NotLeaderError, "-rm"),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "The request should be sent to partition leader",
            NotLeaderError,
            "-rm",
        ),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "Server not leader for cursors partition 2",
            NotLeaderError,
            "-rm",
        ),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "readonly partition: 0",
            ReadonlyPartitionError,
            "---",
        ),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "commit log closed (paused)",
            PartitionPausedError,
            "---",
        ),
        (grpc.StatusCode.UNAVAILABLE, "connection refused", BrokerUnavailableError, "-rm"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "deadline", RpcTimeoutError, "sr-"),
        (grpc.StatusCode.INVALID_ARGUMENT, "Subject is invalid", BadRequestError, "---"),
        (grpc.StatusCode.INTERNAL, "no known metadata leader", NoLeaderError, "-rm"),
        (grpc.StatusCode.INTERNAL, "disk on fire", ServerError, "---"),
        (grpc.StatusCode.PERMISSION_DENIED, "not authorized", ServerError, "---"),
    ],
)
def test_status_mapping(
    code: grpc.StatusCode, details: str, cls: type[RpcError], flags: str
) -> None:
    err = rpc_error(status(code, details), "do it")
    assert type(err) is cls
    assert err.code == code.name
    assert flags == "".join(
        letter if flag else "-"
        for letter, flag in zip(
            "srm", (err.maybe_stored, err.retriable, err.invalid_metadata), strict=True
        )
    )
    assert isinstance(err, LiftbridgeError)
    assert str(err).startswith("do it")


def test_timeouts_and_unavailable_brokers_are_local_the_rest_remote() -> None:
    local = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE}
    for code in grpc.StatusCode:
        if code in (grpc.StatusCode.OK, grpc.StatusCode.CANCELLED):
            continue  # the server never sends CANCELLED; the client turns it into "closed"
        err = rpc_error(status(code, "x"), "a")
        assert isinstance(err, LocalError if code in local else RemoteError), code
        assert not isinstance(err, LocalError if code not in local else RemoteError), code


def test_error_families() -> None:
    bad = rpc_error(status(grpc.StatusCode.INVALID_ARGUMENT, "x"), "a")
    # Refused by the server, not by the SDK: both are ValueErrors, only one is local.
    assert isinstance(bad, ValueError) and not isinstance(bad, InvalidArgumentError)
    assert isinstance(rpc_error(status(grpc.StatusCode.DEADLINE_EXCEEDED, "x"), "a"), TimeoutError)
    timeout = rpc_error(status(grpc.StatusCode.DEADLINE_EXCEEDED, "x"), "publish")
    assert isinstance(publish_error(timeout), AckTimeoutError)
    unknown = rpc_error(status(grpc.StatusCode.UNKNOWN, "incorrect expected offset"), "publish")
    assert isinstance(publish_error(unknown), IncorrectOffsetError)
    large = rpc_error(
        status(grpc.StatusCode.INVALID_ARGUMENT, "message exceeds max replication size"), "publish"
    )
    assert type(publish_error(large)) is MaxBytesExceededError
    assert isinstance(publish_error(large), MessageTooLargeError | RemoteError)


Code = api_pb2.PublishAsyncError


@pytest.mark.parametrize(
    ("code", "message", "cls"),
    [
        # The server's own words (Liftbridge v1.9.0, convertAckError).
        (Code.INCORRECT_OFFSET, "incorrect expected offset", IncorrectOffsetError),
        (Code.BAD_REQUEST, "message exceeds max replication size", MaxBytesExceededError),
        (Code.ENCRYPTION_FAILED, "encryption failed on partition", EncryptionError),
        (Code.UNKNOWN, "unknown error", PublishRejectedError),
        (Code.BAD_REQUEST, "stream name is required", BadRequestError),
        (Code.NOT_FOUND, "no such stream", NoSuchStreamError),
        (Code.READONLY, "readonly partition", ReadonlyPartitionError),
        (Code.INTERNAL, "failed to publish", ServerError),
        (Code.PERMISSION_DENIED, "not authorized", ServerError),
    ],
)
def test_publish_async_errors(
    code: api_pb2.PublishAsyncError.Code.ValueType, message: str, cls: type[LiftbridgeError]
) -> None:
    err = async_error(Code(code=code, message=message), "cid-1")
    assert type(err) is cls
    assert isinstance(err, RemoteError) and message in str(err)


def test_cursor_partition_is_crc32_of_the_key() -> None:
    import zlib

    assert cursor_partition("c", "s", 3, 7) == zlib.crc32(b"c,s,3") % 7
    assert {cursor_partition(f"id{i}", "s", 0, 4) for i in range(40)} == {0, 1, 2, 3}


def test_parse_brokers() -> None:
    assert parse_brokers(["a:1", "a:1", " b:2 "]) == ("a:1", "b:2")
    assert parse_brokers("[::1]:9292") == ("[::1]:9292",)
    with pytest.raises(InvalidArgumentError):
        parse_brokers("a:b")


async def test_arguments_checked_before_any_rpc() -> None:
    # Port 1 has no broker: reaching the network would fail differently.
    from liftbridge_nats import Client

    client = Client("127.0.0.1:1", timeout=1)
    with pytest.raises(InvalidArgumentError):
        await client.create_stream("", "name")
    with pytest.raises(InvalidArgumentError):
        await client.create_stream("subj", " ")
    with pytest.raises(TypeError):
        await client.create_stream("subj", 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await client.create_stream("subj", "n", replication_factor=0)
    with pytest.raises(InvalidArgumentError):
        await client.create_stream("subj", "n", segment_max_bytes=-1)
    with pytest.raises(InvalidArgumentError):
        await client.delete_stream("")
    with pytest.raises(InvalidArgumentError):
        await client.pause_stream("s", partitions=[-1])
    with pytest.raises(InvalidArgumentError):
        await client.fetch_partition_metadata("s", -1)
    with pytest.raises(InvalidArgumentError):
        await client.publish_to_stream("s", b"v", partition=-2)
    with pytest.raises(InvalidArgumentError):
        await client.fetch_metadata(timeout=0)
    with pytest.raises(InvalidArgumentError):
        Client("127.0.0.1:1", timeout=0)
    await client.close()
