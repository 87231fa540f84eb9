"""The Spark section of the suite: the data source beside the SDK, in one process.

Three comparisons, each in alternating rounds (the median round is reported; the
read and the sink first run once untimed, for the JVM to warm up):

* **read**: a Spark batch read of one partition as a single task (written to Spark's
  ``noop`` sink, so every row is materialised) against the SDK's own
  ``Client.subscribe`` on the same partition. The task's rate is rows over the
  task's run time as Spark reports it (its REST API), without job scheduling; the
  job's wall-clock rate is kept too.
* **sink**: ``df.write.format("liftbridge")`` from a ``local[2]`` session (two tasks,
  each with its own Publisher, ALL acks, round-robin over two partitions) against a
  single Python Publisher doing the same with ``publish_async``, and against two such
  Publishers in two processes, half the rows each: the sink's own shape without Spark
  (two tasks are two Python workers), which shows what two publishing processes cost
  on the machine apart from what the sink adds.
* **scaling**: a Spark standalone cluster (master and workers as processes, one core
  each), first with one worker, then with two: rows per second of a batch read of a
  4-partition stream and of a write to another.

CPU per row is the CPU time of every process involved (the driver with its JVM and
Python workers, and for the standalone cluster the master's and workers' process
trees), read from /proc, divided by the rows.

The suite runs this module in a worker process (``python -m bench.spark '<json spec>'``,
last stdout line: the results by client); ``python -m bench.spark`` alone runs it on
its own LocalCluster and prints the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.settings import SPARK_ROUNDS

READ = "spark read (1 task)"
READ_PEER = "subscribe (same partition)"
SINK = "spark sink (local[2])"
SINK_PEER = "one Publisher"
SINK_PAIR = "two Publishers (two processes)"
SCALE_READ_1 = "spark read, 1 worker"
SCALE_READ_2 = "spark read, 2 workers"
SCALE_SINK_1 = "spark sink, 1 worker"
SCALE_SINK_2 = "spark sink, 2 workers"
CLIENTS = (
    READ,
    READ_PEER,
    SINK,
    SINK_PEER,
    SINK_PAIR,
    SCALE_READ_1,
    SCALE_READ_2,
    SCALE_SINK_1,
    SCALE_SINK_2,
)
SINK_PARTITIONS = 2
SCALE_PARTITIONS = 4


# ------------------------------------------------------------------ CPU of process trees


def _proc_stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, utime + stime in seconds) of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks


def tree_cpu(roots: list[int]) -> float:
    """CPU seconds used so far by the live processes under ``roots`` (roots included)."""
    stats: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _proc_stat(int(name))
            if st is not None:
                stats[int(name)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    me = os.getpid()
    total, todo, seen = 0.0, list(roots), set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        # /proc counts in clock ticks (10 ms): a short read in this process can show
        # as no CPU at all, so this process's own share comes from its precise clock.
        total += time.process_time() if pid == me else stats[pid][1]
        todo.extend(children.get(pid, []))
    return total


class Meter:
    """Wall time and process-tree CPU across one timed section."""

    def __init__(self, roots: Callable[[], list[int]]) -> None:
        self._roots = roots
        self._t0 = 0.0
        self._cpu0 = 0.0

    def __enter__(self) -> Meter:
        self._cpu0 = tree_cpu(self._roots())
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
        self.cpu = tree_cpu(self._roots()) - self._cpu0

    def result(self, rows: int, seconds: float | None = None, **extra: Any) -> dict[str, Any]:
        """Figures for ``rows`` rows (``seconds`` instead of the wall time, if given)."""
        return figures(rows, self.seconds if seconds is None else seconds, self.cpu, **extra)


def figures(rows: int, seconds: float, cpu: float, **extra: Any) -> dict[str, Any]:
    """The result of one timed section: ``rows`` in ``seconds`` using ``cpu`` seconds."""
    return {
        "count": rows,
        "errors": 0,
        "seconds": round(seconds, 4),
        "rate": rows / seconds if seconds > 0 else 0.0,
        "cpu_seconds": round(cpu, 4),
        "cpu_us_per_msg": cpu / rows * 1e6 if rows else 0.0,
        **extra,
    }


# ------------------------------------------------------------------ SDK side


async def _create(brokers: list[str], name: str, partitions: int) -> None:
    from liftbridge_nats import Client

    async with Client(brokers) as client:
        await client.create_stream(name, name, partitions=partitions)


async def _delete(brokers: list[str], name: str) -> None:
    from liftbridge_nats import Client

    async with Client(brokers) as client:
        await client.delete_stream(name)


def row_values(start: int, count: int, size: int) -> list[bytes]:
    """The values of rows ``start`` to ``start + count`` of :func:`_values`'s DataFrame
    (each row's id left-padded with ``x`` to ``size`` bytes, as Spark's ``lpad``): what
    the Publishers compared with the sink publish, built before they are timed."""
    return [str(i).rjust(size, "x")[:size].encode() for i in range(start, start + count)]


async def _publish(nats_url: str, stream: str, partitions: int, values: Sequence[bytes]) -> None:
    """``values`` round-robin over the partitions with ALL acks, one Publisher."""
    import nats

    from liftbridge_nats import AckPolicy, Publisher, partition_subject

    subjects = [partition_subject(stream, p) for p in range(partitions)]
    rows = len(values)
    nc = await nats.connect(nats_url)
    try:
        async with Publisher(nc, ack_timeout=60.0) as pub:
            for i, value in enumerate(values):
                await pub.publish_async(subjects[i % partitions], value, ack_policy=AckPolicy.ALL)
            await pub.flush()
            if pub.stats.acked < rows:
                raise RuntimeError(f"{rows - pub.stats.acked} publish(es) of {rows} not acked")
    finally:
        await nc.close()


def _publish_pair(
    nats_url: str, stream: str, partitions: int, rows: int, size: int
) -> tuple[float, float]:
    """Two processes each running :func:`_publish` on half the rows, started together
    once both have imported their modules and built their values: (wall seconds, CPU
    seconds of both, from their own clocks, since a process's CPU leaves /proc when it
    ends)."""
    import subprocess

    script = (
        "import asyncio, sys, time\n"
        "from bench.spark import _publish, row_values\n"
        "url, stream, parts, start, rows, size = sys.argv[1:]\n"
        "values = row_values(int(start), int(rows), int(size))\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "cpu = time.process_time()\n"
        "asyncio.run(_publish(url, stream, int(parts), values))\n"
        "print(time.process_time() - cpu, flush=True)\n"
    )
    root = Path(__file__).resolve().parent.parent
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                script,
                nats_url,
                stream,
                str(partitions),
                str(start),
                str(n),
                str(size),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=root,
        )
        for start, n in ((0, rows // 2), (rows // 2, rows - rows // 2))
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a publishing process did not start (exit {proc.poll()})")
        started = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        cpu = 0.0
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if proc.wait() != 0 or not line.strip():
                raise RuntimeError(f"a publishing process failed (exit {proc.returncode})")
            cpu += float(line)
        return time.perf_counter() - started, cpu
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


async def _subscribe(brokers: list[str], stream: str, rows: int) -> int:
    from liftbridge_nats import Client, StartPosition, StopPosition

    seen = 0
    async with Client(brokers) as client:
        sub = client.subscribe(
            stream,
            start_position=StartPosition.EARLIEST,
            stop_position=StopPosition.OFFSET,
            stop_offset=rows - 1,
        )
        async with sub:
            async for _ in sub:
                seen += 1
    return seen


# ------------------------------------------------------------------ Spark side


def _session(master: str, **conf: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from liftbridge_nats.spark import LiftbridgeDataSource

    builder = (
        SparkSession.builder.master(master)
        .appName("liftbridge-nats-bench")
        .config("spark.ui.port", "0")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.pyspark.python", sys.executable)
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(LiftbridgeDataSource)
    return spark


def _last_stage(spark: Any) -> dict[str, Any]:
    """The newest completed stage, from the driver's REST API."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages?status=complete"
    with urllib.request.urlopen(url, timeout=10) as r:
        stages: list[dict[str, Any]] = json.load(r)
    return max(stages, key=lambda s: s["stageId"])


