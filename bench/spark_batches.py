"""Per micro-batch cost of a streaming query: wall time and connections opened.

A streaming query reads one Liftbridge stream with the ``liftbridge`` source and writes
every row to another with the ``liftbridge`` sink, on a ``local[2]`` session with a
1 s processing-time trigger, while a publisher outside Spark adds a few messages
every quarter second: each micro-batch is small, so its cost is mostly what the
source and the sink spend around the rows (planning calls, connecting).

Connections are counted on the servers' side of the loopback, in two ways:

* NATS: nats-server's own count of connections accepted (``/varz``
  ``total_connections``), exact.
* Liftbridge gRPC: the TCP connections to the brokers' ports, sampled from
  ``/proc/net/tcp`` every 20 ms. A closed connection stays listed (TIME_WAIT) for a
  minute, so one that lived between two samples is still seen; a connection is
  counted when it appears. The same sampling of the NATS port checks the method
  against ``/varz``.

Every process counts: the driver's planning calls and the Python workers' tasks.
Batches before ``--warmup`` are left out (Python workers start, modules import).
Beside the wall time, the CPU time of Spark's processes (the driver JVM and every
Python worker, not the servers nor this process) per batch: on a busy machine the
wall time grows with the load, the CPU spent much less.

Run: ``python -m bench.spark_batches`` (``--batches 20`` by default); it starts its
own LocalCluster and prints one line per figure, and ``--json`` writes them out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.spark import _proc_stat

# /proc/net/tcp states of a connection, from SYN_SENT to CLOSING (0A is LISTEN).
_CONNECTION_STATES = {"01", "02", "03", "04", "05", "06", "07", "08", "09", "0B"}


def _tcp_pairs(ports: set[int]) -> set[tuple[int, int]]:
    """(server port, client port) of every TCP connection on 127.0.0.1 to ``ports``."""
    out: set[tuple[int, int]] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                lines = f.readlines()
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] not in _CONNECTION_STATES:
                continue
            local = int(fields[1].rsplit(":", 1)[1], 16)
            remote = int(fields[2].rsplit(":", 1)[1], 16)
            if local in ports:
                out.add((local, remote))
            elif remote in ports:
                out.add((remote, local))
    return out


class ConnectionSampler:
    """Counts TCP connections to some ports as they appear, in a background thread."""

    def __init__(self, ports: Iterable[int], interval: float = 0.02) -> None:
        self._ports = set(ports)
        self._interval = interval
        self._lock = threading.Lock()
        self._opened: dict[int, int] = dict.fromkeys(self._ports, 0)
        self._seen: set[tuple[int, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcp-sampler", daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self._seen = _tcp_pairs(self._ports)  # already open: not counted
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            now = _tcp_pairs(self._ports)
            with self._lock:
                for server_port, _ in now - self._seen:
                    self._opened[server_port] += 1
                self._seen = now

    def opened(self) -> dict[int, int]:
        """Connections seen opening so far, per server port."""
        with self._lock:
            return dict(self._opened)


def _spark_roots(servers: Iterable[int]) -> list[int]:
    """This process's children but the servers: the JVM, whose tree holds the workers."""
    me, skip = os.getpid(), set(servers)
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in skip:
            stat = _proc_stat(int(name))
            if stat is not None and stat[0] == me:
                out.append(int(name))
    return out


def _varz(monitor_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{monitor_url}/varz", timeout=5) as r:
        out: dict[str, Any] = json.load(r)
    return out


class Feeder:
    """Publishes ``per_tick`` messages to a stream every ``tick`` seconds, in a thread,
    over one NATS connection opened before any count is taken."""

    def __init__(self, nats_url: str, stream: str, per_tick: int, tick: float) -> None:
        self._url, self._stream = nats_url, stream
        self._per_tick, self._tick = per_tick, tick
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="feeder", daemon=True)

    def __enter__(self) -> Feeder:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the feeder did not connect to NATS within 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _main(self) -> None:
        try:
            asyncio.run(self._feed())
        except BaseException as exc:  # reported by the caller
            self.error = exc
            self._ready.set()

    async def _feed(self) -> None:
        import nats

        from liftbridge_nats import AckPolicy, Publisher

        nc = await nats.connect(self._url)
        try:
            async with Publisher(nc, ack_timeout=30.0) as pub:
                self._ready.set()
                i = 0
                while not self._stop.is_set():
                    for _ in range(self._per_tick):
                        await pub.publish_async(
                            self._stream, f"m{i}".encode(), ack_policy=AckPolicy.LEADER
                        )
                        i += 1
                    await pub.flush()
                    await asyncio.sleep(self._tick)
        finally:
            await nc.close()


