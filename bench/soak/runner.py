"""Runs a soak: servers, the workload, one sample per interval, the final analysis.

The sampler reads the slowly moving levels (RSS, pending acks, tasks) several times per
interval and keeps their mean, so one sample caught on a burst does not decide a slope;
the per-interval counts (throughput, latency percentiles, errors) come from the workload.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import nats

from bench import machine
from bench.soak import probes
from bench.soak.stats import GROWTH_LIMIT_PERCENT, growth, latency_summary, warmup_end
from bench.soak.workload import Load, Workload
from liftbridge_nats import Client
from liftbridge_nats.testing import LocalCluster

# The series judged against the growth limit, with their unit and what they show.
SERIES: dict[str, tuple[str, str]] = {
    "rss_mib": ("MiB", "client RSS (VmRSS of the workload process)"),
    "fds": ("", "open file descriptors of the workload process"),
    "tasks": ("", "asyncio tasks alive"),
    "gc_objects": ("", "objects tracked by the garbage collector"),
    "pending": ("msgs", "Publisher.pending: messages waiting for their ack (interval mean)"),
    "buffered": ("msgs", "PublisherStats.buffered: messages waiting for NATS (interval mean)"),
    "reader_backlog": ("msgs", "acked on partition 0, not yet read by the subscription"),
    "consumer_backlog": ("msgs", "acked, not yet returned to the group member"),
    "acked_per_s": ("msg/s", "acks per second"),
    "read_per_s": ("msg/s", "messages read per second by the subscription"),
    "consumed_per_s": ("msg/s", "messages read per second by the group member"),
    "p50_ms": ("ms", "ack latency p50, from the scheduled send time"),
    "p99_ms": ("ms", "ack latency p99, from the scheduled send time"),
}
_VERSIONS = ("python", "liftbridge-nats", "nats-py", "grpcio", "protobuf")


@dataclass(frozen=True, slots=True)
class SoakSettings:
    """Length and pace of a soak, and the load it offers."""

    duration: float = 1800.0
    interval: float = 5.0
    warmup_fraction: float = 0.2
    load: Load = field(default_factory=Load)
    nodes: int = 1
    tracemalloc: bool = False
    level_every: float = 0.25
    drain_timeout: float = 30.0

    def as_dict(self) -> dict[str, Any]:
        """A plain dict for the JSON report (the ack policy by name)."""
        out = asdict(self)
        out["load"]["ack_policy"] = self.load.ack_policy.name
        return out


@dataclass(slots=True)
class _Levels:
    """Sums and maxima of the levels read during one interval."""

    reads: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    maxima: dict[str, float] = field(default_factory=dict)

    def add(self, values: dict[str, float]) -> None:
        self.reads += 1
        for name, value in values.items():
            self.sums[name] = self.sums.get(name, 0.0) + value
            self.maxima[name] = max(self.maxima.get(name, value), value)

    def mean(self, name: str) -> float | None:
        """The mean of the readings; None when the loop was too busy to take any."""
        if not self.reads or name not in self.sums:
            return None
        return round(self.sums[name] / self.reads, 2)


@contextlib.asynccontextmanager
async def _servers(
    settings: SoakSettings, brokers: list[str] | None, nats_url: str | None
) -> AsyncIterator[tuple[list[str], str, dict[str, int]]]:
    """The given servers, or a LocalCluster started for the run (with its pids)."""
    if brokers is not None and nats_url is not None:
        yield brokers, nats_url, {}
        return
    cluster = LocalCluster(settings.nodes, log_level="warn", start_timeout=120.0)
    await cluster.start()
    try:
        pids = {f"liftbridge {i}": cluster.node_pid(i) for i in range(settings.nodes)}
        pids["nats-server"] = cluster.nats_pid()
        yield cluster.brokers, cluster.nats_url, {k: v for k, v in pids.items() if v is not None}
    finally:
        await cluster.stop()


async def run(
    settings: SoakSettings,
    *,
    brokers: list[str] | None = None,
    nats_url: str | None = None,
    echo: Callable[[str], None] = print,
    command: str = "python -m bench.soak",
) -> dict[str, Any]:
    """Run one soak and return its record (settings, samples, growth, diagnostics).

    With ``brokers`` and ``nats_url`` the soak uses those servers; otherwise it starts a
    LocalCluster of ``settings.nodes`` nodes for the run.
    """
    started = datetime.now(UTC)
    load_before = machine.load_average()
    async with _servers(settings, brokers, nats_url) as (broker_list, url, server_pids):
        nc = await nats.connect(url)
        try:
            async with Client(broker_list) as client:
                stream = f"soak-{uuid.uuid4().hex[:8]}"
                await client.create_stream(
                    stream,
                    stream,
                    partitions=settings.load.partitions,
                    replication_factor=min(settings.nodes, 3) if brokers is None else 1,
                )
                workload = Workload(nc, client, stream, settings.load)
                phases: dict[str, float] = {}
                clock = time.monotonic()
                await workload.start()
                phases["start_s"] = time.monotonic() - clock
                try:
                    samples, diagnostics = await _sample(settings, workload, server_pids, echo)
                finally:
                    clock = time.monotonic()
                    await workload.stop_publishing()
                    phases["flush_s"] = time.monotonic() - clock
                    drained = await workload.drain(settings.drain_timeout)
                    phases["drain_s"] = time.monotonic() - clock - phases["flush_s"]
                    totals = _totals(workload, drained)
                    clock = time.monotonic()
                    await workload.close()
                    await client.delete_stream(stream)
                    phases["close_s"] = time.monotonic() - clock
                    totals["phases"] = {k: round(v, 3) for k, v in phases.items()}
        finally:
            await nc.close()
    described = machine.describe(None, None)
    record: dict[str, Any] = {
        "meta": {
            "started": started.isoformat(timespec="seconds"),
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": command,
            "machine": described["machine"],
            "versions": {k: described["versions"][k] for k in _VERSIONS},
            "load_before": load_before,
            "load_after": machine.load_average(),
            "servers": "given" if brokers is not None else f"LocalCluster({settings.nodes})",
        },
        "settings": settings.as_dict(),
        "warmup_end_s": warmup_end(settings.duration, settings.warmup_fraction),
        "samples": samples,
        "totals": totals,
        "diagnostics": diagnostics,
    }
    record["growth"] = analyse(record)
    return record


def analyse(record: dict[str, Any]) -> dict[str, Any]:
    """Growth of every series over the samples after warm-up (see ``stats.growth``)."""
    samples = record["samples"]
    start = record["warmup_end_s"]
    out: dict[str, Any] = {}
    for name in SERIES:
        points = [(s["t"], s[name]) for s in samples if s.get(name) is not None]
        try:
            g = growth([t for t, _ in points], [v for _, v in points], start)
        except ValueError as exc:
            out[name] = {"error": str(exc)}
            continue
        out[name] = g.as_dict()
    out["limit_percent"] = GROWTH_LIMIT_PERCENT
    return out


def _totals(workload: Workload, drained: bool) -> dict[str, Any]:
    t = workload.totals
    return {
        "sent": t.sent,
        "acked": t.acked,
        "failed": dict(t.failed),
        "read": t.read,
        "consumed": t.consumed,
        "commits": t.commits,
        "offset_gaps": workload.gaps,
        "reader_errors": dict(workload.reader_errors),
        "drained": drained,
        "reader_backlog_at_end": workload.reader_backlog(),
        "consumer_backlog_at_end": workload.consumer_backlog(),
        "publisher_stats": asdict(workload.publisher.stats),
    }


def _level_values(workload: Workload) -> dict[str, float]:
    stats = workload.publisher.stats
    return {
        "rss_mib": (probes.rss_kib() or 0) / 1024,
        "tasks": float(len(asyncio.all_tasks())),
        "pending": float(workload.publisher.pending),
        "buffered": float(stats.buffered),
    }


async def _sample(
    settings: SoakSettings,
    workload: Workload,
    server_pids: dict[str, int],
    echo: Callable[[str], None],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Sample once per interval until the duration is over; print one line each."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    warm = warmup_end(settings.duration, settings.warmup_fraction)
    levels = _Levels()

    async def read_levels() -> None:
        while True:
            levels.add(_level_values(workload))
            await asyncio.sleep(settings.level_every)

    level_task = asyncio.create_task(read_levels(), name="soak-levels")
    tracer = probes.AllocationTracer() if settings.tracemalloc else None
    types_at_warm: Any = None
    samples: list[dict[str, Any]] = []
    cpu_before, wall_before = probes.cpu_seconds(), time.monotonic()
    workload.take()
    echo(_header())
    try:
        i = 0
        while True:
            i += 1
            target = t0 + i * settings.interval
            if target > t0 + settings.duration + 1e-9:
                break
            await asyncio.sleep(max(0.0, target - loop.time()))
            t = round(loop.time() - t0, 3)
            tally = workload.take()
            current, levels = levels, _Levels()
            cpu_now, wall_now = probes.cpu_seconds(), time.monotonic()
            # A starved loop wakes late: rates are per second of the time that really passed.
            span = max(1e-9, wall_now - wall_before)
            cpu_percent = 100 * (cpu_now - cpu_before) / span
            cpu_before, wall_before = cpu_now, wall_now
            sample: dict[str, Any] = {
                "t": t,
                "rss_mib": current.mean("rss_mib"),
                "rss_max_mib": current.maxima.get("rss_mib"),
                "fds": probes.open_fds(),
                "tasks": current.mean("tasks"),
                "gc_objects": len(gc.get_objects()),
                "pending": current.mean("pending"),
                "pending_max": current.maxima.get("pending"),
                "buffered": current.mean("buffered"),
                "sent_per_s": round(tally.sent / span, 1),
                "acked_per_s": round(tally.acked / span, 1),
                "read_per_s": round(tally.read / span, 1),
                "consumed_per_s": round(tally.consumed / span, 1),
                "commits": tally.commits,
                "failed": dict(tally.failed),
                "reader_backlog": workload.reader_backlog(),
                "consumer_backlog": workload.consumer_backlog(),
                "cpu_percent": round(cpu_percent, 1),
                "load1": next(iter(machine.load_average()), None),
                "servers_rss_mib": {
                    name: round((probes.rss_kib(pid) or 0) / 1024, 1)
                    for name, pid in server_pids.items()
                },
                **latency_summary(tally.latencies),
            }
            samples.append(sample)
            echo(_line(sample))
            if types_at_warm is None and t >= warm:
                types_at_warm = probes.type_counts()
                if tracer is not None:
                    tracer.start()
        diagnostics: dict[str, Any] = {}
        if types_at_warm is not None:
            diagnostics["gc_type_growth"] = probes.type_growth(types_at_warm, probes.type_counts())
        if tracer is not None:
            diagnostics["tracemalloc_growth"] = tracer.finish()
        # While the load still runs: how much of the RSS is free memory kept by the allocator.
        diagnostics["release_free_memory"] = probes.release_free_memory()
        return samples, diagnostics
    finally:
        level_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await level_task


def _header() -> str:
    return (
        f"{'t s':>7} {'sent/s':>7} {'acked/s':>7} {'read/s':>7} {'cons/s':>7} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'max ms':>8} {'RSS MiB':>8} {'fds':>4} {'tasks':>5} "
        f"{'pending':>7} {'backlog':>7} {'gc objs':>8} {'cpu%':>5} {'load':>5} failed"
    )


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _line(s: dict[str, Any]) -> str:
    failed = ",".join(f"{k}={v}" for k, v in s["failed"].items()) or "0"
    return (
        f"{s['t']:7.1f} {s['sent_per_s']:7.0f} {s['acked_per_s']:7.0f} {s['read_per_s']:7.0f} "
        f"{s['consumed_per_s']:7.0f} {_fmt(s['p50_ms'], 2):>7} {_fmt(s['p99_ms'], 2):>7} "
        f"{_fmt(s['max_ms']):>8} {_fmt(s['rss_mib']):>8} {s['fds'] or 0:4d} "
        f"{_fmt(s['tasks'], 0):>5} {_fmt(s['pending']):>7} "
        f"{s['reader_backlog'] + s['consumer_backlog']:7d} "
        f"{s['gc_objects']:8d} {s['cpu_percent']:5.0f} {_fmt(s['load1'], 2):>5} {failed}"
    )