def _reader(spark: Any, brokers: list[str], stream: str, **options: str) -> Any:
    r = spark.read.format("liftbridge").option("brokers", ",".join(brokers))
    r = r.option("stream", stream)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def _write(df: Any, nats_url: str, brokers: list[str], stream: str) -> None:
    (
        df.write.format("liftbridge")
        .mode("append")
        .option("nats_url", nats_url)
        .option("brokers", ",".join(brokers))
        .option("stream", stream)
        .option("ack_policy", "ALL")
        .option("ack_timeout", "60")
        .save()
    )


def _values(spark: Any, rows: int, size: int, tasks: int) -> Any:
    """A cached DataFrame of ``rows`` binary values of ``size`` bytes in ``tasks`` parts."""
    df = spark.range(rows, numPartitions=tasks).selectExpr(
        f"cast(lpad(cast(id as string), {size}, 'x') as binary) AS value"
    )
    df = df.cache()
    df.count()
    return df


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median rate, with every run's rate beside it."""
    ordered = sorted(runs, key=lambda r: r["rate"])
    out = dict(ordered[len(ordered) // 2])
    if len(runs) > 1:
        out["rounds"] = len(runs)
        out["rates_per_round"] = [round(r["rate"]) for r in runs]
    return out


class _Streams:
    """Fresh streams on demand, each deleted when its round is done (the rest at the end).

    Liftbridge gives a new partition to the broker that holds the fewest, so streams
    left alive would push each round's stream onto other brokers than the last one's:
    deleted at once, every round's stream gets the same brokers.
    """

    def __init__(self, brokers: list[str], partitions: int) -> None:
        self._brokers = brokers
        self._partitions = partitions
        self._made: list[str] = []

    def new(self) -> str:
        name = f"bench-spark-{uuid.uuid4().hex[:10]}"
        asyncio.run(_create(self._brokers, name, self._partitions))
        self._made.append(name)
        return name

    @contextmanager
    def fresh(self) -> Iterator[str]:
        """A new stream for one block, deleted as soon as the block ends."""
        name = self.new()
        try:
            yield name
        finally:
            self._made.remove(name)
            self._drop(name)

    def close(self) -> None:
        while self._made:
            self._drop(self._made.pop())

    def _drop(self, name: str) -> None:
        try:
            asyncio.run(_delete(self._brokers, name))
        except Exception as exc:  # a leftover stream only costs disk
            print(f"could not delete {name}: {exc}", file=sys.stderr)


@contextmanager
def _streams(brokers: list[str], partitions: int) -> Iterator[_Streams]:
    """A :class:`_Streams` whose streams are all gone afterwards."""
    made = _Streams(brokers, partitions)
    try:
        yield made
    finally:
        made.close()


def measure_local(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The read and sink comparisons on a local[2] session."""
    brokers, nats_url, size = spec["brokers"], spec["nats_url"], spec["size"]
    rounds, read_rows, sink_rows = spec["rounds"], spec["read_count"], spec["sink_count"]
    pid = os.getpid()
    runs: dict[str, list[dict[str, Any]]] = {
        c: [] for c in (READ, READ_PEER, SINK, SINK_PEER, SINK_PAIR)
    }
    spark = _session("local[2]")
    try:
        # One task reads the whole partition: the split is as large as the read.
        split = {"maxOffsetsPerSplit": str(read_rows)}
        # Warm-up, untimed: one whole read and one whole write, as the timed rounds do
        # them. They start the Python workers and import their modules, and they let
        # the JVM compile its hot paths: a first round on a cold JVM ran 0.6-0.75x the
        # rounds after it, while the SDK peers (plain Python) ran flat.
        _reader(spark, brokers, spec["read_stream"], **split).write.format("noop").mode(
            "overwrite"
        ).save()
        df = _values(spark, sink_rows, size, tasks=2)
        # The rows the sink writes, for the Publisher to publish the same values (not one
        # value over and over, which a cache keeps hot: 2-3% faster).
        sink_values = row_values(0, sink_rows, size)
        with _streams(brokers, SINK_PARTITIONS) as streams:
            with streams.fresh() as target:
                _write(df, nats_url, brokers, target)
            for r in range(rounds):
                order = [READ, READ_PEER, SINK, SINK_PEER, SINK_PAIR]
                for client in order if r % 2 == 0 else order[::-1]:
                    meter = Meter(lambda: [pid])
                    if client == READ:
                        read = _reader(spark, brokers, spec["read_stream"], **split)
                        with meter:
                            read.write.format("noop").mode("overwrite").save()
                        stage = _last_stage(spark)
                        task_s = stage["executorRunTime"] / 1000
                        res = meter.result(
                            read_rows, task_s, tasks=stage["numTasks"], job_seconds=meter.seconds
                        )
                        res["job_rate"] = read_rows / meter.seconds
                    elif client == READ_PEER:
                        with meter:
                            got = asyncio.run(_subscribe(brokers, spec["read_stream"], read_rows))
                        res = meter.result(got)
                    elif client == SINK:
                        with streams.fresh() as target, meter:
                            _write(df, nats_url, brokers, target)
                        res = meter.result(sink_rows, tasks=2)
                    elif client == SINK_PAIR:
                        with streams.fresh() as target:
                            took, cpu = _publish_pair(
                                nats_url, target, SINK_PARTITIONS, sink_rows, size
                            )
                        res = figures(sink_rows, took, cpu)
                    else:
                        with streams.fresh() as target, meter:
                            asyncio.run(_publish(nats_url, target, SINK_PARTITIONS, sink_values))
                        res = meter.result(sink_rows)
                    runs[client].append(res)
        df.unpersist()
    finally:
        spark.stop()
    return {client: _median(r) for client, r in runs.items()}


def measure_scaling(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Read and write rates on a standalone cluster with one worker, then two."""
    from liftbridge_nats.testing import SparkStandalone

    brokers, nats_url, size = spec["brokers"], spec["nats_url"], spec["size"]
    rows = spec["scale_count"]
    runs: dict[str, list[dict[str, Any]]] = {
        c: [] for c in (SCALE_READ_1, SCALE_READ_2, SCALE_SINK_1, SCALE_SINK_2)
    }
    with SparkStandalone(workers=1, cores=1, memory="1g") as cluster:
        spark = _session(
            cluster.master_url,
            **{
                "spark.cores.max": "2",
                "spark.executor.cores": "1",
                "spark.executor.memory": "512m",
            },
        )

        def executors() -> int:
            return int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1

        def wait_executors(n: int) -> None:
            deadline = time.monotonic() + 120
            while executors() != n:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{executors()} executor(s), wanted {n}")
                time.sleep(0.2)

        def daemons() -> list[int]:
            return [os.getpid(), *cluster.pids()]

        try:
            with _streams(brokers, SCALE_PARTITIONS) as streams:
                source = streams.new()
                asyncio.run(_publish(nats_url, source, SCALE_PARTITIONS, row_values(0, rows, size)))
                df = None
                for _r in range(spec["scale_rounds"]):
                    for workers in (1, 2):
                        if workers == 2 and cluster.worker_count < 2:
                            cluster.add_worker()
                        if workers == 1 and cluster.worker_count > 1:
                            cluster.stop_worker(-1)
                        wait_executors(workers)
                        read = _reader(spark, brokers, source)
                        # Executors' Python workers up and modules imported.
                        head = json.dumps({source: {str(p): 10 for p in range(SCALE_PARTITIONS)}})
                        _reader(spark, brokers, source, endingOffsets=head).collect()
                        meter = Meter(daemons)
                        with meter:
                            read.write.format("noop").mode("overwrite").save()
                        name = SCALE_READ_1 if workers == 1 else SCALE_READ_2
                        runs[name].append(meter.result(rows, executors=workers))
                        if df is None:
                            df = _values(spark, rows, size, tasks=SCALE_PARTITIONS)
                        meter = Meter(daemons)
                        with streams.fresh() as target, meter:
                            _write(df, nats_url, brokers, target)
                        name = SCALE_SINK_1 if workers == 1 else SCALE_SINK_2
                        runs[name].append(meter.result(rows, executors=workers))
        finally:
            spark.stop()
    return {client: _median(r) for client, r in runs.items()}


def run(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every Spark figure, by client name; a failed part reports its error per client."""
    out: dict[str, dict[str, Any]] = {}
    parts: list[tuple[Callable[[dict[str, Any]], dict[str, dict[str, Any]]], tuple[str, ...]]] = [
        (measure_local, (READ, READ_PEER, SINK, SINK_PEER, SINK_PAIR))
    ]
    if spec.get("scale_count"):
        parts.append((measure_scaling, (SCALE_READ_1, SCALE_READ_2, SCALE_SINK_1, SCALE_SINK_2)))
    for part, clients in parts:
        try:
            out.update(part(spec))
        except Exception as exc:
            import traceback

            traceback.print_exc()
            out.update({c: {"error": f"{type(exc).__name__}: {exc}"} for c in clients})
    return out


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """The three figures the suite reports: read and sink ratios, and scaling."""

    def rate(client: str) -> float | None:
        r = results.get(client, {})
        return None if "error" in r or not r.get("rate") else float(r["rate"])

    def div(a: str, b: str) -> float | None:
        x, y = rate(a), rate(b)
        return None if x is None or y is None else x / y

    return {
        "read_task_vs_subscribe": div(READ, READ_PEER),
        "sink_vs_publisher": div(SINK, SINK_PEER),
        "sink_vs_two_publishers": div(SINK, SINK_PAIR),
        "two_publishers_vs_one": div(SINK_PAIR, SINK_PEER),
        "read_2_vs_1_workers": div(SCALE_READ_2, SCALE_READ_1),
        "sink_2_vs_1_workers": div(SCALE_SINK_2, SCALE_SINK_1),
    }


def main(argv: list[str] | None = None) -> int:
    """Worker mode (one JSON argument) or a run on a private LocalCluster."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0].startswith("{"):
        print(json.dumps(run(json.loads(argv[0]))), flush=True)
        return 0
    parser = argparse.ArgumentParser(description="Spark source and sink beside the SDK")
    parser.add_argument("--rows", type=int, default=200_000, help="rows per read and write")
    parser.add_argument("--rounds", type=int, default=SPARK_ROUNDS)
    parser.add_argument("--scale-rows", type=int, help="rows of the scaling runs (0: skip them)")
    parser.add_argument("--out", type=Path, default=Path("spark_bench.json"))
    args = parser.parse_args(argv)

    from liftbridge_nats.testing import LocalCluster

    with LocalCluster() as cluster:
        stream = f"bench-spark-read-{uuid.uuid4().hex[:6]}"
        asyncio.run(_create(list(cluster.brokers), stream, 1))
        asyncio.run(_publish(cluster.nats_url, stream, 1, row_values(0, args.rows, 100)))
        spec = {
            "nats_url": cluster.nats_url,
            "brokers": list(cluster.brokers),
            "size": 100,
            "rounds": args.rounds,
            "read_stream": stream,
            "read_count": args.rows,
            "sink_count": args.rows,
            "scale_count": args.rows // 2 if args.scale_rows is None else args.scale_rows,
            "scale_rounds": args.rounds,
        }
        results = run(spec)
    for client in [c for c in CLIENTS if c in results]:
        r = results[client]
        shown = (
            r.get("error") or f"{r['rate']:>10,.0f} rows/s  cpu {r['cpu_us_per_msg']:.1f} us/row"
        )
        print(f"{client:<32} {shown}")
    for name, value in ratios(results).items():
        print(f"{name}: {'n/a' if value is None else f'{value:.2f}x'}")
    args.out.write_text(json.dumps({"results": results, "ratios": ratios(results)}, indent=1))
    print(f"wrote {args.out} (median of {args.rounds} round(s) each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
