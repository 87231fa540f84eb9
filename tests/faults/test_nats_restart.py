"""NATS restarted under a publisher: promises kept, short outages cost nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from liftbridge_nats import AckPolicy, Client, Publisher
from liftbridge_nats.testing import Cluster

from ._support import NATS_FAULT_NETWORK, Outcomes, connect_nats, gather_outcomes, read_stream

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
async def cluster(
    liftbridge_cluster_factory: Callable[..., Cluster],
) -> AsyncIterator[Cluster]:
    async with liftbridge_cluster_factory(1, container_network=NATS_FAULT_NETWORK) as c:
        yield c


async def test_nats_restart_during_100k_pipelined_all_acked_publishes(
    cluster: Cluster, unique_name: Callable[[str], str], fault_report: Any
) -> None:
    total, kill_at = 100_000, 30_000
    name = unique_name("nats-restart")
    nc = await connect_nats(cluster.nats_url)
    outcomes = Outcomes()
    try:
        async with Client(cluster.brokers) as client:
            await client.create_stream(name, name)
            async with Publisher(nc, ack_timeout=10) as pub:
                reached = asyncio.Event()
                loop = asyncio.get_running_loop()
                outage: list[float] = []

                async def restart_nats() -> None:
                    await reached.wait()
                    outage.append(loop.time())
                    await cluster.kill_nats()
                    await asyncio.sleep(0.5)
                    await cluster.restart_nats()
                    outage.append(loop.time())

                fault = asyncio.create_task(restart_nats())
                values = [b"m-%d" % i for i in range(total)]
                futures = []
                for i, value in enumerate(values):
                    futures.append(await pub.publish_async(name, value, ack_policy=AckPolicy.ALL))
                    if i == kill_at:
                        reached.set()
                        await asyncio.sleep(0)
                await fault
                await gather_outcomes(values, futures, outcomes)
                outcomes.check_ended()
                assert pub.pending == 0 and pub.stats.buffered == 0

                # The publisher works again afterwards.
                after = await pub.publish(name, b"after", ack_policy=AckPolicy.ALL)
                assert after is not None
                stats = pub.stats
            assert pub.pending == 0
            messages = await read_stream(client, name)
    finally:
        await nc.close()
    check = outcomes.check_stream(messages)
    fault_report(
        f"{outcomes.summary()} lost={check.lost} stored={check.stored} "
        f"dup_unacked={check.duplicated_any} faults={len(outage) // 2} NATS kill+restart "
        f"({outage[1] - outage[0]:.1f} s until NATS and the node were back) "
        f"at publish {kill_at}; resent={stats.resent} no_responders={stats.no_responders}"
    )
    check.assert_ok()
    assert messages[-1].value == b"after" and messages[-1].offset == after.offset
    # Not a vacuous run: the kill happened while messages were in flight.
    assert outcomes.acked >= kill_at


async def test_short_nats_outage_costs_nothing(
    cluster: Cluster, unique_name: Callable[[str], str], fault_report: Any
) -> None:
    """Publishes made while the client knows NATS is away wait in the buffer and are
    acked later; only messages in flight when NATS died can fail, and each of those
    raises.

    Server trap (Liftbridge v1.9.0 server.go createNATSConn): each of a node's five NATS
    connections reconnects on its own every 250 ms, with nats.go's reconnect buffer
    disabled, so an ack sent while the node's "acks" connection is still down is dropped
    although the message is stored. A client that reconnects faster than the node
    (nats-py ``reconnect_time_wait=0.25``) then sees NoRespondersError (flushed before
    the node resubscribed) or AckTimeoutError (stored while its acks connection was
    down) for up to 95 % of the buffered messages; with a longer wait the node is back
    first, and the default Publisher (no retry) keeps its promise.

    nats-py makes its first attempt one full wait after it sees the connection go (the
    connection is younger than the wait), so the node is back first when the wait
    exceeds the outage, NATS's restart and the node's reconnect. On a busy two-core
    machine the node was usable up to 0.5 s after a nats-server process restarted, and
    a NATS container takes up to about a second more (``docker start``): with a wait of
    2 s after a 1.5 s outage the client came back only a few milliseconds after the node
    at times. A wait of 3.5 s leaves a second to spare.

    The messages in flight when NATS died (written to the dying connection, or not yet
    handed to the node) are lost with the server, or stored with their acks lost; the
    Publisher fails each with AckTimeoutError. How many they are depends on how far the servers lag behind the
    client at that moment, more on a loaded machine, so the test bounds when they were
    published, not how many they are.
    """
    name = unique_name("nats-outage")
    rate, before, during, after, wait = 2000, 1.5, 1.5, 1.0, 3.5
    loop = asyncio.get_running_loop()
    # When the client itself saw NATS go and come back: it buffers in between.
    seen: dict[str, float] = {}

    async def on_disconnect() -> None:
        seen.setdefault("gone", loop.time())

    async def on_reconnect() -> None:
        seen.setdefault("back", loop.time())

    nc = await connect_nats(
        cluster.nats_url,
        reconnect_time_wait=wait,
        disconnected_cb=on_disconnect,
        reconnected_cb=on_reconnect,
    )
    outcomes = Outcomes()
    try:
        async with Client(cluster.brokers) as client:
            await client.create_stream(name, name)
            async with Publisher(nc, ack_timeout=8) as pub:
                values: list[bytes] = []
                futures: list[asyncio.Future[Any]] = []
                published_at: list[float] = []
                outage: dict[str, float] = {}

                async def kill_and_restart() -> None:
                    await asyncio.sleep(before)
                    outage["killed"] = loop.time()
                    await cluster.kill_nats()
                    await asyncio.sleep(during)
                    await cluster.restart_nats()
                    outage["ready"] = loop.time()

                fault = asyncio.create_task(kill_and_restart())
                start = loop.time()
                n = 0
                # A steady offered load, scheduled by the clock, until ``after`` seconds
                # past the client's reconnect (or a limit, if it never comes back).
                limit = start + before + during + wait + after + 10

                def publishing() -> bool:
                    back = seen.get("back")
                    now = loop.time()
                    return now < limit and (back is None or now - back < after)

                while publishing():
                    due = start + n / rate
                    if due > loop.time():
                        await asyncio.sleep(due - loop.time())
                    value = b"o-%d" % n
                    values.append(value)
                    published_at.append(loop.time())
                    futures.append(await pub.publish_async(name, value, ack_policy=AckPolicy.ALL))
                    n += 1
                await fault
                await gather_outcomes(values, futures, outcomes)
                outcomes.check_ended()
                assert pub.pending == 0
                stats = pub.stats
            messages = await read_stream(client, name)
    finally:
        await nc.close()
    check = outcomes.check_stream(messages)
    assert "gone" in seen and "back" in seen, f"the client did not see the outage: {seen}"
    gone, back, killed = seen["gone"], seen["back"], outage["killed"]
    buffered = [v for v, t in zip(values, published_at, strict=True) if gone <= t < back]
    after_back = [v for v, t in zip(values, published_at, strict=True) if t >= back]
    failed_at = [t for v, t in zip(values, published_at, strict=True) if v not in outcomes.acks]
    in_flight = [t for t in failed_at if t < gone]
    buffered_acked = sum(1 for v in buffered if v in outcomes.acks)
    after_acked = sum(1 for v in after_back if v in outcomes.acks)
    buffered_ratio = buffered_acked / max(1, len(buffered))
    after_ratio = after_acked / max(1, len(after_back))

    def ms(t: float) -> str:
        return f"{(t - killed) * 1000:+.0f} ms"

    fault_report(
        f"{outcomes.summary()} lost={check.lost} stored={check.stored}; "
        f"in flight when NATS died: {len(in_flight)} failed, published "
        f"{ms(min(in_flight)) if in_flight else '-'} to {ms(max(in_flight)) if in_flight else '-'}; "
        f"buffered: {len(buffered)}, acked {buffered_acked} ({buffered_ratio:.4f}); "
        f"after the reconnect: {len(after_back)}, acked {after_acked} ({after_ratio:.4f}); "
        f"faults=1 NATS outage (kill, restart, node usable at {ms(outage['ready'])}); "
        f"client saw it go at {ms(gone)}, back at {ms(back)}; "
        f"resent={stats.resent} no_responders={stats.no_responders}"
    )
    check.assert_ok()
    assert outage["ready"] < back, (
        f"the client reconnected ({ms(back)}) before the node was usable "
        f"({ms(outage['ready'])}): the test's reconnect wait is too short for this machine"
    )
    assert len(buffered) > 0.5 * rate * during, "the outage did not overlap the publishing"
    assert len(after_back) > 0.5 * rate * after, "too little publishing after the outage"
    # Publishes made while the client knew NATS was away wait in the buffer and are acked
    # after the reconnect, as are those made afterwards.
    assert buffered_ratio >= 0.99, f"only {buffered_ratio:.2%} of the buffered publishes acked"
    assert after_ratio >= 0.99, f"only {after_ratio:.2%} of the publishes after it acked"
    # The rest fail only if they were in flight when NATS died: published shortly before
    # the client saw the connection go.
    early = [t for t in in_flight if t < killed - 1.0]
    assert not early, (
        f"{len(early)} publishes failed that were made over a second before NATS died "
        f"(first at {ms(min(early))})"
    )
