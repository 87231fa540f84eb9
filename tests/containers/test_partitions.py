"""Network partitions on 3-node ContainerClusters (bridge network): the partition leader
cut off under ALL-acked publishes, a node cut from NATS that still answers gRPC, and two
nodes partitioned from each other while the cluster keeps serving.

Each test checks the promises of a durable log across the fault: every publish ends
with an ack or an SDK error, every acked message is stored once at the offset its ack
gave, offsets have no gap, and publishing works again after the heal. The first two
tests share one cluster (each heals what it did); the third needs one NATS server per
node; the last stops a cluster with faults in force. The whole file takes about a
minute.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import nats
import pytest

from liftbridge_nats import (
    Ack,
    AckPolicy,
    AckTimeoutError,
    Client,
    LiftbridgeError,
    Message,
    PartitionInfo,
    Publisher,
    StartPosition,
    StopPosition,
)
from liftbridge_nats.testing import ContainerCluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

# Clients reconnect forever, quickly: a fault must not end a test's NATS connection.
_NATS_OPTIONS: dict[str, Any] = {
    "connect_timeout": 3,
    "max_reconnect_attempts": -1,
    "reconnect_time_wait": 0.25,
}
# The shortest isolation of a leader: twice the leader timeout the harness sets for
# multi-node clusters (3 s). It lasts until another node leads, however long that takes.
_ISOLATION = 6.0


@pytest.fixture(scope="module")
def shared_cluster(docker_engine: Any) -> Iterator[ContainerCluster]:
    with ContainerCluster(3) as cluster:
        yield cluster


@pytest.fixture
async def cluster(shared_cluster: ContainerCluster) -> AsyncIterator[ContainerCluster]:
    yield shared_cluster
    # Whatever the test did, the next one starts on a whole cluster.
    await shared_cluster.heal_all()
    await shared_cluster.wait_ready()


# ---------------------------------------------------------------- helpers


async def _wait_until(predicate: Callable[[], Any], *, within: float, what: str) -> None:
    """Poll the async ``predicate`` until it is truthy; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not await predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.2)


async def _partition(client: Client, stream: str) -> PartitionInfo:
    """Partition 0 of ``stream`` as FetchMetadata gives it. Any broker answers that, from
    the replicated metadata; FetchPartitionMetadata must reach the leader, and a client
    that asks the one it knew after a fault gets "The request should be sent to
    partition leader", which the SDK does not retry yet."""
    return (await client.fetch_metadata([stream])).streams[stream].partitions[0]


async def _replicated_stream(client: Client, name: str) -> str:
    """Create an RF 3, min ISR 2 stream; wait until its ISR is complete; return the leader."""
    await client.create_stream(name, name, replication_factor=3, min_isr=2)

    async def full_isr() -> bool:
        info = await client.fetch_partition_metadata(name)
        return bool(info.leader) and len(info.isr) == 3

    await _wait_until(full_isr, within=30, what=f"a complete ISR on {name}")
    return (await client.fetch_partition_metadata(name)).leader


@dataclass
class _Sent:
    """Publishes of a test: values, when each was sent and ended (monotonic), futures."""

    values: list[bytes] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)
    ended_at: dict[int, float] = field(default_factory=dict)
    futures: list[asyncio.Future[Ack | None]] = field(default_factory=list)

    def after(self, moment: float) -> list[bytes]:
        """Values sent after ``moment``."""
        return [v for v, t in zip(self.values, self.sent_at, strict=True) if t > moment]

    def longest_wait(self) -> float:
        """The longest time a publish took to end, in seconds."""
        return max((self.ended_at[n] - t for n, t in enumerate(self.sent_at)), default=0.0)


async def _publish_steadily(
    pub: Publisher[bytes, bytes],
    subject: str,
    *,
    rate: float,
    seconds: float,
    into: _Sent,
) -> None:
    """ALL-acked publishes at ``rate`` a second for ``seconds``, pipelined."""
    start = time.monotonic()
    first = len(into.values)
    n = 0
    while (now := time.monotonic()) - start < seconds:
        due = start + n / rate
        if due > now:
            await asyncio.sleep(due - now)
        index = first + n
        into.values.append(f"m-{index}".encode())
        into.sent_at.append(time.monotonic())
        future = await pub.publish_async(subject, into.values[-1], ack_policy=AckPolicy.ALL)

        def ended(_: object, i: int = index) -> None:
            into.ended_at[i] = time.monotonic()

        future.add_done_callback(ended)
        into.futures.append(future)
        n += 1


