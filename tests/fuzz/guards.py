"""Long fuzz run of the input guards against a real 3-node cluster (not part of the suite).

    .venv/bin/python -m tests.fuzz.guards --inputs 5000

Starts its own :class:`LocalCluster` (3 nodes), sends generated bad names and bad
arguments through the public API (``tests.fuzz._guards.bad_calls``): refused names,
groups and subjects, wrong types, out-of-range counts and durations, unknown streams.
Each call must end with ``InvalidArgumentError``/``TypeError`` before anything is sent,
or (for calls the server may answer, such as a look-up of an unknown stream) with a
``LiftbridgeError``. Every 200 inputs every node must still run; at the end a new
replicated stream must take a publish that reads back. Exit status 0 when no input
misbehaved and the cluster is healthy.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import nats

from liftbridge_nats import Client, Publisher
from liftbridge_nats.testing import LocalCluster

from ._guards import Tally, assert_healthy, attempt, bad_calls, examples

_CHUNK = 200


async def run(inputs: int) -> tuple[Tally, str | None]:
    """Send ``inputs`` generated calls; return the tally and what was unhealthy, if anything."""
    tally = Tally()
    async with LocalCluster(3) as cluster, Client(cluster.brokers, timeout=20) as client:
        nc = await nats.connect(cluster.nats_url)
        try:
            async with Publisher(nc, client=client, ack_timeout=5) as pub:
                while tally.inputs < inputs:
                    for call in examples(bad_calls, min(_CHUNK, inputs - tally.inputs)):
                        await attempt(call, client, pub, tally)
                    dead = [n for i, n in enumerate(cluster.node_ids) if not cluster.is_running(i)]
                    if dead:
                        return tally, f"after {tally.inputs} inputs nodes died: {dead}"
                    print(f"{tally.inputs:>7,d} inputs, {len(tally.findings)} findings", flush=True)
            try:
                await assert_healthy(cluster, client, nc)
            except AssertionError as exc:
                return tally, str(exc)
        finally:
            await nc.close()
    return tally, None


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print a summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=5000, help="generated calls to send")
    args = parser.parse_args(argv)
    started = time.monotonic()
    tally, unhealthy = asyncio.run(run(args.inputs))
    print(
        f"inputs={tally.inputs:,} refused before sending={tally.refused:,} "
        f"answered by the server with a LiftbridgeError={tally.answered:,} "
        f"findings={len(tally.findings)} time={time.monotonic() - started:.0f}s"
    )
    for outcome, n in sorted(tally.outcomes.items()):
        print(f"    {n:>7,d}  {outcome}")
    for finding in tally.findings[:50]:
        print(f"FINDING {finding}")
    print(
        "cluster: "
        + (
            f"UNHEALTHY: {unhealthy}"
            if unhealthy
            else "healthy (3 nodes alive, "
            "a new RF 3 stream took an ALL-acked publish that read back)"
        )
    )
    return 1 if tally.findings or unhealthy else 0


if __name__ == "__main__":
    sys.exit(main())
