"""The real-server harness itself: LocalCluster, its faults, its cleanup, its fixtures.

Tests of LocalCluster's own surface (process ids, work directory, log files, NATS
configuration, gRPC TLS) run on processes only; tests/containers covers ContainerCluster
the same way.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import nats
import pytest
from nats.aio.client import Client as NATS

from liftbridge_nats import ServerStartError
from liftbridge_nats._proto import api_pb2, api_pb2_grpc
from liftbridge_nats.testing import Cluster, LocalCluster

# Reasons, for tests that check LocalCluster's own surface.
_PROCESSES = pytest.mark.processes_only(
    "checks LocalCluster's process ids and work directory; "
    "tests/containers/test_container_cluster.py checks ContainerCluster's containers"
)
_NATS_CONFIG = pytest.mark.processes_only(
    "configures nats-server with nats_config/nats_url_userinfo, which only LocalCluster takes"
)
_GRPC_TLS = pytest.mark.processes_only(
    "serves gRPC over TLS with certificate files from the host, which only LocalCluster takes"
)


async def _metadata(broker: str, streams: list[str] | None = None) -> api_pb2.FetchMetadataResponse:
    # No gRPC deadline: with a peer down the server would wait for the whole deadline
    # and fail; without one it answers after its own 3 s survey timeout.
    async with grpc.aio.insecure_channel(broker) as channel, asyncio.timeout(15):
        stub = api_pb2_grpc.APIStub(channel)
        return await stub.FetchMetadata(api_pb2.FetchMetadataRequest(streams=streams or []))


async def _create_stream(broker: str, name: str, subject: str, replication: int = 1) -> None:
    async with grpc.aio.insecure_channel(broker) as channel:
        stub = api_pb2_grpc.APIStub(channel)
        await stub.CreateStream(
            api_pb2.CreateStreamRequest(name=name, subject=subject, replicationFactor=replication),
            timeout=10,
        )


async def _first_message(broker: str, stream: str) -> api_pb2.Message:
    """Read the earliest message of partition 0 of ``stream``."""
    async with grpc.aio.insecure_channel(broker) as channel:
        stub = api_pb2_grpc.APIStub(channel)
        call = stub.Subscribe(
            api_pb2.SubscribeRequest(stream=stream, startPosition=api_pb2.EARLIEST)
        )
        try:
            async with asyncio.timeout(10):
                async for msg in call:
                    # The server opens every subscription with an empty message.
                    if msg.stream:
                        return msg
        finally:
            call.cancel()
    raise AssertionError(f"subscription to {stream} ended without a message")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ---------------------------------------------------------------- session fixtures


async def test_single_node_fixture_metadata_stream_and_raw_nats_publish(
    liftbridge_cluster: Cluster,
    nats_client: NATS,
    unique_name: Callable[..., str],
) -> None:
    """The 1-node fixture answers metadata, creates streams, and stores a raw NATS
    message (no envelope) as a plain value with no key."""
    broker = liftbridge_cluster.brokers[0]
    meta = await _metadata(broker)
    assert [(b.id, f"{b.host}:{b.port}") for b in meta.brokers] == [("n0", broker)]
    assert liftbridge_cluster.nats_url.startswith("nats://127.0.0.1:")

    name = unique_name("harness")
    await _create_stream(broker, name, name)
    meta = await _metadata(broker, [name])
    assert meta.streamMetadata[0].partitions[0].leader == "n0"

    await nats_client.publish(name, b"plain value")
    await nats_client.flush()
    msg = await _first_message(broker, name)
    assert (msg.offset, msg.value, msg.key) == (0, b"plain value", b"")
    # The server records the NATS subject and reply subject as headers of its own.
    assert dict(msg.headers) == {"subject": name.encode(), "reply": b""}
    assert msg.subject == name


def test_unique_name_is_unique_and_subject_safe(unique_name: Callable[..., str]) -> None:
    names = {unique_name("a.b c*") for _ in range(50)} | {unique_name() for _ in range(50)}
    assert len(names) == 100
    for name in names:
        assert not set(name) & set(". *>\t")


def test_three_node_fixture_lists_every_broker(liftbridge_cluster3: Cluster) -> None:
    async def check() -> None:
        for broker in liftbridge_cluster3.brokers:
            meta = await _metadata(broker)
            assert sorted(b.id for b in meta.brokers) == ["n0", "n1", "n2"]

    asyncio.run(check())


# ---------------------------------------------------------------- private clusters


@_PROCESSES
async def test_kill_and_restart_node_rejoins_metadata(unique_name: Callable[..., str]) -> None:
    async with LocalCluster(3) as cluster:
        stream = unique_name("rf3")
        await _create_stream(cluster.brokers[0], stream, stream, replication=3)
        pids = cluster.pids()
        await cluster.kill_node(1)
        assert not cluster.is_running(1)
        assert len(cluster.pids()) == len(pids) - 1

        # The two live nodes still form a working cluster.
        await cluster.wait_ready(timeout=20)
        other = unique_name("while-n1-down")
        await _create_stream(cluster.brokers[2], other, other)

        await cluster.restart_node(1)
        assert cluster.is_running(1)
        for broker in cluster.brokers:
            meta = await _metadata(broker, [stream])
            assert {(b.id, b.port) for b in meta.brokers} == {
                (node_id, int(addr.rsplit(":", 1)[1]))
                for node_id, addr in zip(cluster.node_ids, cluster.brokers, strict=True)
            }
            assert meta.streamMetadata[0].partitions[0].leader in cluster.node_ids


@_PROCESSES
async def test_kill_and_restart_nats_clients_reconnect(unique_name: Callable[..., str]) -> None:
    async with LocalCluster() as cluster:
        stream = unique_name("nats-restart")
        await _create_stream(cluster.brokers[0], stream, stream)
        reconnected = asyncio.Event()

        async def on_reconnect() -> None:
            reconnected.set()

        nc = await nats.connect(
            cluster.nats_url,
            reconnected_cb=on_reconnect,
            reconnect_time_wait=0.2,
            max_reconnect_attempts=-1,
        )
        try:
            nats_pids = set(cluster.pids())
            await cluster.kill_nats()
            assert not cluster.is_nats_running()
            assert len(nats_pids - set(cluster.pids())) == 1
            await cluster.restart_nats()
            await asyncio.wait_for(reconnected.wait(), 15)
            assert nc.is_connected
            # Liftbridge reconnected too: a raw publish is stored.
            await nc.publish(stream, b"after restart")
            await nc.flush()
            msg = await _first_message(cluster.brokers[0], stream)
            assert msg.value == b"after restart"
        finally:
            await nc.close()


@_PROCESSES
def test_sync_cluster_cleans_up_processes_and_dirs() -> None:
    with LocalCluster() as cluster:
        pids = cluster.pids()
        workdir = cluster.workdir
        assert len(pids) == 2 and all(_pid_alive(p) for p in pids)
        assert workdir.is_dir()
    assert not any(_pid_alive(p) for p in pids)
    assert not workdir.exists()


@_PROCESSES
async def test_failed_start_raises_with_logs_and_cleans_up() -> None:
    cluster = LocalCluster(liftbridge_config={"no.such.setting": 1}, start_timeout=20)
    with pytest.raises(ServerStartError) as info:
        await cluster.start()
    message = str(info.value)
    assert 'Unknown configuration setting "no.such.setting"' in message
    assert cluster.pids() == []
    logs = re.findall(r"\S+/logs/n0\.log", message)
    assert logs, message
    assert not Path(logs[0]).parent.parent.exists()


@_PROCESSES
async def test_cancelled_start_cleans_up() -> None:
    cluster = LocalCluster(3)
    task = asyncio.create_task(cluster.start())
    # Cancel while the servers are up but (most likely) not ready yet.
    deadline = time.monotonic() + 10
    while len(cluster.pids()) < 4:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    pids = cluster.pids()
    workdir = cluster.workdir
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not any(_pid_alive(p) for p in pids)
    assert not workdir.exists()


# ---------------------------------------------------------------- config generation


def test_generated_config_merges_dotted_and_nested_overrides() -> None:
    from liftbridge_nats.testing._config import node_config, render_yaml

    flat = node_config(
        node_id="n1",
        port=1234,
        data_dir="/tmp/d",
        nats_url="nats://127.0.0.1:4222",
        namespace="ns",
        node_ids=["n0", "n1", "n2"],
        log_level="debug",
        overrides={
            "streams.auto.pause.time": "2s",
            "clustering": {"replica": {"max": {"lag": {"time": "7s"}}}},
            "activity.stream.enabled": None,
        },
    )
    assert flat["streams.auto.pause.time"] == "2s"
    assert flat["clustering.replica.max.lag.time"] == "7s"
    assert flat["clustering.replica.max.idle.wait"] == "500ms"
    assert flat["clustering.raft.bootstrap.peers"] == ["n0", "n1", "n2"]
    assert "clustering.raft.bootstrap.seed" not in flat
    assert "activity.stream.enabled" not in flat
    text = render_yaml(flat)
    assert 'peers: ["n0", "n1", "n2"]' in text
    assert "\n  replica:\n    max:\n" in text


def test_generated_config_rejects_conflicting_keys() -> None:
    from liftbridge_nats.testing._config import render_yaml

    with pytest.raises(ValueError, match="conflicts"):
        render_yaml({"nats.embedded": True, "nats.embedded.config": "/x"})


def test_log_level_reaches_the_server(liftbridge_cluster_factory: Callable[..., Any]) -> None:
    """The server itself validates the generated file: a bad level fails fast."""
    with pytest.raises(ServerStartError, match=r"Invalid logging\.level"):
        liftbridge_cluster_factory(log_level="loud", start_timeout=20).start_sync()


# ---------------------------------------------------------------- auth and TLS


@_NATS_CONFIG
async def test_nats_token_reaches_nodes_and_is_masked_in_logs() -> None:
    token = "harness-secret-token-42"
    async with LocalCluster(
        nats_config=f'authorization {{ token: "{token}" }}', nats_url_userinfo=token
    ) as cluster:
        # The node connected with the token (the cluster became ready), logged its
        # NATS URL, and the tail shown to users has the token masked.
        assert "***@127.0.0.1" in cluster.log_tail(200)
        assert token not in cluster.log_tail(200)
        nc = await nats.connect(cluster.nats_url.replace("nats://", f"nats://{token}@"))
        await nc.close()


@_GRPC_TLS
def test_grpc_tls_cluster_becomes_ready(tmp_path: Path) -> None:
    from liftbridge_nats.testing._certs import generate_certificates

    certs = generate_certificates(tmp_path)
    config = {
        "tls.cert": str(certs.server_cert),
        "tls.key": str(certs.server_key),
        "tls.client.auth.enabled": True,
        "tls.client.auth.ca": str(certs.ca_cert),
    }
    with LocalCluster(liftbridge_config=config, grpc_tls=certs) as cluster:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=certs.ca_cert.read_bytes(),
            private_key=certs.client_key.read_bytes(),
            certificate_chain=certs.client_cert.read_bytes(),
        )
        with grpc.secure_channel(cluster.brokers[0], credentials) as channel:
            meta = api_pb2_grpc.APIStub(channel).FetchMetadata(
                api_pb2.FetchMetadataRequest(), timeout=10
            )
        assert [b.id for b in meta.brokers] == ["n0"]


@_PROCESSES
async def test_node_that_dies_by_itself_is_reported(unique_name: Callable[..., str]) -> None:
    async with LocalCluster(3) as cluster:
        pid = cluster.node_pid(2)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # behind the harness's back: a crash
        with pytest.raises(
            ServerStartError, match=r"liftbridge n2 exited by itself \(liftbridge n2: signal 9;"
        ):
            await cluster.wait_ready(timeout=10)
        # A paused node is alive but silent; resuming it makes the cluster whole again.
        await cluster.restart_node(2)
        await cluster.pause_node(1)
        with pytest.raises(ServerStartError, match="not ready within 2 s"):
            await cluster.wait_ready(timeout=2)
        await cluster.resume_node(1)
        await cluster.wait_ready()


@_PROCESSES
async def test_pause_node_returns_once_every_thread_is_stopped() -> None:
    # SIGSTOP alone returns while some threads still run (they stop when next
    # scheduled); pause_node waits for all of them, so a paused node acks nothing.
    async with LocalCluster(1) as cluster:
        pid = cluster.node_pid(0)
        assert pid is not None
        for _ in range(20):
            await cluster.pause_node(0)
            states = _thread_states(pid)
            assert len(states) > 1 and set(states.values()) <= {"T", "t"}, states
            await cluster.resume_node(0)
        await cluster.wait_ready(timeout=10)


def _thread_states(pid: int) -> dict[str, str]:
    """Each thread of ``pid`` and its state letter, from procfs."""
    return {
        task.name: (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        for task in Path(f"/proc/{pid}/task").iterdir()
    }
