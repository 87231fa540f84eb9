"""The full-disk fault of ContainerCluster on one node: ``data_tmpfs`` gives the node a
small data directory that survives its restarts, ``fill_disk`` makes its writes fail
with ENOSPC (Liftbridge v1.9.0 then exits), ``free_disk`` heals, the node serves again,
and what was acked before is still on its disk. About 20 s.

The stored bytes are checked in the data directory, not read back through the node:
v1.9.0 leaves a torn message at the end of a log whose write hit ENOSPC, and after the
restart a subscription that reaches it makes the node panic ("Read corrupted data").
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from liftbridge_nats import Client, LiftbridgeError
from liftbridge_nats.testing import ContainerCluster
from liftbridge_nats.testing._docker import CLUSTER_LABEL

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


async def test_a_full_disk_fails_writes_and_the_data_survives_the_restart(
    docker_engine: Any,
) -> None:
    async with ContainerCluster(1, data_tmpfs="32m") as cluster:
        label = f"{CLUSTER_LABEL}={cluster.namespace}"
        async with Client(cluster.brokers, timeout=10) as client:
            await client.create_stream("disk", "disk")
            for n in range(5):
                await client.publish("disk", f"before-{n}".encode())
            await cluster.fill_disk(0)
            assert cluster.full_disks == [0]
            # Writes fail now: the first appends may still fit in the log's last page,
            # then one errors out; v1.9.0 exits within about 5 s (its high-watermark
            # checkpoint cannot be written either).
            acked: list[bytes] = []
            failed: LiftbridgeError | None = None
            for n in range(200):
                value = f"full-{n}".encode()
                try:
                    await client.publish("disk", value, timeout=3)
                except LiftbridgeError as exc:
                    failed = exc
                    break
                acked.append(value)
            assert failed is not None, f"{len(acked)} publishes acked on a full disk"
            for _ in range(60):
                if not cluster.is_running(0):
                    break
                await asyncio.sleep(0.5)
            await cluster.free_disk(0)
            assert cluster.full_disks == []
            if not cluster.is_running(0):
                await cluster.restart_node(0)
            await cluster.wait_ready()
            log = cluster.node_log(0)
            assert "no space left on device" in log, log[-2000:]
        # A new client: the old one's channel went with the node.
        async with Client(cluster.brokers, timeout=10) as client:
            assert await client.publish("disk", b"after") is not None
        holder = docker_engine.client.containers.get(f"{cluster.namespace}-n0-disk")
        code, stored = holder.exec_run(["sh", "-c", "cat /data/streams/disk/0/*.log"])
        assert code == 0, stored
        # Everything acked survived the restart, on the same tmpfs.
        missing = [
            v for v in [*(f"before-{n}".encode() for n in range(5)), *acked] if v not in stored
        ]
        assert not missing, missing
        assert b"after" in stored
        volumes = docker_engine.client.volumes.list(filters={"label": label})
        assert len(volumes) == 1, volumes
    # The volume and its holder go with the cluster.
    assert not docker_engine.client.volumes.list(filters={"label": label})
    assert not docker_engine.client.containers.list(all=True, filters={"label": label})
