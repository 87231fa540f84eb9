"""What every example shares: its command line, and a local cluster when none is given.

Each example runs against the cluster named by ``--brokers`` and ``--nats``, or starts
a one-node LocalCluster (real nats-server and Liftbridge processes) for itself.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any


def run_example(
    main: Callable[..., Awaitable[None]],
    doc: str | None,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> None:
    """Parse the example's command line and run ``main(brokers, nats_url, **extra)``."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    parser.add_argument("--brokers", help="comma-separated host:port of Liftbridge brokers")
    parser.add_argument("--nats", help="NATS URL of the cluster, e.g. nats://127.0.0.1:4222")
    if add_arguments is not None:
        add_arguments(parser)
    args = vars(parser.parse_args())
    brokers, nats_url = args.pop("brokers"), args.pop("nats")

    async def go(extra: dict[str, Any]) -> None:
        if brokers and nats_url:
            await main(brokers.split(","), nats_url, **extra)
            return
        from liftbridge_nats.testing import LocalCluster

        print("starting a local NATS + Liftbridge cluster ...", file=sys.stderr)
        async with LocalCluster(1) as cluster:
            await main(cluster.brokers, cluster.nats_url, **extra)

    asyncio.run(go(args))
