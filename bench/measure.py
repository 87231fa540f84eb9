"""Measurement helpers shared by every worker: timers, CPU, memory, percentiles.

Imports nothing from liftbridge_nats: the gufo-liftbridge worker uses it too, and its CPU
and memory figures must not include the SDK.
"""

from __future__ import annotations

import math
import resource
import time
from collections.abc import Sequence
from typing import Any

# What the key+headers cases put on every message (every client the same).
KEY = b"customer-42"
HEADER_NAME = "trace-id"
HEADER_VALUE = b"4bf92f3577b34da6"


def payload(size: int) -> bytes:
    """The value every client publishes: ``size`` bytes of a repeating a-z pattern."""
    return bytes(97 + i % 26 for i in range(size))


def _status_kib(field: str) -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def max_rss_kib() -> int:
    """Peak resident set size of this process so far, in KiB.

    /proc's VmHWM, not ``ru_maxrss``: on Linux a child inherits its parent's
    ``ru_maxrss`` across fork and exec, so that figure would include the runner's.
    """
    peak = _status_kib("VmHWM:")
    return peak if peak >= 0 else int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def rss_kib() -> int:
    """Current resident set size in KiB."""
    return _status_kib("VmRSS:")


class Meter:
    """Wall time, process CPU time (all threads) and peak RSS across a timed section."""

    def __init__(self) -> None:
        self._wall = 0.0
        self._cpu = 0.0
        self._rss = 0

    def start(self) -> None:
        """Start the timed section."""
        self._rss = rss_kib()
        self._cpu = time.process_time()
        self._wall = time.perf_counter()

    def stop(self, count: int, errors: int = 0, **extra: Any) -> dict[str, Any]:
        """End the timed section and return the figures for ``count`` messages."""
        wall = time.perf_counter() - self._wall
        cpu = time.process_time() - self._cpu
        rss = max_rss_kib()
        return {
            "count": count,
            "errors": errors,
            "seconds": wall,
            "rate": count / wall if wall > 0 else 0.0,
            "cpu_seconds": cpu,
            "cpu_us_per_msg": cpu / count * 1e6 if count else 0.0,
            "max_rss_kib": rss,
            # Peak during the section minus resident size when it started: what the
            # client needed on top of its idle footprint.
            "rss_delta_kib": rss - self._rss,
            **extra,
        }


def percentiles(samples_s: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/p99.9/max of latencies given in seconds, returned in milliseconds."""
    data = sorted(samples_s)
    if not data:
        return {}

    def at(q: float) -> float:
        # Nearest-rank: the smallest sample with at least q of the samples at or below it.
        rank = max(1, math.ceil(q * len(data)))
        return data[rank - 1] * 1e3

    return {
        "p50_ms": at(0.50),
        "p90_ms": at(0.90),
        "p99_ms": at(0.99),
        "p999_ms": at(0.999),
        "max_ms": data[-1] * 1e3,
        "mean_ms": sum(data) / len(data) * 1e3,
    }


class Schedule:
    """Send times for a fixed offered load: message ``i`` is due at ``t0 + i / rate``.

    Latency is measured from the due time, not from when the send happened, so a
    stall that delays sends shows up in the figures instead of being hidden
    (coordinated omission).
    """

    def __init__(self, rate: float, total: int, t0: float) -> None:
        self.rate = rate
        self.total = total
        self.t0 = t0

    def due(self, i: int) -> float:
        """Scheduled send time of message ``i`` (perf_counter seconds)."""
        return self.t0 + i / self.rate

    def due_count(self, now: float) -> int:
        """How many messages are due at ``now``."""
        if now < self.t0:
            return 0
        return min(self.total, int((now - self.t0) * self.rate) + 1)
