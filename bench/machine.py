"""The machine, software versions and load that every run prints beside its figures."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import TypedDict

from bench.settings import BENCH_DIR


class Machine(TypedDict):
    """The hardware and OS a run measured on."""

    cpu: str
    cores: int | None
    memory_gib: float
    os: str


class Description(TypedDict):
    """What :func:`describe` returns: the machine, and a version for every name measured."""

    machine: Machine
    versions: dict[str, str]


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc.__class__.__name__})"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "unavailable"


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def go_liftbridge_version() -> str:
    """The go-liftbridge version pinned in bench/go/go.mod."""
    text = (BENCH_DIR / "go" / "go.mod").read_text()
    match = re.search(r"github\.com/liftbridge-io/go-liftbridge/v2 (v\S+)", text)
    return match.group(1) if match else "unknown"


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages (a sign of other work on a shared machine)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


SPEED_PROBE_ADDITIONS = 3_000_000


def speed_probe() -> float:
    """Milliseconds a fixed pure-Python loop takes now: the machine's speed at this moment.

    A shared or throttled machine can change speed by half or more within minutes, and
    rounds of the same client then differ as much; the spread of these probes over a run
    shows how far one round can be compared with the next.
    """
    total = 0
    started = time.perf_counter()
    for i in range(SPEED_PROBE_ADDITIONS):
        total += i
    return round((time.perf_counter() - started) * 1000, 1)


def describe(liftbridge_bin: str | None, nats_bin: str | None) -> Description:
    """Machine, OS and versions of everything measured."""
    versions = {
        "python": sys.version.split()[0],
        "liftbridge-nats": _dist_version("liftbridge-nats"),
        "nats-py": _dist_version("nats-py"),
        "grpcio": _dist_version("grpcio"),
        "protobuf": _dist_version("protobuf"),
        "gufo-liftbridge": _dist_version("gufo-liftbridge"),
        "uvloop": _dist_version("uvloop"),
        "liftbridge server": _first_line([liftbridge_bin, "--version"]) if liftbridge_bin else "?",
        "nats-server": _first_line([nats_bin, "--version"]) if nats_bin else "?",
        "go-liftbridge": go_liftbridge_version(),
        "go": _first_line(["go", "version"]),
    }
    return {
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "memory_gib": _memory_gib(),
            "os": f"{platform.system()} {platform.release()}",
        },
        "versions": versions,
    }
