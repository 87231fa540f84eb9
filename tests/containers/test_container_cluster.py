"""ContainerCluster itself: containers made by testcontainers with its reaper off,
addresses on 127.0.0.1 only, the image it runs, its faults (kill, stop, pause, restart of
nodes and NATS), and its clean-up after a normal stop, a failed start, a cancelled start,
Ctrl-C and a killed test process."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from testcontainers.core.config import TestcontainersConfiguration
from testcontainers.core.labels import LABEL_SESSION_ID, LABEL_TESTCONTAINERS, SESSION_ID

from liftbridge_nats import Client, ServerStartError, StartPosition
from liftbridge_nats.testing import DEFAULT_LIFTBRIDGE_VERSION, ContainerCluster
from liftbridge_nats.testing._containers import HOST_BINDING
from liftbridge_nats.testing._docker import CLUSTER_LABEL, OWNER_LABEL, REAPER_ENV, disable_reaper
from liftbridge_nats.testing._image import (
    NATS_VERSION_LABEL,
    VERSION_LABEL,
    ensure_image,
    image_inputs,
)
from liftbridge_nats.testing._install import binary_version, find_nats_server

from ._roundtrip import round_trip

pytestmark = pytest.mark.timeout(300)


def _resources(client: Any, label: str) -> list[str]:
    """Names of the containers and networks carrying ``label``."""
    names = [c.name for c in client.containers.list(all=True, filters={"label": label})]
    return names + [n.name for n in client.networks.list(filters={"label": label})]


def _state(client: Any, name: str) -> dict[str, Any]:
    return dict(client.containers.get(name).attrs["State"])


def _listeners(port: int) -> set[str]:
    """Local IPv4 and IPv6 addresses with a listening TCP socket on ``port`` (from
    /proc/net/tcp and /proc/net/tcp6; each 32-bit word of an address is little-endian)."""
    found = set()
    for family, table in ((socket.AF_INET, "tcp"), (socket.AF_INET6, "tcp6")):
        path = Path("/proc/net") / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                words = [bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, len(address), 8)]
                found.add(socket.inet_ntop(family, b"".join(words)))
    return found


# ---------------------------------------------------------------- testcontainers' reaper


def test_reaper_is_off_unless_the_user_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """testcontainers' reaper needs a registry: the harness turns it off, except when the
    user said something about it (environment or ~/.testcontainers.properties)."""
    monkeypatch.delenv(REAPER_ENV, raising=False)
    config = TestcontainersConfiguration(tc_properties={})
    assert disable_reaper(config) is True
    assert config.ryuk_disabled is True

    monkeypatch.setenv(REAPER_ENV, "false")
    config = TestcontainersConfiguration(tc_properties={})
    assert disable_reaper(config) is False
    monkeypatch.setenv(REAPER_ENV, "true")
    assert disable_reaper(TestcontainersConfiguration(tc_properties={})) is True

    monkeypatch.delenv(REAPER_ENV)
    config = TestcontainersConfiguration(tc_properties={"ryuk.disabled": "false"})
    assert disable_reaper(config) is False


# ---------------------------------------------------------------- image and addresses


def test_local_image_records_the_versions_it_holds(docker_engine: Any) -> None:
    tag = ensure_image(docker_engine)
    inputs = image_inputs()
    nats_version = binary_version(find_nats_server()).split()[-1]
    assert (
        tag
        == f"liftbridge-nats/servers:liftbridge-{DEFAULT_LIFTBRIDGE_VERSION}-nats-{nats_version}"
    )
    found = docker_engine.client.images.get(tag).labels
    assert found[VERSION_LABEL] == inputs.liftbridge_version == DEFAULT_LIFTBRIDGE_VERSION
    assert found[NATS_VERSION_LABEL] == nats_version
    # What the servers in the image say about themselves, and that they are what the
    # process backend runs (same binaries, so the same bytes).
    out = docker_engine.run(
        tag, entrypoint=["liftbridge", "--version"], remove=True, network="none"
    )
    assert DEFAULT_LIFTBRIDGE_VERSION in out.decode()
    out = docker_engine.run(
        tag, entrypoint=["nats-server", "--version"], remove=True, network="none"
    )
    assert nats_version in out.decode()
    # Up to date: asking again reuses it.
    image_id = docker_engine.client.images.get(tag).id
    assert ensure_image(docker_engine) == tag
    assert docker_engine.client.images.get(tag).id == image_id


async def test_one_node_round_trip_through_loopback_ports_only(
    docker_engine: Any, unique_name: Callable[[str], str]
) -> None:
    async with ContainerCluster() as cluster:
        label = f"{CLUSTER_LABEL}={cluster.namespace}"
        containers = docker_engine.client.containers.list(all=True, filters={"label": label})
        # NATS and n0, both of this test process.
        assert len(containers) == 2
        assert {c.labels[OWNER_LABEL] for c in containers} == {
            f"{socket.gethostname()}:{os.getpid()}"
        }
        published = {
            (binding["HostIp"], int(binding["HostPort"]))
            for container in containers
            for bindings in container.attrs["NetworkSettings"]["Ports"].values()
            if bindings
            for binding in bindings
        }
        addresses = [cluster.nats_url.removeprefix("nats://"), cluster.brokers[0]]
        addresses.append(cluster.nats_monitor_url.removeprefix("http://"))
        assert published == {("127.0.0.1", int(a.rsplit(":", 1)[1])) for a in addresses}
        # What the host listens on for them: 127.0.0.1, no IPv6 and no other address.
        for _, port in published:
            assert _listeners(port) == {"127.0.0.1"}, port
        network = docker_engine.client.networks.get(cluster.namespace)
        assert network.attrs["Options"][HOST_BINDING] == "127.0.0.1"
        # Created and started by testcontainers (its labels, this process's session),
        # with its reaper turned off.
        assert {c.labels[LABEL_TESTCONTAINERS] for c in containers} == {"true"}
        assert {c.labels[LABEL_SESSION_ID] for c in containers} == {SESSION_ID}
        assert network.attrs["Labels"][LABEL_SESSION_ID] == SESSION_ID
        reapers = docker_engine.client.containers.list(all=True, filters={"name": "ryuk"})
        assert reapers == []
        assert cluster.nats_url.startswith("nats://127.0.0.1:")
        assert cluster.brokers[0].startswith("127.0.0.1:")

        result = await round_trip(cluster.nats_url, cluster.brokers, unique_name("smoke"))
        result.check()
        async with Client(cluster.brokers) as client:
            metadata = await client.fetch_metadata()
        assert [(b.id, b.address) for b in metadata.brokers] == [("n0", cluster.brokers[0])]
        assert "Starting Liftbridge server" in cluster.node_log(0)
    assert _resources(docker_engine.client, label) == []


async def test_host_network_listens_on_loopback_only(
    docker_engine: Any, unique_name: Callable[[str], str]
) -> None:
    async with ContainerCluster(2, network="host") as cluster:
        label = f"{CLUSTER_LABEL}={cluster.namespace}"
        containers = docker_engine.client.containers.list(filters={"label": label})
        assert {c.attrs["HostConfig"]["NetworkMode"] for c in containers} == {"host"}
        addresses = [cluster.nats_url.removeprefix("nats://"), *cluster.brokers]
        addresses.append(cluster.nats_monitor_url.removeprefix("http://"))
        for address in addresses:
            assert _listeners(int(address.rsplit(":", 1)[1])) == {"127.0.0.1"}, address
        result = await round_trip(
            cluster.nats_url, cluster.brokers, unique_name("host"), replication=2
        )
        result.check()
    assert _resources(docker_engine.client, label) == []


# ---------------------------------------------------------------- faults


async def test_kill_stop_and_restart_nodes_of_three(
    docker_engine: Any, unique_name: Callable[[str], str]
) -> None:
    async with ContainerCluster(3) as cluster, Client(cluster.brokers, timeout=20) as client:
        stream = unique_name("rf3")
        await client.create_stream(stream, stream, replication_factor=3)

        await cluster.kill_node(1)
        assert not cluster.is_running(1)
        assert _state(docker_engine.client, cluster.container_name(1))["ExitCode"] == 137  # SIGKILL
        # The two live nodes still form a working cluster.
        await cluster.wait_ready(timeout=30)
        other = unique_name("while-n1-down")
        await client.create_stream(other, other)

        await cluster.restart_node(1)
        assert cluster.is_running(1)
        await cluster.stop_node(2)
        state = _state(docker_engine.client, cluster.container_name(2))
        assert state["Status"] == "exited" and state["ExitCode"] != 137  # SIGTERM was enough
        await cluster.restart_node(2)

        metadata = await client.fetch_metadata([stream])
        assert sorted((b.id, b.address) for b in metadata.brokers) == sorted(
            zip(cluster.node_ids, cluster.brokers, strict=True)
        )
        assert metadata.streams[stream].partitions[0].leader in cluster.node_ids


@pytest.mark.parametrize("network", ["bridge", "host"])
async def test_kill_and_restart_nats(
    docker_engine: Any, unique_name: Callable[[str], str], network: str
) -> None:
    """Liftbridge reconnects to a restarted NATS container; so does a nats-py client with
    host networking. Through a published port (bridge) a client's reconnect attempts
    around the kill can be accepted and dropped by docker-proxy, which nats-py answers
    with an unclosed transport, so there the client connects again afterwards."""
    async with ContainerCluster(network=network) as cluster:
        stream = unique_name("nats-restart")
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
            async with Client(cluster.brokers) as client:
                await client.create_stream(stream, stream)
                if network == "bridge":
                    await nc.close()
                await cluster.kill_nats()
                assert not cluster.is_nats_running()
                await cluster.restart_nats()
                assert cluster.is_nats_running()
                if network == "bridge":
                    nc = await nats.connect(cluster.nats_url)
                else:
                    await asyncio.wait_for(reconnected.wait(), 20)
                # Liftbridge reconnected too: a raw publish is stored. It is stored a
                # moment after the flush, so the read waits for it (a read that stops
                # at the latest offset can come first and find the stream empty).
                await nc.publish(stream, b"after restart")
                await nc.flush()
                async with client.subscribe(stream, start_position=StartPosition.EARLIEST) as sub:
                    first = await asyncio.wait_for(anext(aiter(sub)), 20)
            assert (first.offset, first.value) == (0, b"after restart")
        finally:
            await nc.close()


async def test_crash_is_reported_and_pause_freezes_a_node(docker_engine: Any) -> None:
    async with ContainerCluster(3) as cluster:
        # Behind the harness's back: a crash.
        await asyncio.to_thread(docker_engine.client.containers.get(cluster.container_name(2)).kill)
        with pytest.raises(
            ServerStartError,
            match=r"liftbridge n2 exited by itself \(liftbridge n2: exit status 137 \(signal 9\);",
        ):
            await cluster.wait_ready(timeout=10)
        await cluster.restart_node(2)

        # A paused node is alive but silent; resuming it makes the cluster whole again.
        await cluster.pause_node(1)
        assert _state(docker_engine.client, cluster.container_name(1))["Status"] == "paused"
        assert cluster.is_running(1)
        with pytest.raises(ServerStartError, match="not ready within 2 s"):
            await cluster.wait_ready(timeout=2)
        await cluster.resume_node(1)
        await cluster.wait_ready()


# ---------------------------------------------------------------- clean-up


async def test_failed_start_raises_with_logs_and_leaves_nothing(docker_engine: Any) -> None:
    cluster = ContainerCluster(liftbridge_config={"no.such.setting": 1}, start_timeout=30)
    with pytest.raises(ServerStartError) as info:
        await cluster.start()
    # Liftbridge panics with the error: its line is named, above the goroutine dump.
    assert (
        "liftbridge n0 exited by itself (liftbridge n0: exit status 2: panic: Unknown "
        'configuration setting "no.such.setting"'
    ) in str(info.value)
    assert _resources(docker_engine.client, f"{CLUSTER_LABEL}={cluster.namespace}") == []


async def test_cancelled_start_leaves_nothing(docker_engine: Any) -> None:
    cluster = ContainerCluster(3)
    label = f"{CLUSTER_LABEL}={cluster.namespace}"
    task = asyncio.create_task(cluster.start())
    # Cancel once containers exist but (most likely) before the cluster is ready.
    deadline = time.monotonic() + 60
    while len(await asyncio.to_thread(_resources, docker_engine.client, label)) < 3:
        assert time.monotonic() < deadline and not task.done()
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _resources(docker_engine.client, label) == []


_SCRIPT = """
import sys, time
from liftbridge_nats.testing import ContainerCluster
print("starting", flush=True)
with ContainerCluster(int(sys.argv[1])) as cluster:
    print("ready", cluster.namespace, flush=True)
    time.sleep(600)