async def _create(brokers: list[str], *names: str) -> None:
    from liftbridge_nats import Client

    async with Client(brokers) as client:
        for name in names:
            await client.create_stream(name, name, partitions=2)


def _progress_of(query: Any, first: int, last: int) -> list[dict[str, Any]]:
    """The progress reports of batches ``first``..``last`` that Spark still holds."""
    return [p for p in query.recentProgress if first <= p["batchId"] <= last]


def measure(batches: int, warmup: int, per_tick: int) -> dict[str, Any]:
    """Run the query until ``warmup + batches`` micro-batches are done; the figures."""
    from bench.spark import _session, tree_cpu
    from liftbridge_nats.testing import LocalCluster

    with LocalCluster() as cluster, tempfile.TemporaryDirectory() as tmp:
        brokers = list(cluster.brokers)
        source, sink = (f"bench-batches-{uuid.uuid4().hex[:8]}-{s}" for s in ("in", "out"))
        asyncio.run(_create(brokers, source, sink))
        nats_port = int(cluster.nats_url.rsplit(":", 1)[1])
        grpc_ports = {int(b.rsplit(":", 1)[1]) for b in brokers}
        spark = _session("local[2]", **{"spark.sql.streaming.numRecentProgressUpdates": "200"})
        try:
            with Feeder(cluster.nats_url, source, per_tick, 0.25) as feeder:
                query = (
                    spark.readStream.format("liftbridge")
                    .option("brokers", ",".join(brokers))
                    .option("stream", source)
                    .option("startingOffsets", "latest")
                    .load()
                    .select("value")
                    .writeStream.format("liftbridge")
                    .option("nats_url", cluster.nats_url)
                    .option("brokers", ",".join(brokers))
                    .option("stream", sink)
                    .option("ack_policy", "ALL")
                    .option("checkpointLocation", str(Path(tmp) / "cp"))
                    .trigger(processingTime="1 second")
                    .start()
                )
                try:
                    with ConnectionSampler({nats_port, *grpc_ports}) as sampler:
                        done = _wait_batches(query, warmup - 1)
                        nats0 = _varz(cluster.nats_monitor_url)["total_connections"]
                        tcp0 = sampler.opened()
                        roots = _spark_roots(cluster.pids())
                        cpu0 = tree_cpu(roots)
                        t0 = time.monotonic()
                        end = _wait_batches(query, done + batches)
                        took = time.monotonic() - t0
                        cpu = tree_cpu(roots) - cpu0
                        nats1 = _varz(cluster.nats_monitor_url)["total_connections"]
                        tcp1 = sampler.opened()
                        load = os.getloadavg()[0]
                    progress = _progress_of(query, done + 1, end)
                finally:
                    query.stop()
                if feeder.error is not None:
                    raise feeder.error
        finally:
            spark.stop()
    n = end - done
    trigger_ms = [p["durationMs"]["triggerExecution"] for p in progress]
    add_ms = [p["durationMs"].get("addBatch", 0) for p in progress]
    offset_ms = [p["durationMs"].get("latestOffset", 0) for p in progress]
    rows = [p["numInputRows"] for p in progress]
    grpc = sum(tcp1[p] - tcp0[p] for p in grpc_ports)
    return {
        "batches": n,
        "wall_seconds": round(took, 3),
        "rows_per_batch": statistics.mean(rows) if rows else 0,
        "batch_ms_median": statistics.median(trigger_ms),
        "batch_ms_mean": round(statistics.mean(trigger_ms), 1),
        "batch_ms_max": max(trigger_ms),
        "spark_cpu_ms_per_batch": round(cpu / n * 1000, 1),
        "add_batch_ms_median": statistics.median(add_ms),
        "latest_offset_ms_median": statistics.median(offset_ms),
        "nats_connections_per_batch": (nats1 - nats0) / n,
        "nats_connections_per_batch_sampled": (tcp1[nats_port] - tcp0[nats_port]) / n,
        "grpc_connections_per_batch": grpc / n,
        "load_average_1min_at_end": round(load, 2),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }


def _wait_batches(query: Any, last: int, timeout: float = 300.0) -> int:
    """Wait until batch ``last`` (or a later one) has finished; the newest batch id."""
    deadline = time.monotonic() + timeout
    while True:
        progress = query.lastProgress
        if progress is not None and progress["batchId"] >= last:
            return int(progress["batchId"])
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"batch {last} not done within {timeout:.0f} s")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the figures (and write them as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=20, help="micro-batches measured")
    parser.add_argument("--warmup", type=int, default=3, help="micro-batches left out first")
    parser.add_argument("--per-tick", type=int, default=5, help="messages every 0.25 s")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    figures = measure(args.batches, args.warmup, args.per_tick)
    for key, value in figures.items():
        print(f"{key:<38} {value}")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
