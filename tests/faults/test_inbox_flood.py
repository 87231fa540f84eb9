"""The ack inbox flooded with garbage, foreign envelopes and stray status messages while
real publishes flow: strays are ignored and counted, real acks still matched."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from liftbridge_nats import AckPolicy, Client, Publisher, envelope, wire
from liftbridge_nats._proto import api_pb2
from liftbridge_nats.envelope import MsgType
from liftbridge_nats.testing import Cluster

from ._support import Outcomes, connect_nats, gather_outcomes, read_stream, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
async def cluster(
    liftbridge_cluster_factory: Callable[..., Cluster],
) -> AsyncIterator[Cluster]:
    async with liftbridge_cluster_factory(1) as c:
        yield c


def _strays(rng: random.Random, count: int) -> dict[str, list[bytes]]:
    """Inbox messages a publisher must survive, by the counter they must land in."""
    malformed: list[bytes] = []
    foreign: list[bytes] = []
    unmatched: list[bytes] = []
    for i in range(count):
        kind = i % 8
        if kind == 0:  # random bytes
            malformed.append(rng.randbytes(rng.randint(1, 200)))
        elif kind == 1:  # plain text, like a misdirected reply
            malformed.append(b"hello, is this the ack inbox?")
        elif kind == 2:  # an ACK envelope with a broken CRC
            good = bytearray(envelope.encode(MsgType.ACK, b"\x0a\x01s", crc=True))
            good[-1] ^= 0xFF
            malformed.append(bytes(good))
        elif kind == 3:  # an ACK envelope whose protobuf is truncated
            malformed.append(envelope.encode(MsgType.ACK, b"\x0a\x7fshort"))
        elif kind == 4:  # a publish envelope (someone published to our inbox)
            foreign.append(wire.encode_publish(b"not an ack", correlation_id="x"))
        elif kind == 5:  # an internal envelope type
            foreign.append(envelope.encode(MsgType.REPLICATION_RESPONSE, rng.randbytes(20)))
        elif kind == 6:  # a well-formed ack for a correlation id we never used
            ack = api_pb2.Ack(stream="other", correlationId=f"foreign-{i}", offset=i)
            unmatched.append(envelope.encode(MsgType.ACK, ack.SerializeToString()))
        else:  # the same, with a CRC
            ack = api_pb2.Ack(stream="other", correlationId=f"foreign-crc-{i}", offset=i)
            unmatched.append(envelope.encode(MsgType.ACK, ack.SerializeToString(), crc=True))
    return {"malformed": malformed, "foreign": foreign, "acks_unmatched": unmatched}


async def test_ack_inbox_flood(
    cluster: Cluster, unique_name: Callable[[str], str], fault_report: Any
) -> None:
    name = unique_name("flood")
    total, flood = 20_000, 16_000
    rng = random.Random(6)
    strays = _strays(rng, flood)
    nc = await connect_nats(cluster.nats_url)
    attacker = await connect_nats(cluster.nats_url)
    outcomes = Outcomes()
    try:
        async with Client(cluster.brokers) as client:
            await client.create_stream(name, name)
            async with Publisher(nc, ack_timeout=10) as pub:
                inbox = pub.ack_inbox
                prefix = inbox.rsplit(".", 1)[0] + "."
                status_strays = 0

                async def flood_inbox() -> None:
                    nonlocal status_strays
                    batches = [(k, d) for k, data in strays.items() for d in data]
                    rng.shuffle(batches)
                    for n, (_, data) in enumerate(batches):
                        # Acks go to the inbox; strays also hit other reply subjects.
                        subject = inbox if n % 2 else prefix + f"stray{n}"
                        await attacker.publish(subject, data)
                        if n % 500 == 0:
                            # A status message that is not "no responders".
                            await attacker.publish(
                                prefix + f"status{n}", b"", headers={"Status": "408"}
                            )
                            status_strays += 1
                            await asyncio.sleep(0)
                    await attacker.flush()

                flooding = asyncio.create_task(flood_inbox())
                values = [b"f-%d" % i for i in range(total)]
                futures = [
                    await pub.publish_async(name, v, ack_policy=AckPolicy.ALL) for v in values
                ]
                await flooding
                await gather_outcomes(values, futures, outcomes)
                outcomes.check_ended()
                expected = {k: len(v) for k, v in strays.items()}

                def counted() -> bool:
                    s = pub.stats
                    return (
                        s.malformed >= expected["malformed"]
                        and s.foreign >= expected["foreign"] + status_strays
                        and s.acks_unmatched >= expected["acks_unmatched"]
                    )

                await wait_until(counted, within=10, what="every stray to be counted")
                stats = pub.stats
            messages = await read_stream(client, name)
    finally:
        await attacker.close()
        await nc.close()
    check = outcomes.check_stream(messages)
    fault_report(
        f"{outcomes.summary()} lost={check.lost} faults=1 flood of {flood + status_strays} "
        f"stray inbox messages; counted malformed={stats.malformed} foreign={stats.foreign} "
        f"unmatched={stats.acks_unmatched}"
    )
    check.assert_ok()
    assert outcomes.acked == total, outcomes.summary()
    # Counted exactly: nothing of ours was mistaken for a stray, no stray for an ack.
    assert stats.malformed == expected["malformed"]
    assert stats.foreign == expected["foreign"] + status_strays
    assert stats.acks_unmatched == expected["acks_unmatched"]
    assert stats.acked == total