"""


def _spawn(nodes: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, str(nodes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _expect_line(proc: subprocess.Popen[str], start: str) -> None:
    """The script's next line starts with ``start`` (else fail with what it said)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(start):
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"expected {start!r}, got {line!r}; stderr:\n{err}")


def _end(proc: subprocess.Popen[str]) -> str:
    """Kill the script if it still runs; return its stderr (closing its pipes)."""
    if proc.poll() is None:
        proc.kill()
    if proc.stdout is not None and proc.stdout.closed:  # communicate() ran already
        proc.wait()
        return ""
    return proc.communicate(timeout=60)[1]


def _owned_by(client: Any, proc: subprocess.Popen[str]) -> list[str]:
    return _resources(client, f"{OWNER_LABEL}={socket.gethostname()}:{proc.pid}")


@pytest.mark.parametrize("when", ["while running", "while starting"])
def test_ctrl_c_leaves_nothing(docker_engine: Any, when: str) -> None:
    proc = _spawn(3)
    try:
        _expect_line(proc, "starting")
        if when == "while running":
            _expect_line(proc, "ready ")
        else:
            deadline = time.monotonic() + 60
            while len(_owned_by(docker_engine.client, proc)) < 2:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
        assert _owned_by(docker_engine.client, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert "KeyboardInterrupt" in err
    finally:
        _end(proc)
    assert _owned_by(docker_engine.client, proc) == []


def test_killed_test_process_leftovers_are_cleaned(docker_engine: Any) -> None:
    proc = _spawn(1)
    try:
        _expect_line(proc, "starting")
        _expect_line(proc, "ready ")
    finally:
        _end(proc)  # SIGKILL: no clean-up can run
    assert len(_owned_by(docker_engine.client, proc)) == 3  # NATS, n0, the network
    clean = [sys.executable, "-m", "liftbridge_nats.testing", "clean", "--check"]
    done = subprocess.run(clean, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert "left behind" in done.stderr
    assert _owned_by(docker_engine.client, proc) == []
    done = subprocess.run(clean, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
