"""Broker faults on a 3-node cluster: the partition leader killed, a follower killed and
restarted. One cluster per test (they kill nodes), with short replica timeouts."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from liftbridge_nats import AckPolicy, Client, Message, Publisher, StartPosition
from liftbridge_nats.testing import Cluster

from ._support import REPLICA_TIMEOUTS, Outcomes, connect_nats, read_stream, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(240)]


@pytest.fixture
async def cluster3(
    liftbridge_cluster_factory: Callable[..., Cluster],
) -> AsyncIterator[Cluster]:
    # Debug logs show the nodes' log truncations (see _server_truncation_evidence).
    async with liftbridge_cluster_factory(
        3, liftbridge_config=REPLICA_TIMEOUTS, log_level="debug"
    ) as c:
        yield c


# Liftbridge v1.9.0, server/partition.go truncateUncommitted: a replica that becomes a
# follower asks the leader for the last offset of its leader epoch and, when that request
# fails (the leader is dead), falls back to truncating its log to its high watermark
# ("TODO: ... potential for data loss"). Its high watermark can lag the leader's by the
# last committed messages, so an ALL-acked message can be cut from the replica that is
# elected next.
_HW_TRUNCATION = "] to HW "


def _server_truncation_evidence(cluster: Cluster, stream: str) -> list[str]:
    """Debug-log lines of every node about truncating ``stream``'s log, and failed
    leader-epoch requests for it."""
    lines = []
    for i, node in enumerate(cluster.node_ids):
        text = cluster.node_log(i)
        lines += [
            f"{node}: {line}"
            for line in text.splitlines()
            if f"stream={stream}," in line
            and ("Truncating log" in line or "Failed to fetch last offset" in line)
        ]
    return lines


async def _replicated_stream(client: Client, name: str) -> str:
    """Create an RF 3, min ISR 2 stream; wait until its ISR is complete; return the leader."""
    await client.create_stream(name, name, replication_factor=3, min_isr=2)

    async def full_isr() -> bool:
        info = await client.fetch_partition_metadata(name, 0)
        return bool(info.leader) and len(info.isr) == 3

    await wait_until(full_isr, within=30, what="a complete ISR on the new stream")
    return (await client.fetch_partition_metadata(name, 0)).leader


async def _publish_steadily(
    pub: Publisher,
    subject: str,
    *,
    rate: float,
    seconds: float,
    tag: str,
    ack_policy: AckPolicy = AckPolicy.ALL,
) -> tuple[list[bytes], list[asyncio.Future[Any]]]:
    """Publish at ``rate`` messages/s for ``seconds``, pipelined; return values and futures."""
    loop = asyncio.get_running_loop()
    values: list[bytes] = []
    futures: list[asyncio.Future[Any]] = []
    start = loop.time()
    n = 0
    while loop.time() - start < seconds:
        due = start + n / rate
        if due > loop.time():
            await asyncio.sleep(due - loop.time())
        value = f"{tag}-{n}".encode()
        values.append(value)
        futures.append(await pub.publish_async(subject, value, ack_policy=ack_policy))
        n += 1
    return values, futures


async def _follow(client: Client, name: str, into: list[Message]) -> None:
    """Read the partition from the start, across fail-overs, until cancelled."""
    async with client.subscribe(name, start_position=StartPosition.EARLIEST) as sub:
        async for message in sub:
            into.append(message)


_LEADER_KILL_RATE = 1500
# Seconds before its death in which a leader may have received messages it never acked
# (with ALL acks a message commits once every replica in the ISR has fetched it: within
# milliseconds on an idle machine, longer on a busy one), and after it in which NATS may
# still hand messages to its subscription, until it sees the connection gone.
_LEADER_HELD = 0.5
_NATS_NOTICES = 0.25


async def test_partition_leader_killed(
    cluster3: Cluster, unique_name: Callable[[str], str], fault_report: Any
) -> None:
    name = unique_name("leader-kill")
    nc = await connect_nats(cluster3.nats_url)
    outcomes = Outcomes()
    followed: list[Message] = []
    follower_task: asyncio.Task[None] | None = None
    try:
        async with Client(cluster3.brokers, timeout=20) as client:
            leader = await _replicated_stream(client, name)
            victim = cluster3.node_ids.index(leader)
            follower_task = asyncio.create_task(_follow(client, name, followed))
            # retry=True re-sends after NATS reports that nobody received a message (the
            # fail-over window); retry_deadline == ack_timeout keeps timed-out messages
            # from being re-sent, which without optimistic concurrency could store an
            # already stored (but unacked) message twice: see test_occ_retry.py.
            async with Publisher(nc, ack_timeout=25, retry=True, retry_deadline=25) as pub:
                loop = asyncio.get_running_loop()
                kills: list[float] = []

                async def kill_leader() -> None:
                    await asyncio.sleep(1.5)
                    await cluster3.kill_node(victim)
                    kills.append(loop.time() - started)

                started = loop.time()
                fault = asyncio.create_task(kill_leader())
                values, futures = await _publish_steadily(
                    pub, name, rate=_LEADER_KILL_RATE, seconds=5.0, tag="lk"
                )
                await fault
                results = await asyncio.gather(*futures, return_exceptions=True)
                for value, result in zip(values, results, strict=True):
                    outcomes.add(value, result)
                outcomes.check_ended()
                assert pub.pending == 0
                after = await pub.publish(name, b"after", ack_policy=AckPolicy.ALL)
                assert after is not None
                stats = pub.stats
            new_leader = (await client.fetch_partition_metadata(name, 0)).leader
            messages = await read_stream(client, name)
            # The live subscription sees everything stored, in order, once.
            try:
                await wait_until(
                    lambda: len(followed) >= len(messages), within=30, what="the subscription"
                )
            except AssertionError as exc:
                last = followed[-1].offset if followed else None
                raise AssertionError(
                    f"the live subscription read {len(followed)} of {len(messages)} messages "
                    f"(last offset {last}; task: {follower_task!r}); publishes: {outcomes.summary()}"
                ) from exc
            assert not follower_task.done(), follower_task  # it must still be following
            follower_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower_task
    finally:
        if follower_task is not None and not follower_task.done():
            follower_task.cancel()
            with contextlib.suppress(BaseException):
                await follower_task
        await nc.close()
    check = outcomes.check_stream(messages)
    evidence = _server_truncation_evidence(cluster3, name)
    fault_report(
        f"{outcomes.summary()} lost={check.lost} stored={check.stored} "
        f"faults={len(kills)} leader {leader} SIGKILLed after {kills[0]:.1f} s of publishing "
        f"(new leader {new_leader}); "
        f"no_responders={stats.no_responders} resent={stats.resent}; "
        f"subscription: {len(followed)} messages"
        + (f"; server truncations: {evidence}" if check.lost else "")
    )
    # Every invariant but loss holds whatever the server did: no acked message stored
    # twice or at another offset than acked, no gap, a new leader.
    check.assert_consistent()
    assert new_leader and new_leader != leader
    truncated_hw = _truncation_to_hw(cluster3, name, new_leader)
    # Loss is the server's (see _HW_TRUNCATION) only when the broker that leads now
    # logged a truncation to a high watermark below every lost offset.
    explained = truncated_hw is not None and bool(check.lost_offsets)
    explained = explained and check.lost_offsets[0] > (truncated_hw or 0)
    if check.lost and not explained:
        raise AssertionError(
            f"{check.lost} acked message(s) lost at offsets {check.lost_offsets[:10]}, not "
            f"all above the high watermark the new leader ({new_leader}) truncated its log to "
            f"({truncated_hw}): {check.examples!r}; server log lines: {evidence}"
        )
    # The live subscription delivered each offset once, in order; where nothing was
    # lost it read exactly what the stream holds. Above a truncated high watermark it
    # may have read the dead leader's committed messages, which the successor dropped.
    _assert_subscription(followed, messages, upto=truncated_hw if check.lost else None)
    if check.lost:
        pytest.xfail(
            f"Liftbridge v1.9.0 lost {check.lost} ALL-acked message(s) at offsets "
            f"{check.lost_offsets[:10]} in the fail-over: {new_leader}, the new leader, "
            f"truncated its log to its high watermark {truncated_hw} after its "
            f"leader-epoch request to the dead leader failed: {evidence}"
        )
    # Publishes made during the fail-over were stored once the new leader took over.
    assert stats.no_responders > 0, "no publish met the fail-over window: the test proved nothing"
    deposed = _deposed_successors(cluster3, name, killed=leader)
    restarts = _successor_leader_epochs(cluster3, name, killed=leader)
    # What the dead leader had received and not acked when it died ends in a timeout
    # (re-sending it without optimistic concurrency could store it twice): messages due
    # shortly before the kill. Any other unacked message is a publish the fail-over
    # failed. (Message i is due i / rate seconds in, and never sent before it is due.)
    unacked = [i for i, value in enumerate(values) if value not in outcomes.acks]
    held_from = kills[0] - _LEADER_HELD
    held_to = kills[0] + _NATS_NOTICES
    failed = [i for i in unacked if not held_from <= i / _LEADER_KILL_RATE <= held_to]
    if failed and (deposed or len(restarts) > 1):
        # Every publish ended and nothing acked was lost (asserted above). Each time a
        # broker (re)becomes leader, at a new epoch, it first stops leading and drops its
        # commit queue (Liftbridge's server/partition.go: becomeLeader -> stopLeading ->
        # commitQueue.Dispose()): what it accepted and had not committed is stored but
        # never acked, and re-sending it without optimistic concurrency could store it
        # twice.
        pytest.xfail(
            f"Liftbridge changed the partition's leadership again within the fail-over "
            f"(deposed: {deposed}; successor leader epochs: {restarts}), so messages accepted "
            f"and not yet committed were never acked: {outcomes.summary()}"
        )
    assert not failed, (
        f"{len(failed)} unacked message(s) were due outside the moments around the kill at "
        f"{kills[0]:.2f} s in which the dead leader could hold them ({held_from:.2f} to "
        f"{held_to:.2f} s; the first due at {failed[0] / _LEADER_KILL_RATE:.2f} s): "
        f"{outcomes.summary()}"
    )


def _truncation_to_hw(cluster: Cluster, stream: str, node: str) -> int | None:
    """The lowest high watermark ``node`` logged truncating ``stream``'s log to (None
    when it logged none).

    Any such line counts, not only those before the node first became leader: leadership
    can flap in a fail-over (a broker leads, is deposed, truncates as a follower, and
    leads again), and whatever a broker cut from its log is gone from the log it serves.
    """
    text = cluster.node_log(cluster.node_ids.index(node))
    lowest: int | None = None
    for line in text.splitlines():
        if f"stream={stream}," in line and _HW_TRUNCATION in line:
            value = line.rsplit(_HW_TRUNCATION, 1)[1].split('"', 1)[0].strip()
            if value.lstrip("-").isdigit():
                lowest = int(value) if lowest is None else min(lowest, int(value))
    return lowest


def _assert_subscription(
    followed: list[Message], messages: list[Message], *, upto: int | None
) -> None:
    """Offsets delivered once each, in order, with no gap; values as stored (up to
    ``upto`` when given, everywhere otherwise)."""
    offsets = [m.offset for m in followed]
    first = offsets[0] if offsets else 0
    assert offsets == list(range(first, first + len(offsets))), (
        f"the subscription skipped or repeated offsets: {offsets[:20]}..."
    )
    if upto is None:
        assert offsets == [m.offset for m in messages]
        assert [m.value for m in followed] == [m.value for m in messages]
        return
    stored = {m.offset: m.value for m in messages}
    differ = [m.offset for m in followed if m.offset <= upto and stored.get(m.offset) != m.value]
    assert not differ, f"the subscription read other values than stored at offsets {differ[:10]}"


def _successor_leader_epochs(
    cluster: Cluster, stream: str, *, killed: str
) -> list[tuple[str, int]]:
    """(broker, epoch) of every "Server becoming leader" log line of ``stream`` written by
    a broker other than ``killed``, in epoch order."""
    found: set[tuple[str, int]] = set()
    for i, node in enumerate(cluster.node_ids):
        if node == killed:
            continue
        text = cluster.node_log(i)
        for line in text.splitlines():
            if "Server becoming leader for partition" in line and f"stream={stream}," in line:
                epoch = line.rsplit("epoch: ", 1)[-1].split('"', 1)[0].strip()
                if epoch.isdigit():
                    found.add((node, int(epoch)))
    return sorted(found, key=lambda pair: pair[1])


def _deposed_successors(cluster: Cluster, stream: str, *, killed: str) -> list[str]:
    """Brokers other than ``killed`` that a follower reported as a failed leader of
    ``stream`` (server log: "Leader X for partition [...] exceeded max leader timeout")."""
    deposed: set[str] = set()
    for i in range(len(cluster.node_ids)):
        text = cluster.node_log(i)
        for line in text.splitlines():
            if f"stream={stream}," in line and "exceeded max leader timeout" in line:
                leader = line.split("Leader ", 1)[1].split(" ", 1)[0] if "Leader " in line else ""
                if leader and leader != killed:
                    deposed.add(leader)
    return sorted(deposed)


async def test_follower_killed_and_restarted(
    cluster3: Cluster, unique_name: Callable[[str], str], fault_report: Any
) -> None:
    name = unique_name("follower-kill")
    nc = await connect_nats(cluster3.nats_url)
    outcomes = Outcomes()
    isr_seen: list[tuple[float, int]] = []
    try:
        async with Client(cluster3.brokers, timeout=20) as client:
            leader = await _replicated_stream(client, name)
            victim = next(i for i, n in enumerate(cluster3.node_ids) if n != leader)
            victim_id = cluster3.node_ids[victim]
            loop = asyncio.get_running_loop()
            start = loop.time()

            async def isr() -> tuple[str, ...]:
                info = await client.fetch_partition_metadata(name, 0)
                isr_seen.append((round(loop.time() - start, 1), len(info.isr)))
                return info.isr

            async with Publisher(nc, ack_timeout=20) as pub:
                done = asyncio.Event()
                timeline: dict[str, float] = {}

                async def fault() -> None:
                    try:
                        await asyncio.sleep(1.0)
                        await cluster3.kill_node(victim)
                        timeline["killed"] = loop.time() - start
                        await wait_until(
                            lambda: _without(isr(), victim_id), within=20, what="the ISR to shrink"
                        )
                        timeline["shrunk"] = loop.time() - start
                        await cluster3.restart_node(victim)
                        timeline["restarted"] = loop.time() - start
                        await wait_until(
                            lambda: _with(isr(), victim_id), within=30, what="the ISR to grow back"
                        )
                        timeline["grown"] = loop.time() - start
                    finally:
                        done.set()

                fault_task = asyncio.create_task(fault())
                values: list[bytes] = []
                futures: list[asyncio.Future[Any]] = []
                round_ = 0
                # Keep publishing (ALL acks) through the whole shrink/grow cycle.
                while not done.is_set():
                    v, f = await _publish_steadily(
                        pub, name, rate=1000, seconds=0.5, tag=f"fk{round_}"
                    )
                    values += v
                    futures += f
                    round_ += 1
                await fault_task
                results = await asyncio.gather(*futures, return_exceptions=True)
                for value, result in zip(values, results, strict=True):
                    outcomes.add(value, result)
                outcomes.check_ended()
                assert pub.pending == 0
            messages = await read_stream(client, name)
    finally:
        await nc.close()
    check = outcomes.check_stream(messages)
    fault_report(
        f"{outcomes.summary()} lost={check.lost} stored={check.stored} faults=1 follower "
        f"{victim_id} SIGKILLed and restarted; timeline (s) {timeline}; "
        f"ISR size samples {_compress(isr_seen)}"
    )
    check.assert_ok()
    assert outcomes.acked == outcomes.sent, "publishes failed although min ISR 2 was kept"
    sizes = [size for _, size in isr_seen]
    assert 2 in sizes and sizes[-1] == 3


async def _without(isr: Any, node: str) -> bool:
    return node not in await isr


async def _with(isr: Any, node: str) -> bool:
    return node in await isr


def _compress(samples: list[tuple[float, int]]) -> str:
    """ISR size changes only: ``t=0.0:3 t=6.2:2 t=9.8:3``."""
    out: list[str] = []
    last = None
    for t, size in samples:
        if size != last:
            out.append(f"t={t}:{size}")
            last = size
    return " ".join(out)
