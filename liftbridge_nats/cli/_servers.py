"""``servers install | start | stop | env | status``: the local development cluster.

``start`` runs a :class:`~liftbridge_nats.testing.LocalCluster` (1 or 3 nodes) in a
detached process (see ``_daemon``) that records its addresses in a state file; every other
command then connects to it by default. ``stop`` ends that process, which stops the servers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import _servers_env
from ._common import (
    EXIT_ERROR,
    EXIT_NOT_RUNNING,
    EXIT_OK,
    CliError,
    live_state,
    pid_alive,
    read_state,
    state_file_path,
)
from ._output import Console, key_values

_START_TIMEOUT = 180.0  # includes a first-time Liftbridge build on a slow machine
_STOP_TIMEOUT = 20.0


def register(commands: Any) -> None:
    """Add the ``servers`` command group."""
    servers = commands.add_parser(
        "servers",
        help="install, start, stop or show the local dev cluster",
        description="Manage a local development cluster: one nats-server and 1 or 3 "
        "Liftbridge nodes on free loopback ports, run in the background. Its state file "
        "(default ~/.cache/liftbridge-nats/dev-cluster.json, or $LIFTBRIDGE_NATS_STATE_FILE) "
        "tells every other command where to connect.",
    )
    sub = servers.add_subparsers(dest="servers_command", metavar="ACTION", required=True)

    install = sub.add_parser(
        "install",
        help="build Liftbridge (once, into the user cache) and locate nats-server",
        description="Build the Liftbridge server from its Go module into "
        "~/.cache/liftbridge-nats (once; needs Go) and locate nats-server.",
    )
    install.add_argument("--version", default=None, help="Liftbridge version (default: pinned)")
    install.set_defaults(handler=_install)

    start = sub.add_parser(
        "start",
        help="start the dev cluster in the background",
        description="Start the dev cluster in a background process and wait until it is ready.",
    )
    start.add_argument(
        "--nodes", type=int, choices=(1, 3), default=1, help="Liftbridge nodes (default 1)"
    )
    start.add_argument("--json", action="store_true", help="print the state as JSON")
    start.set_defaults(handler=_start)

    stop = sub.add_parser(
        "stop", help="stop the dev cluster", description="Stop the dev cluster and its servers."
    )
    stop.set_defaults(handler=_stop)
    _servers_env.register(sub)

    status = sub.add_parser(
        "status",
        help="check the dev cluster's health (exit 1 if unhealthy, 3 if none runs)",
        description="Show the dev cluster's addresses and check its health: every server "
        "process alive, every address answering, every node connected to NATS and to a "
        "metadata leader. A crashed server is named with its log. Exit status 0 when it "
        "is healthy, 1 when a server is down or does not answer, 3 when no dev cluster runs.",
    )
    status.add_argument("--json", action="store_true", help="print the state as JSON")
    status.set_defaults(handler=_status)


async def _install(args: argparse.Namespace, console: Console) -> int:
    from liftbridge_nats.testing import (
        DEFAULT_LIFTBRIDGE_VERSION,
        ensure_liftbridge,
        find_nats_server,
    )

    version = args.version or DEFAULT_LIFTBRIDGE_VERSION
    liftbridge = await asyncio.to_thread(ensure_liftbridge, version)
    nats_server = find_nats_server()
    key_values(console, [("liftbridge", liftbridge), ("nats-server", nats_server)])
    return EXIT_OK


async def _show(console: Console, state: dict[str, Any], as_json: bool, path: Path) -> bool:
    """Print the dev cluster's state and health; True when it is healthy."""
    from ._health import check, reachable

    problems = await asyncio.to_thread(check, state, _is_our_server)
    brokers = list(state.get("brokers", []))
    up = [b for b in brokers if reachable(b)]
    if as_json:
        console.json(
            {
                "running": True,
                "healthy": not problems,
                "problems": [
                    {"problem": p.text, "log": p.log, "log_tail": list(p.log_tail)}
                    for p in problems
                ],
                "state_file": str(path),
                "brokers_reachable": len(up),
                **state,
            }
        )
        return not problems
    health = console.style(
        f"{len(up)}/{len(brokers)} reachable", "green" if up == brokers else "red"
    )
    status = (
        console.style("running", "green", "bold")
        if not problems
        else console.style("unhealthy", "red", "bold")
    )
    key_values(
        console,
        [
            ("status", status),
            ("nodes", state.get("nodes")),
            ("nats", state.get("nats_url")),
            ("brokers", f"{','.join(brokers)} ({health})"),
            ("pid", state.get("pid")),
            ("started", state.get("started_at")),
            ("logs", state.get("workdir", "") + "/logs"),
            ("state file", path),
        ],
    )
    for problem in problems:
        console.error(problem.text + (f"; its log: {problem.log}" if problem.log else ""))
        for line in problem.log_tail:
            console.info(f"    {line}")
    if problems:
        console.info(
            "restart the dev cluster with `liftbridge-nats servers stop` and "
            "`liftbridge-nats servers start`"
        )
    return not problems