async def _outcomes(sent: _Sent) -> tuple[dict[bytes, Ack], dict[bytes, BaseException]]:
    """Wait for every publish; return the acks and the errors by value. Anything but an
    Ack or a LiftbridgeError fails the test."""
    acks: dict[bytes, Ack] = {}
    errors: dict[bytes, BaseException] = {}
    results = await asyncio.gather(*sent.futures, return_exceptions=True)
    for value, result in zip(sent.values, results, strict=True):
        if isinstance(result, Ack):
            acks[value] = result
        else:
            assert isinstance(result, LiftbridgeError), f"{value!r}: {result!r}"
            errors[value] = result
    return acks, errors


async def _read_all(client: Client, stream: str) -> list[Message]:
    """Every message of partition 0, oldest first."""
    out: list[Message] = []
    async with client.subscribe(
        stream, start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
    ) as sub:
        async for message in sub:
            out.append(message)
    return out


def _check_stored(acks: dict[bytes, Ack], messages: Sequence[Message]) -> None:
    """No gap in the offsets, nothing stored twice, every acked message stored at the
    offset its ack gave."""
    offsets = [m.offset for m in messages]
    assert offsets == list(range(len(offsets))), f"the offsets have a gap: {offsets[:20]}..."
    where: dict[bytes, list[int]] = {}
    for message in messages:
        where.setdefault(message.value, []).append(message.offset)
    twice = {v: o for v, o in where.items() if len(o) > 1}
    assert not twice, f"stored twice: {list(twice.items())[:5]}"
    lost = [v for v in acks if v not in where]
    assert not lost, f"{len(lost)} acked messages are not stored: {lost[:5]}"
    moved = [v for v, ack in acks.items() if where[v] != [ack.offset]]
    assert not moved, f"stored at another offset than acked: {moved[:5]}"


def _address(engine: Any, cluster: ContainerCluster, i: int) -> str:
    """Node ``i``'s address on the cluster's network ("" when it is not on it)."""
    container = engine.client.containers.get(cluster.container_name(i))
    network = container.attrs["NetworkSettings"]["Networks"].get(cluster.namespace) or {}
    return str(network.get("IPAddress") or "")


def _refused(address: str) -> bool:
    """Whether a TCP connection to ``host:port`` is refused (blocking)."""
    import socket

    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


# ---------------------------------------------------------------- isolate_node


async def test_isolated_leader_loses_nothing_acked(
    cluster: ContainerCluster, docker_engine: Any, unique_name: Callable[[str], str]
) -> None:
    """The leader of an RF 3 stream (min ISR 2) is cut off while ALL-acked publishes go
    on, for 6 s and until another node leads: nothing acked is lost or stored twice, and
    publishing goes on after the heal, with the node back at its address."""
    name = unique_name("isolated-leader")
    addresses: list[str] = []
    nc = await nats.connect(cluster.nats_url, **_NATS_OPTIONS)
    try:
        async with Client(cluster.brokers, timeout=20) as client:
            leader = await _replicated_stream(client, name)
            victim = cluster.node_ids.index(leader)
            # retry=True re-sends only what NATS reports nobody received; with the retry
            # deadline equal to the ack timeout nothing is re-sent after a timeout, so a
            # message stored without its ack cannot be stored twice.
            async with Publisher(nc, ack_timeout=12, retry=True, retry_deadline=12) as pub:
                marks: dict[str, float] = {}
                moved_to: list[str] = []

                async def fault() -> None:
                    await asyncio.sleep(1.0)
                    addresses.append(
                        await asyncio.to_thread(_address, docker_engine, cluster, victim)
                    )
                    marks["isolated"] = time.monotonic()
                    await cluster.isolate_node(victim)
                    addresses.append(
                        await asyncio.to_thread(_address, docker_engine, cluster, victim)
                    )
                    # Clients find the port closed: docker-proxy left with the network.
                    marks["refused"] = await asyncio.to_thread(_refused, cluster.brokers[victim])
                    await asyncio.sleep(_ISOLATION)

                    async def moved() -> bool:
                        moved_to[:] = [(await _partition(client, name)).leader]
                        return moved_to[0] not in ("", leader)

                    await _wait_until(moved, within=30, what="another node to lead")
                    await cluster.heal_node(victim)
                    marks["healed"] = time.monotonic()
                    addresses.append(
                        await asyncio.to_thread(_address, docker_engine, cluster, victim)
                    )

                task = asyncio.create_task(fault())
                sent = _Sent()
                try:
                    while not task.done():
                        await _publish_steadily(pub, name, rate=400, seconds=0.5, into=sent)
                    await _publish_steadily(pub, name, rate=400, seconds=2.0, into=sent)
                finally:
                    await task
                acks, errors = await _outcomes(sent)
                assert pub.pending == 0
                # Publishing goes on after the heal.
                after = await pub.publish(name, b"after-heal", ack_policy=AckPolicy.ALL)
                assert after is not None
                acks[b"after-heal"] = after
            await cluster.wait_ready()
            new_leader = (await _partition(client, name)).leader
            messages = await _read_all(client, name)
    finally:
        await nc.close()
    print(
        f"isolated {leader} for {marks['healed'] - marks['isolated']:.1f} s: "
        f"sent={len(sent.values)} acked={len(acks) - 1} failed={len(errors)} "
        f"({sorted({type(e).__name__ for e in errors.values()})}) stored={len(messages)} "
        f"leader {moved_to[0]} while isolated, {new_leader} at the end; "
        f"longest wait {sent.longest_wait():.1f} s"
    )
    assert marks["refused"], f"{cluster.brokers[victim]} took a connection while isolated"
    before, isolated, healed = addresses
    assert before and not isolated and healed == before, addresses
    _check_stored(acks, messages)
    sent_after_heal = sent.after(marks["healed"])
    assert sent_after_heal, "nothing was published after the heal"
    failed_after_heal = [errors[v] for v in sent_after_heal if v in errors]
    assert not failed_after_heal, (
        f"{len(failed_after_heal)} of {len(sent_after_heal)} publishes after the heal "
        f"failed: {failed_after_heal[:3]}"
    )


