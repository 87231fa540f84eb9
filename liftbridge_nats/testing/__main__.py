"""``python -m liftbridge_nats.testing``: install the test servers or run a local cluster.

Commands:

``install [--version v1.9.0]``
    Build (once) Liftbridge into the per-user cache, find nats-server, and print both
    paths and versions.
``run [--nodes N]``
    Start a LocalCluster, print its addresses, and keep it up until Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from liftbridge_nats.errors import ServerStartError
from liftbridge_nats.testing._cluster import LocalCluster
from liftbridge_nats.testing._install import (
    DEFAULT_LIFTBRIDGE_VERSION,
    binary_version,
    ensure_liftbridge,
    find_nats_server,
)


def _install(version: str) -> int:
    liftbridge = ensure_liftbridge(version)
    nats_server = find_nats_server()
    print(f"liftbridge:  {liftbridge}  ({binary_version(liftbridge)})")
    print(f"nats-server: {nats_server}  ({binary_version(nats_server)})")
    return 0


async def _run(nodes: int, version: str) -> int:
    async with LocalCluster(nodes, liftbridge_version=version) as cluster:
        print(f"nats:    {cluster.nats_url}")
        for i, (node_id, broker) in enumerate(zip(cluster.node_ids, cluster.brokers, strict=True)):
            print(f"{node_id}:      {broker}  (log: {cluster.log_path(i)})")
        print("Running; press Ctrl-C to stop.", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # SIGTERM too: its default action would exit without stopping the servers.
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    print("Stopped.", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m liftbridge_nats.testing``."""
    parser = argparse.ArgumentParser(prog="python -m liftbridge_nats.testing")
    sub = parser.add_subparsers(dest="command", required=True)
    install = sub.add_parser("install", help="build/locate the Liftbridge and NATS servers")
    install.add_argument("--version", default=DEFAULT_LIFTBRIDGE_VERSION)
    run = sub.add_parser("run", help="run a local cluster until Ctrl-C")
    run.add_argument("--nodes", type=int, default=1)
    run.add_argument("--version", default=DEFAULT_LIFTBRIDGE_VERSION)
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            return _install(args.version)
        with contextlib.suppress(KeyboardInterrupt):
            return asyncio.run(_run(args.nodes, args.version))
        return 0
    except ServerStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