async def _start(args: argparse.Namespace, console: Console) -> int:
    path = state_file_path()
    running = live_state(path)
    if running is not None:
        raise CliError(
            f"a dev cluster is already running (pid {running['pid']}, {running['nats_url']}); "
            "stop it first with `liftbridge-nats servers stop`"
        )
    # Build or find the binaries here, so a first-time build reports on this terminal
    # and a missing toolchain is an error message rather than a line in the log.
    from liftbridge_nats.testing import ensure_liftbridge, find_nats_server

    await asyncio.to_thread(ensure_liftbridge)
    find_nats_server()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # stale: its process is gone
    log_file = path.with_suffix(".log")
    launched = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "liftbridge_nats.cli._daemon",
            "--nodes",
            str(args.nodes),
            "--state-file",
            str(path),
            "--log-file",
            str(log_file),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        pid = int(launched.stdout.strip())
    except ValueError:
        raise CliError(
            f"could not launch the dev cluster process: {launched.stderr.strip()}"
        ) from None
    console.info(f"starting a {args.nodes}-node dev cluster (pid {pid}) ...")
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        state = read_state(path)
        if state is not None and state.get("pid") == pid:
            return EXIT_OK if await _show(console, state, args.json, path) else EXIT_ERROR
        if not pid_alive(pid):
            raise CliError(
                f"the dev cluster did not start. Its log ({log_file}):\n{_tail(log_file)}"
            )
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            raise CliError(
                f"the dev cluster was not ready within {_START_TIMEOUT:.0f} s; "
                f"see {log_file}:\n{_tail(log_file)}"
            )
        await asyncio.sleep(0.1)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


async def _stop(args: argparse.Namespace, console: Console) -> int:
    path = state_file_path()
    state = read_state(path)
    if state is None:
        console.info("no dev cluster is running")
        return EXIT_OK
    pid = int(state.get("pid", 0))
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not await _wait_gone(pid, _STOP_TIMEOUT):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # The daemon stops its servers itself; these are only left if it was killed hard.
    for server_pid in state.get("server_pids", []):
        if _is_our_server(int(server_pid)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(server_pid), signal.SIGKILL)
    path.unlink(missing_ok=True)
    console.print(f"stopped the dev cluster (pid {pid})")
    return EXIT_OK


async def _wait_gone(pid: int, within: float) -> bool:
    """Wait until process ``pid`` is gone; False if it is still there after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        if not pid_alive(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.1)


def _is_our_server(pid: int) -> bool:
    # Never signal a recycled pid that now belongs to something else.
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"nats-server" in cmdline or b"liftbridge" in cmdline


async def _status(args: argparse.Namespace, console: Console) -> int:
    path = state_file_path()
    state = live_state(path)
    if state is None:
        if args.json:
            console.json({"running": False, "state_file": str(path)})
        else:
            console.print(
                "no dev cluster is running (start one with `liftbridge-nats servers start`)"
            )
        return EXIT_NOT_RUNNING
    return EXIT_OK if await _show(console, state, args.json, path) else EXIT_ERROR