# ---------------------------------------------------------------- isolate_nats


async def test_node_cut_from_nats_answers_grpc_but_acks_nothing(
    cluster: ContainerCluster, unique_name: Callable[[str], str]
) -> None:
    """A node cut from NATS still serves gRPC (metadata from what it knows), but what is
    published to the partition it leads gets no ack; after the heal it does."""
    name = unique_name("nats-cut")
    nc = await nats.connect(cluster.nats_url, **_NATS_OPTIONS)
    try:
        async with Client(cluster.brokers, timeout=20) as client:
            # Replication factor 1: no other node can take the partition over.
            await client.create_stream(name, name)
            leader = (await client.fetch_partition_metadata(name)).leader
            i = cluster.node_ids.index(leader)
            await cluster.isolate_nats(i)
            assert cluster.network_faults == [f"isolate_nats({i})"]
            async with Client([cluster.brokers[i]], timeout=5) as direct:
                metadata = await direct.fetch_metadata([name])
            assert metadata.streams[name].partitions[0].leader == leader
            async with Publisher(nc, ack_timeout=2) as pub:
                with pytest.raises(AckTimeoutError):
                    await pub.publish(name, b"while-cut")
            await cluster.heal_nats(i)
            assert cluster.network_faults == []
            await cluster.wait_ready()
            async with Publisher(nc, ack_timeout=15) as pub:
                ack = await pub.publish(name, b"healed")
            assert ack is not None
            messages = await _read_all(client, name)
    finally:
        await nc.close()
    values = [m.value for m in messages]
    # The message published during the cut may arrive late: NATS keeps retransmitting
    # on the connection that the heal brings back (that is why its timeout says
    # maybe_stored). Each is stored once at most, and the acked one where its ack said.
    assert values in ([b"healed"], [b"while-cut", b"healed"]), values
    assert messages[-1].offset == ack.offset


# ---------------------------------------------------------------- partition


def _metadata_leader(cluster: ContainerCluster) -> int:
    """Index of the node that became the metadata (Raft) leader: the only one on a fresh
    cluster with no faults."""
    leaders = [
        i
        for i in range(len(cluster.node_ids))
        if "Server became metadata leader" in cluster.node_log(i)
    ]
    assert len(leaders) == 1, f"metadata leaders in the logs: {leaders}"
    return leaders[0]


