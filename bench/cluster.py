"""Servers for a run: a LocalCluster, plus stream creation over raw gRPC.

Streams are made with the generated stubs rather than the SDK's Client so that setting
up a case depends on nothing that is being measured.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import grpc
import grpc.aio

from liftbridge_nats._proto import api_pb2, api_pb2_grpc
from liftbridge_nats.testing import LocalCluster


class Streams:
    """Create and delete benchmark streams, waiting until they can take publishes."""

    def __init__(self, brokers: list[str]) -> None:
        self._brokers = brokers
        self._channel = grpc.aio.insecure_channel(brokers[0])
        self._stub = api_pb2_grpc.APIStub(self._channel)

    async def close(self) -> None:
        """Close the gRPC channel."""
        await self._channel.close()

    async def create(self, name: str, partitions: int, replication: int) -> None:
        """Create stream ``name`` on subject ``name`` and wait for leaders (and full ISRs)."""
        request = api_pb2.CreateStreamRequest(
            subject=name, name=name, partitions=partitions, replicationFactor=replication
        )
        deadline = time.monotonic() + 60 + partitions
        attempts = 0
        while True:
            attempts += 1
            try:
                # Hundreds of partitions take a 3-node cluster a while to create.
                await self._stub.CreateStream(request, timeout=10 + partitions / 10)
                break
            except grpc.aio.AioRpcError as exc:
                if attempts > 1 and exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                    break  # an earlier attempt timed out but created it (names are unique)
                # Right after start-up there may be no metadata leader yet.
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cannot create stream {name}: {exc.details()}") from exc
                await asyncio.sleep(0.2)
        await self.wait_ready(name, partitions, replication, deadline)

    async def wait_ready(
        self, name: str, partitions: int, replication: int, deadline: float
    ) -> None:
        """Wait until every partition has a leader and ``replication`` in-sync replicas."""
        while True:
            reply = await self._stub.FetchMetadata(
                api_pb2.FetchMetadataRequest(streams=[name]), timeout=10
            )
            ready = 0
            for stream in reply.streamMetadata:
                if stream.name != name:
                    continue
                for part in stream.partitions.values():
                    if part.leader and len(part.isr) >= replication:
                        ready += 1
            if ready >= partitions:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"stream {name} has no leader or full ISR after 60 s")
            await asyncio.sleep(0.1)

    async def leader_address(self, name: str, partition: int = 0) -> str:
        """``host:port`` of the partition's leader."""
        reply = await self._stub.FetchMetadata(
            api_pb2.FetchMetadataRequest(streams=[name]), timeout=10
        )
        addresses = {b.id: f"{b.host}:{b.port}" for b in reply.brokers}
        leader = ""
        for stream in reply.streamMetadata:
            if stream.name == name:
                leader = stream.partitions[partition].leader
        if leader not in addresses:
            raise RuntimeError(f"stream {name} partition {partition} has no known leader")
        return addresses[leader]

    async def newest_offset(self, name: str, partition: int = 0) -> int:
        """Newest offset of a partition (-1 when empty), asked of its leader.

        Any broker answers FetchMetadata, but only the leader knows the exact offset.
        """
        address = await self.leader_address(name, partition)
        async with grpc.aio.insecure_channel(address) as channel:
            answer = await api_pb2_grpc.APIStub(channel).FetchPartitionMetadata(
                api_pb2.FetchPartitionMetadataRequest(stream=name, partition=partition),
                timeout=10,
            )
        return int(answer.metadata.newestOffset)

    async def delete(self, name: str) -> None:
        """Delete a stream (frees its disk space); errors are ignored."""
        with suppress(grpc.aio.AioRpcError):
            await self._stub.DeleteStream(api_pb2.DeleteStreamRequest(name=name), timeout=30)


@asynccontextmanager
async def running_cluster(nodes: int) -> AsyncIterator[tuple[LocalCluster, Streams]]:
    """Start a LocalCluster of ``nodes`` nodes with quiet logs; stop it afterwards."""
    cluster = LocalCluster(nodes, log_level="warn", start_timeout=120.0)
    await cluster.start()
    streams = Streams(cluster.brokers)
    try:
        yield cluster, streams
    finally:
        await streams.close()
        await cluster.stop()


def stopped_servers(cluster: LocalCluster) -> list[str]:
    """The names of the cluster's servers that are no longer running."""
    down = [] if cluster.is_nats_running() else ["nats-server"]
    down += [node for i, node in enumerate(cluster.node_ids) if not cluster.is_running(i)]
    return down


async def restart_stopped(cluster: LocalCluster) -> list[str]:
    """Start every server of the cluster that stopped again (same ports and data) and
    wait until the cluster is ready; the names of those restarted. Raises
    :class:`~liftbridge_nats.ServerStartError` when the cluster is not ready after that
    (with every node down, say: the NATS server waits for a running node)."""
    down = stopped_servers(cluster)
    if "nats-server" in down:
        await cluster.restart_nats()
    for i, node in enumerate(cluster.node_ids):
        if node in down:
            await cluster.restart_node(i)
    return down


class FailureLogs:
    """Keeps the servers' logs when cases fail, in ``path``.

    The cluster's directory, logs included, is deleted when the run ends, and a broker
    that dies in the middle of a run fails every case after it: what it logged is the
    only account of why. The tail of every server's log is written at the first failed
    case and again whenever the set of stopped servers changes (so a run of failures
    after one loss writes it once). A run with no failure writes nothing and removes
    the file of an earlier run.
    """

    LINES = 300

    def __init__(self, cluster: LocalCluster, path: Path) -> None:
        self._cluster = cluster
        self.path = path
        self._down: tuple[str, ...] | None = None
        path.unlink(missing_ok=True)

    def case_failed(self, case: str, error: str) -> None:
        """Note a failed case; write the log tails when they may tell something new."""
        down = tuple(stopped_servers(self._cluster))
        if down == self._down:
            return
        self._down = down
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            out.write(f"===== after the failed case {case}: {error}\n")
            out.write(f"stopped servers: {', '.join(down) or 'none'}\n")
            out.write(self._cluster.log_tail(self.LINES) + "\n\n")
        stopped = f"; stopped: {', '.join(down)}" if down else ""
        print(f"  server logs kept in {self.path}{stopped}", flush=True)
