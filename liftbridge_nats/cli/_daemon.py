"""The detached process behind ``liftbridge-nats servers start``.

``python -m liftbridge_nats.cli._daemon --nodes N --state-file PATH`` forks at once: the
parent prints the child's pid and exits, so the caller never owns (or has to reap) the
long-lived process. The child leaves the caller's session, runs a
:class:`~liftbridge_nats.testing.LocalCluster`, writes the state file when the cluster is
ready and keeps it up until SIGTERM or SIGINT; then it stops every server and removes the
state file. Its output goes to the log file beside the state file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path


def _write_state(path: Path, state: dict[str, object]) -> None:
    # Write then rename: a reader never sees half a file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(path)


async def _serve(nodes: int, state_file: Path, log_file: Path) -> int:
    from liftbridge_nats.testing import LocalCluster

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with LocalCluster(nodes, start_timeout=120.0) as cluster:
        _write_state(
            state_file,
            {
                "pid": os.getpid(),
                "nodes": nodes,
                "nats_url": cluster.nats_url,
                "brokers": cluster.brokers,
                "node_ids": cluster.node_ids,
                "server_pids": cluster.pids(),
                # One entry per server, for `servers status` to name a crashed one.
                "processes": [
                    {
                        "name": "nats-server",
                        "pid": cluster.nats_pid(),
                        "log": str(cluster.nats_log_path),
                    }
                ]
                + [
                    {"name": node, "pid": cluster.node_pid(i), "log": str(cluster.log_path(i))}
                    for i, node in enumerate(cluster.node_ids)
                ],
                "namespace": cluster.namespace,
                "nats_monitor_url": cluster.nats_monitor_url,
                "workdir": str(cluster.workdir),
                "logs": [str(cluster.nats_log_path)]
                + [str(cluster.log_path(i)) for i in range(nodes)],
                "daemon_log": str(log_file),
                "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            },
        )
        print(
            f"{time.ctime()}: dev cluster ready: {cluster.nats_url} {cluster.brokers}", flush=True
        )
        await stop.wait()
        print(f"{time.ctime()}: stopping", flush=True)
    _remove_own_state(state_file)
    return 0


def _remove_own_state(state_file: Path) -> None:
    # Only if it is still ours: a newer start may have replaced it.
    try:
        if json.loads(state_file.read_text()).get("pid") == os.getpid():
            state_file.unlink()
    except (OSError, ValueError):
        pass


def _detach(log_file: Path) -> None:
    """Fork; the parent reports the child's pid and exits, the child becomes a daemon."""
    pid = os.fork()
    if pid:
        print(pid, flush=True)
        os._exit(0)
    os.setsid()
    log = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(devnull)
    os.close(log)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the dev-cluster daemon (not meant to be run by hand)."""
    parser = argparse.ArgumentParser(prog="python -m liftbridge_nats.cli._daemon")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--state-file", type=Path, required=True)
    parser.add_argument("--log-file", type=Path, required=True)
    parser.add_argument("--foreground", action="store_true", help="do not fork")
    args = parser.parse_args(argv)
    args.state_file.parent.mkdir(parents=True, exist_ok=True)
    if not args.foreground:
        _detach(args.log_file)
    print(
        f"{time.ctime()}: starting a {args.nodes}-node dev cluster (pid {os.getpid()})", flush=True
    )
    try:
        return asyncio.run(_serve(args.nodes, args.state_file, args.log_file))
    except Exception as exc:
        print(f"{time.ctime()}: error: {exc}", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