async def test_partition_between_leader_and_follower(
    docker_engine: Any, unique_name: Callable[[str], str]
) -> None:
    """A stream's leader and one follower, partitioned from each other (each still
    reaching the third node, the metadata leader), under ALL-acked publishes: the
    follower drops out of the ISR, the cluster keeps acking while the partition lasts,
    and after the heal the ISR is whole again with nothing acked lost or stored twice.

    Liftbridge v1.9.0 also moves the leadership here: the cut-off follower keeps
    reporting the leader as gone, and once the ISR has shrunk to two its report alone
    is a quorum (server/failover.go counts any reporting replica against (ISR - 1) / 2),
    so the third node takes over and the follower catches up from it. What the deposed
    leader accepted and had not committed is never acked: those publishes end with an
    error, which the test allows.
    """
    async with ContainerCluster(3, nats_per_node=True) as cluster:
        ids = cluster.node_ids
        metadata_leader = _metadata_leader(cluster)
        # Through the metadata leader's NATS server: its routes to the other two stay up.
        nc = await nats.connect(cluster.nats_urls[metadata_leader], **_NATS_OPTIONS)
        try:
            async with Client(cluster.brokers, timeout=20) as client:
                # A leader other than the metadata leader, so that both ends of the
                # partition still reach the Raft leader (no Raft election).
                for attempt in range(6):
                    name = unique_name(f"partition-{attempt}")
                    leader = ids.index(await _replicated_stream(client, name))
                    if leader != metadata_leader:
                        break
                else:
                    pytest.fail("every new stream was led by the metadata leader")
                follower = ({0, 1, 2} - {leader, metadata_leader}).pop()

                async with Publisher(nc, ack_timeout=15) as pub:
                    marks: dict[str, float] = {}
                    during: list[Ack | None] = []

                    async def fault() -> None:
                        await asyncio.sleep(1.0)
                        await cluster.partition(leader, follower)
                        marks["partitioned"] = time.monotonic()

                        async def follower_dropped() -> bool:
                            return ids[follower] not in (await _partition(client, name)).isr

                        await _wait_until(follower_dropped, within=30, what="the ISR to shrink")
                        marks["shrunk"] = time.monotonic()
                        # The cluster serves while the partition lasts.
                        during.append(await pub.publish(name, b"during", ack_policy=AckPolicy.ALL))
                        marks["served"] = time.monotonic()
                        await cluster.heal_partition(follower, leader)  # either order
                        marks["healed"] = time.monotonic()

                    task = asyncio.create_task(fault())
                    sent = _Sent()
                    try:
                        while not task.done():
                            await _publish_steadily(pub, name, rate=300, seconds=0.5, into=sent)
                    finally:
                        await task
                    acks, errors = await _outcomes(sent)
                    assert during[0] is not None
                    acks[b"during"] = during[0]
                    after = await pub.publish(name, b"after-heal", ack_policy=AckPolicy.ALL)
                    assert after is not None
                    acks[b"after-heal"] = after

                async def isr_complete() -> bool:
                    return len((await _partition(client, name)).isr) == 3

                await _wait_until(isr_complete, within=30, what="a complete ISR after the heal")
                new_leader = (await _partition(client, name)).leader
                messages = await _read_all(client, name)
        finally:
            await nc.close()
    print(
        f"partition {ids[leader]}|{ids[follower]} (metadata leader {ids[metadata_leader]}): "
        f"ISR shrank after {marks['shrunk'] - marks['partitioned']:.1f} s, a publish was "
        f"acked {marks['served'] - marks['shrunk']:.1f} s later, healed after "
        f"{marks['healed'] - marks['partitioned']:.1f} s; leader now {new_leader}; "
        f"sent={len(sent.values)} acked={len(acks) - 2} failed={len(errors)} "
        f"({sorted({type(e).__name__ for e in errors.values()})}); "
        f"longest wait {sent.longest_wait():.1f} s"
    )
    _check_stored(acks, messages)


# ---------------------------------------------------------------- clean-up


async def test_stop_with_faults_in_force_leaves_nothing(docker_engine: Any) -> None:
    """A cluster stopped by a failing test while a node is isolated and cut from NATS
    leaves no container (helpers included) and no network, and lets the node's port go."""
    cluster = ContainerCluster()
    with pytest.raises(RuntimeError, match="test failed"):
        async with cluster:
            await cluster.isolate_nats(0)
            await cluster.isolate_node(0)
            assert cluster.network_faults == ["isolate_node(0)", "isolate_nats(0)"]
            assert await asyncio.to_thread(_refused, cluster.brokers[0])
            raise RuntimeError("test failed")
    assert cluster.network_faults == []
    label = f"io.liftbridge-nats.cluster={cluster.namespace}"
    engine = docker_engine.client
    assert engine.containers.list(all=True, filters={"label": label}) == []
    assert engine.networks.list(filters={"label": label}) == []
    # The socket that held the isolated node's port is closed.
    assert not cluster._owned.port_guards
