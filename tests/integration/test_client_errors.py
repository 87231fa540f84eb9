"""gRPC status codes become typed errors; checked on real answers elsewhere, here on
every mapping rule, including server texts that only appear during fail-overs."""

from __future__ import annotations

import grpc
import grpc.aio
import pytest

from liftbridge_nats._grpc import is_retriable, parse_brokers, rpc_error
from liftbridge_nats._publish_async import publish_error
from liftbridge_nats.cursors import cursor_partition
from liftbridge_nats.errors import (
    AckTimeoutError,
    BadRequestError,
    BrokerUnavailableError,
    IncorrectOffsetError,
    InvalidArgumentError,
    LiftbridgeError,
    MessageTooLargeError,
    NoLeaderError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    PartitionPausedError,
    ReadonlyPartitionError,
    RpcError,
    RpcTimeoutError,
    StreamExistsError,
)


def status(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize(
    ("code", "details", "cls", "retriable"),
    [
        (grpc.StatusCode.ALREADY_EXISTS, "stream already exists", StreamExistsError, False),
        (grpc.StatusCode.NOT_FOUND, "stream does not exist", NoSuchStreamError, False),
        (grpc.StatusCode.NOT_FOUND, "No such partition", NoSuchPartitionError, False),
        (grpc.StatusCode.FAILED_PRECONDITION, "Server not partition leader", NotLeaderError, True),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "Server not leader for cursors partition 2",
            NotLeaderError,
            True,
        ),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "readonly partition: 0",
            ReadonlyPartitionError,
            False,
        ),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            "commit log closed (paused)",
            PartitionPausedError,
            False,
        ),
        (grpc.StatusCode.UNAVAILABLE, "connection refused", BrokerUnavailableError, True),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "deadline", RpcTimeoutError, False),
        (grpc.StatusCode.INVALID_ARGUMENT, "Subject is invalid", BadRequestError, False),
        (grpc.StatusCode.INTERNAL, "no known metadata leader", NoLeaderError, True),
        (grpc.StatusCode.INTERNAL, "disk on fire", RpcError, False),
    ],
)
def test_status_mapping(
    code: grpc.StatusCode, details: str, cls: type[RpcError], retriable: bool
) -> None:
    err = rpc_error(status(code, details), "do it")
    assert type(err) is cls
    assert err.code == code.name
    assert is_retriable(err) is retriable
    assert isinstance(err, LiftbridgeError)
    assert str(err).startswith("do it")


def test_error_families() -> None:
    assert isinstance(
        rpc_error(status(grpc.StatusCode.INVALID_ARGUMENT, "x"), "a"), InvalidArgumentError
    )
    assert isinstance(rpc_error(status(grpc.StatusCode.DEADLINE_EXCEEDED, "x"), "a"), TimeoutError)
    timeout = rpc_error(status(grpc.StatusCode.DEADLINE_EXCEEDED, "x"), "publish")
    assert isinstance(publish_error(timeout), AckTimeoutError)
    unknown = rpc_error(status(grpc.StatusCode.UNKNOWN, "incorrect expected offset"), "publish")
    assert isinstance(publish_error(unknown), IncorrectOffsetError)
    large = rpc_error(
        status(grpc.StatusCode.INVALID_ARGUMENT, "message exceeds max replication size"), "publish"
    )
    assert isinstance(publish_error(large), MessageTooLargeError)


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
    from liftbridge_nats.client import Client

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
        await client.publish("s", b"v", partition=-2)
    with pytest.raises(InvalidArgumentError):
        await client.fetch_metadata(timeout=0)
    with pytest.raises(InvalidArgumentError):
        Client("127.0.0.1:1", timeout=0)
    await client.close()
