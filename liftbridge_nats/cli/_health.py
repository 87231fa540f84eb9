"""Is the dev cluster healthy? The checks behind ``liftbridge-nats servers status``.

Three layers, each only when the one before found nothing wrong: every server process
of the state file is alive (a dead one is named with its log, the last lines of which
usually say why: a Liftbridge panic, for instance); every address accepts connections;
then the harness's readiness probe (``liftbridge_nats.testing._readiness``) asks, as a
client would, whether each node is connected to NATS, serves gRPC, lists every node and
reaches a metadata leader.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Problem", "check"]

_TAIL_LINES = 3
_RPC_TIMEOUT = 3.0


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the dev cluster, and where to read more."""

    text: str
    log: str | None = None
    log_tail: tuple[str, ...] = ()


def reachable(address: str) -> bool:
    """Whether ``host:port`` accepts a TCP connection within half a second."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except (OSError, ValueError):
        return False


def _tail(path: str, lines: int) -> tuple[str, ...]:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ()
    panic = [i for i, line in enumerate(text) if line.startswith("panic:")]
    # A Go panic prints its reason on the "panic:" line and a stack trace after it.
    start = panic[-1] if panic else max(0, len(text) - lines)
    return tuple(line for line in text[start : start + lines] if line.strip())


def check(state: dict[str, Any], is_alive: Callable[[int], bool]) -> list[Problem]:
    """What is wrong with the dev cluster described by ``state`` (empty: healthy).

    ``is_alive(pid)`` tells whether a recorded server process still runs.
    """
    problems: list[Problem] = []
    for proc in state.get("processes") or []:
        pid = proc.get("pid")
        if not isinstance(pid, int) or not is_alive(pid):
            what = (
                "nats-server"
                if proc["name"] == "nats-server"
                else f"Liftbridge node {proc['name']}"
            )
            problems.append(
                Problem(
                    f"{what} (pid {pid}) is not running",
                    proc.get("log"),
                    _tail(proc.get("log", ""), _TAIL_LINES),
                )
            )
    if "processes" not in state:  # a state file written before processes were named
        for pid in state.get("server_pids") or []:
            if not is_alive(int(pid)):
                problems.append(Problem(f"server process {pid} is not running"))
    if problems:
        return problems
    nats_address = str(state.get("nats_url", "")).rpartition("//")[2]
    if nats_address and not reachable(nats_address):
        problems.append(Problem(f"NATS at {nats_address} accepts no connection"))
    ids = list(state.get("node_ids") or [])
    brokers = list(state.get("brokers") or [])
    for node, address in zip(ids, brokers, strict=False):
        if not reachable(address):
            problems.append(Problem(f"Liftbridge node {node} at {address} accepts no connection"))
    if problems or not state.get("namespace") or not state.get("nats_monitor_url"):
        return problems
    from liftbridge_nats.testing._readiness import ReadinessTarget, probe

    reason = probe(
        ReadinessTarget(
            brokers=dict(zip(ids, brokers, strict=True)),
            namespace=str(state["namespace"]),
            monitor_url=str(state["nats_monitor_url"]),
            cursors_enabled=True,
            rpc_timeout=_RPC_TIMEOUT,
        )
    )
    if reason is not None:
        problems.append(Problem(f"the cluster does not answer as it should: {reason}"))
    return problems
