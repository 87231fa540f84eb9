"""The inputs that crash Liftbridge v1.9.0, sent raw (bypassing the SDK's checks) to a
throwaway 1-node cluster each: the broker panics, and panics again when restarted,
because the request stays in its Raft log. The same arguments given to the SDK raise
``InvalidArgumentError`` before anything is sent. These are the facts behind "Server
behaviours worth knowing" (docs/server-behaviours.md); if a server version stops
crashing, this test fails and that page and the guards can be revisited."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from liftbridge_nats import Client, InvalidArgumentError, ServerStartError
from liftbridge_nats._proto import api_pb2, api_pb2_grpc
from liftbridge_nats.testing import Cluster, LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

Request = api_pb2.CreateStreamRequest

# (case, raw requests sent in order, the same first request as Client.create_stream kwargs)
CASES: list[tuple[str, list[Any], dict[str, Any]]] = [
    ("name ..", [Request(subject="s", name="..")], {"subject": "s", "name": ".."}),
    (
        "name of 256 bytes",
        [Request(subject="s", name="é" * 128)],
        {"subject": "s", "name": "é" * 128},
    ),
    ("name with a space", [Request(subject="s", name="a b")], {"subject": "s", "name": "a b"}),
    ("name with NUL", [Request(subject="s", name="a\0b")], {"subject": "s", "name": "a\0b"}),
    (
        # Partition 1 subscribes to "w.>.1": NATS closes the broker's connection, and the
        # next partition it has to lead makes it panic.
        "subject ending in > with 2 partitions",
        [Request(subject="w.>", name="w", partitions=2), Request(subject="ok", name="ok")],
        {"subject": "w.>", "name": "w", "partitions": 2},
    ),
    (
        # A subscription line over nats-server's 4,096 bytes: NATS closes the broker's
        # connection, and the next partition it has to lead makes it panic.
        "group of 5,000 bytes",
        [Request(subject="g", name="g", group="q" * 5000), Request(subject="ok", name="ok")],
        {"subject": "g", "name": "g", "group": "q" * 5000},
    ),
    (
        "subject of 4,201 bytes",
        [Request(subject="s." * 2100 + "s", name="s"), Request(subject="ok", name="ok")],
        {"subject": "s." * 2100 + "s", "name": "s"},
    ),
    (
        # 10^13 ms overflows Go's int64 nanoseconds into a negative ticker interval.
        "cleaner interval of 317 years",
        [Request(subject="s", name="s", cleanerInterval=api_pb2.NullableInt64(value=10**13))],
        {"subject": "s", "name": "s", "cleaner_interval": 10**10},
    ),
]


def _send(address: str, requests: list[Any]) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = api_pb2_grpc.APIStub(channel)
        for request in requests:
            # The broker may die before it answers.
            try:
                stub.CreateStream(request, timeout=10)
            except grpc.RpcError:
                return


async def _exits(cluster: Cluster, within: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while cluster.is_running(0):
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


def _panics(cluster: Cluster) -> list[str]:
    text = cluster.node_log(0)
    return [line for line in text.splitlines() if line.startswith("panic:")]


@pytest.mark.parametrize(("case", "requests", "sdk_args"), CASES, ids=[c[0] for c in CASES])
async def test_raw_request_crashes_the_broker_for_good_and_the_sdk_refuses_it(
    case: str,
    requests: list[Any],
    sdk_args: dict[str, Any],
    fault_report: Callable[[str], None],
    liftbridge_cluster_factory: Callable[..., Cluster],
) -> None:
    nowhere = Client(["127.0.0.1:1"])  # never connected: the check must come first
    try:
        with pytest.raises(InvalidArgumentError):
            await nowhere.create_stream(sdk_args.pop("subject"), sdk_args.pop("name"), **sdk_args)
    finally:
        await nowhere.close()

    async with liftbridge_cluster_factory(1) as cluster:
        await asyncio.to_thread(_send, cluster.brokers[0], requests)
        assert await _exits(cluster, 15), f"{case}: the broker survived\n{cluster.log_tail()}"
        first = _panics(cluster)
        with pytest.raises(ServerStartError):
            await cluster.restart_node(0)  # replays the Raft log, meets the request again
        again = _panics(cluster)
    assert first and len(again) > len(first), f"{case}: {first} / {again}"
    fault_report(f"{case}: {first[0][:160]!a}")


@pytest.mark.processes_only("looks at the node's data directory on the host")
async def test_a_slash_makes_nested_directories() -> None:
    async with LocalCluster(1) as cluster:
        await asyncio.to_thread(_send, cluster.brokers[0], [Request(subject="s", name="a/b")])
        assert (cluster.data_dir(0) / "streams" / "a" / "b" / "0").is_dir()
        assert cluster.is_running(0)
    nowhere = Client(["127.0.0.1:1"])
    try:
        with pytest.raises(InvalidArgumentError, match="'/'"):
            await nowhere.create_stream("s", "a/b")
    finally:
        await nowhere.close()


async def test_a_three_node_cluster_loses_brokers_and_then_its_quorum(
    fault_report: Callable[[str], None], liftbridge_cluster_factory: Callable[..., Cluster]
) -> None:
    async with liftbridge_cluster_factory(3) as cluster:
        await asyncio.to_thread(_send, cluster.brokers[0], [Request(subject="s", name="é" * 128)])
        await asyncio.sleep(15)  # every broker applies the entry and crashes, or not
        alive = [i for i in range(3) if cluster.is_running(i)]
        assert len(alive) <= 1, f"only {3 - len(alive)} broker(s) crashed"
        answer = "not asked"
        if len(alive) == 1:
            # One broker left of three: no Raft quorum, so no stream can be created.
            with grpc.insecure_channel(cluster.brokers[alive[0]]) as channel:
                try:
                    api_pb2_grpc.APIStub(channel).CreateStream(
                        Request(subject="ok", name="ok"), timeout=5
                    )
                except grpc.RpcError as exc:
                    answer = exc.code().name
                else:
                    answer = "created"
            assert answer != "created"
    fault_report(f"256-byte name on 3 nodes: {3 - len(alive)} broker(s) died; survivor: {answer}")
