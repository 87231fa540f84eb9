"""NATS restarted under a publisher: promises kept, short outages cost nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from liftbridge_nats import AckPolicy, Client, Publisher
from liftbridge_nats.testing import Cluster, ContainerCluster

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
    """Publishes made during a 1.5 s outage wait in the buffer and are acked later.

    Server trap (Liftbridge v1.9.0 server.go createNATSConn): each of a node's five NATS
    connections reconnects on its own every 250 ms, with nats.go's reconnect buffer
    disabled, so an ack sent while the node's "acks" connection is still down is dropped
    although the message is stored. A client that reconnects faster than the node
    (nats-py ``reconnect_time_wait=0.25``) then sees NoRespondersError (flushed before
    the node resubscribed) or AckTimeoutError (stored while its acks connection was
    down) for up to 95 % of the buffered messages; with nats-py's default wait (2 s) the
    node is back first, and the default Publisher (no retry) keeps its promise.

    The node is back first when the wait exceeds the outage plus NATS's restart plus the
    node's 250 ms. A nats-server process restarts at once; a NATS container takes up to
    about a second more (``docker start``), so there the client waits 3 s instead.
    """
    name = unique_name("nats-outage")
    rate, before, during, after = 2000, 1.5, 1.5, 1.5
    wait = 3.0 if isinstance(cluster, ContainerCluster) else 2.0
    nc = await connect_nats(cluster.nats_url, reconnect_time_wait=wait)
    outcomes = Outcomes()
    try:
        async with Client(cluster.brokers) as client:
            await client.create_stream(name, name)
            async with Publisher(nc, ack_timeout=8) as pub:
                loop = asyncio.get_running_loop()
                values: list[bytes] = []
                futures: list[asyncio.Future[Any]] = []
                while_down: list[bool] = []
                down = False
                down_between: list[float] = []

                async def outage() -> None:
                    nonlocal down
                    await asyncio.sleep(before)
                    down = True
                    down_between.append(loop.time())
                    await cluster.kill_nats()
                    await asyncio.sleep(during)
                    await cluster.restart_nats()
                    down_between.append(loop.time())
                    down = False

                fault = asyncio.create_task(outage())
                start = loop.time()
                n = 0
                # A steady offered load, scheduled by the clock.
                while loop.time() - start < before + during + after:
                    due = start + n / rate
                    if due > loop.time():
                        await asyncio.sleep(due - loop.time())
                    value = b"o-%d" % n
                    values.append(value)
                    futures.append(await pub.publish_async(name, value, ack_policy=AckPolicy.ALL))
                    while_down.append(down)
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
    ratio = outcomes.acked / outcomes.sent
    down_values = [v for v, d in zip(values, while_down, strict=True) if d]
    down_acked = sum(1 for v in down_values if v in outcomes.acks)
    down_ratio = down_acked / max(1, len(down_values))
    fault_report(
        f"{outcomes.summary()} lost={check.lost} stored={check.stored} "
        f"acked_ratio={ratio:.4f}; published while "
        f"NATS was down: {len(down_values)}, acked {down_acked} ({down_ratio:.4f}); "
        f"faults={len(down_between) // 2} NATS outage of "
        f"{down_between[1] - down_between[0]:.1f} s (kill, restart); resent={stats.resent} "
        f"no_responders={stats.no_responders}"
    )
    check.assert_ok()
    assert len(down_values) > 0.5 * rate * during, "the outage did not overlap the publishing"
    # Publishes made while NATS was away wait in the buffer and are acked afterwards; the
    # few that fail were in flight (sent, unacked) when NATS died.
    assert down_ratio >= 0.99, f"only {down_ratio:.2%} of the publishes made during the outage"
    assert ratio >= 0.99, f"only {ratio:.2%} of the publishes were acked across the outage"
