"""A chaos run (``python -m bench.chaos``) interrupted with SIGINT while a fault is in
force leaves nothing behind: no container (servers, helpers, the data tmpfs holder), no
network and no volume of its cluster. About 15 s."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from liftbridge_nats.testing._docker import CLUSTER_LABEL

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
# Seed 6's schedule starts with pause(n0) at t+5 s: its line is printed as the fault
# starts (the pause follows within a moment), and the data tmpfs of n2 (a volume and its
# holder container) exists by then.
_SEED = "6"


def _wait_for_line(process: subprocess.Popen[str], pattern: str, within: float) -> list[str]:
    """Read the run's output until a line matches ``pattern``; return the lines read."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break  # the run ended
        lines.append(line)
        if re.search(pattern, line):
            return lines
    raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(lines)}")


def _wait_for_a_paused_container(client: Any, label: str, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while True:
        during = client.containers.list(all=True, filters={"label": label})
        if any(c.status == "paused" for c in during):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"no container paused: {[c.name for c in during]}")
        time.sleep(0.1)


def test_sigint_during_a_fault_leaves_nothing(docker_engine: Any, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "bench.chaos", "--seed", _SEED, "--duration", "60"]
    process = subprocess.Popen(
        [*command, "--out", str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        lines = _wait_for_line(process, r"starting the cluster \(lbn-", within=60)
        match = re.search(r"\((lbn-[0-9a-f]+)\)", lines[-1])
        assert match is not None
        namespace = match.group(1)
        lines += _wait_for_line(process, r"inject pause\(n0\)", within=120)
        label = f"{CLUSTER_LABEL}={namespace}"
        client = docker_engine.client
        _wait_for_a_paused_container(client, label)
        assert client.volumes.list(filters={"label": label}), "no data tmpfs volume"
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    text = "".join(lines) + output
    assert process.returncode == 130, text
    assert f"cluster {namespace} removed" in text, text
    left = [c.name for c in client.containers.list(all=True, filters={"label": label})]
    left += [n.name for n in client.networks.list(filters={"label": label})]
    left += [v.name for v in client.volumes.list(filters={"label": label})]
    assert not left, f"left behind after SIGINT: {left}"
    # The same, as the command line sees it (names start with the namespace).
    ps = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"name={namespace}", "-q"],
        capture_output=True,
        text=True,
        check=True,
    )
    networks = subprocess.run(
        ["docker", "network", "ls", "--filter", f"name={namespace}", "-q"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert not ps.stdout.strip() and not networks.stdout.strip()
