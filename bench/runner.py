"""Run every case of a plan against one LocalCluster and collect the results.

Each case runs in a fresh worker process (Python) or the Go peer's binary, on a fresh
stream that is deleted afterwards, so no case inherits another's log or connections.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import secrets
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import e2e, machine, plan
from bench.cluster import FailureLogs, Streams, restart_stopped, running_cluster
from bench.measure import HEADER_NAME, HEADER_VALUE, KEY, percentiles
from bench.plan import Case
from bench.settings import REPO_DIR, Settings

# Python workers: (module, action) per client and section.
_PY_ACTIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("publish", plan.OURS): ("ours", "publish"),
    ("publish", plan.OURS_UVLOOP): ("ours", "publish"),
    ("publish", plan.OURS_BURST): ("ours", "burst"),
    ("publish", plan.OURS_TASKS_100): ("ours", "tasks"),
    ("publish", plan.OURS_TASKS_1000): ("ours", "tasks"),
    ("publish", plan.OURS_NO_OTEL): ("ours", "publish"),
    ("publish", plan.OURS_TRACED): ("ours", "publish"),
    ("publish", plan.OURS_MSGSPEC): ("ours", "publish"),
    ("publish", plan.OURS_PUBLIC_API): ("ours", "publish"),
    ("publish", plan.BARE): ("bare", "publish"),
    ("publish", plan.BARE_UVLOOP): ("bare", "publish"),
    ("publish", plan.BARE_BURST): ("bare", "burst"),
    ("publish", plan.BARE_TASKS_100): ("bare", "tasks"),
    ("publish", plan.BARE_TASKS_1000): ("bare", "tasks"),
    ("publish", plan.RAW): ("bare", "raw"),
    ("publish", plan.GUFO_UNARY): ("gufo", "unary"),
    ("publish", plan.GUFO_BULK): ("gufo", "bulk"),
    ("latency", plan.OURS): ("ours", "latency"),
    ("latency", plan.BARE): ("bare", "latency"),
    ("subscribe", plan.OURS): ("ours", "subscribe"),
    ("subscribe", plan.OURS_METRICS_OFF): ("ours", "subscribe"),
    ("subscribe", plan.OURS_OTEL_SDK): ("ours", "subscribe"),
    ("subscribe", plan.GUFO_SUB): ("gufo", "subscribe"),
    ("subscribe", plan.GRPC_SUB): ("bare", "subscribe"),
    ("subscribe", plan.GRPC_SYNC_SUB): ("bare", "subscribe_sync"),
    ("fanout", plan.FANOUT_TASKS): ("ours", "fanout"),
    ("fanout", plan.FANOUT_CONSUMER): ("ours", "fanout"),
    ("memory", plan.OURS): ("ours", "memory"),
    ("publish", plan.SYNC_PUBLISH_ASYNC): ("ours", "sync_publish_async"),
    ("publish", plan.SYNC_THREADS_16): ("ours", "sync_threads"),
    ("publish", plan.SYNC_THREADS_16_ONE_CORE): ("ours", "sync_threads"),
    ("portal", plan.PORTAL_CALL): ("ours", "portal_call"),
}
# How many tasks loop on awaiting a publish in the services' pattern and its ceiling
# (goroutines looping on Publish, for the Go peer).
_TASKS = {
    plan.OURS_TASKS_100: 100,
    plan.OURS_TASKS_1000: 1000,
    plan.BARE_TASKS_100: 100,
    plan.BARE_TASKS_1000: 1000,
    plan.GO_TASKS_100: 100,
    plan.SYNC_THREADS_16: 16,
    plan.SYNC_THREADS_16_ONE_CORE: 16,
    plan.GO_TASKS_16: 16,
}
# What the telemetry variants of ours add to their spec (see bench.clients.ours.publish
# and bench.worker).
_VARIANTS: dict[str, dict[str, Any]] = {
    plan.SYNC_THREADS_16_ONE_CORE: {"one_core": True},
    plan.OURS_NO_OTEL: {"block_imports": ["opentelemetry"]},
    plan.OURS_TRACED: {"telemetry": "sdk"},
    plan.OURS_MSGSPEC: {"serializer": "msgspec"},
    plan.OURS_PUBLIC_API: {"fast_path": False},
}
# The read metrics of our subscribe cases (see bench.clients.ours.subscribe).
_SUB_METRICS = {plan.OURS_METRICS_OFF: "off", plan.OURS_OTEL_SDK: "sdk"}
_GO_MODES = {
    plan.GO_ASYNC: "async",
    plan.GO_SYNC: "sync",
    plan.GO_TASKS_100: "sync",
    plan.GO_TASKS_16: "sync",
    plan.GO_SUB: "subscribe",
    plan.GO_FANOUT: "fanout",
}


def ours_ack_timeouts() -> dict[str, float]:
    """The ``ack_timeout`` our Publisher runs with in the bench (not its default)."""
    from bench.clients import ours

    return {"publish": ours.PUBLISH_ACK_TIMEOUT, "latency": ours.LATENCY_ACK_TIMEOUT}


def publisher_window() -> int:
    """Our Publisher's default ``max_inflight``, given to the Go peer's PublishAsync too."""
    try:
        from liftbridge_nats import Publisher
    except ImportError:
        return 0
    default = inspect.signature(Publisher).parameters.get("max_inflight")
    if default is None or not isinstance(default.default, int):
        return 0
    return int(default.default)


def _log(line: str) -> None:
    print(line, flush=True)


def _fmt_result(case: Case, result: dict[str, Any]) -> str:
    if "error" in result:
        return f"FAILED: {result['error'].splitlines()[-1][:160] if result['error'] else '?'}"
    if case.section == "portal":
        return (
            f"{result['us_per_call']:8.1f} us per call  cpu {result['cpu_us_per_msg']:6.1f} us/call"
        )
    if case.section == "latency":
        return (
            f"p50 {result['p50_ms']:.2f} ms  p99 {result['p99_ms']:.2f} ms  "
            f"p99.9 {result['p999_ms']:.2f} ms  missing {result['errors']}"
        )
    if case.section == "e2e":
        if not result.get("arrived"):
            return f"nothing arrived of {result['count']:,}"
        return (
            f"p50 {result['p50_ms']:.2f} ms  p99 {result['p99_ms']:.2f} ms  "
            f"p99.9 {result['p999_ms']:.2f} ms  arrived {result['arrived']:,}/{result['count']:,}"
        )
    text = (
        f"{result.get('rate', 0):>11,.0f} msg/s  cpu {result.get('cpu_us_per_msg', 0):6.1f} us/msg"
    )
    if case.section in ("memory", "fanout"):
        text += f"  peak rss {result.get('max_rss_kib', 0) / 1024:.1f} MiB"
    if "threads" in result:
        text += f"  threads {result['threads']}"
        if "rss_delta_kib" in result:
            text += f" (+{result['rss_delta_kib'] / 1024:.1f} MiB during the run)"
    if result.get("errors"):
        text += f"  errors {result['errors']}"
    if len(result.get("rates_per_round", [])) > 1:
        text += "  rounds " + "/".join(f"{r / 1000:.0f}k" for r in result["rates_per_round"])
    return text


class Runner:
    """Runs cases one by one; owns nothing but the cluster handles it is given."""

    def __init__(
        self, settings: Settings, nats_url: str, brokers: list[str], streams: Streams
    ) -> None:
        self.settings = settings
        self.nats_url = nats_url
        self.brokers = brokers
        self.streams = streams
        self.go_binary: Path | None = None
        self.go_missing = ""
        self.window = publisher_window()
        self._filled: dict[int, str | Exception] = {}
        self._fanout_filled: dict[int, str | Exception] = {}
        self._tag = secrets.token_hex(3)
        self._serial = 0
        # Milliseconds of machine.speed_probe() before every round of run_rounds.
        self.speed_probes: list[float] = []

    def _name(self, case: Case, index: int) -> str:
        self._serial += 1
        return f"bench-{self._tag}-{index}-{self._serial}"

    def _timeout(self, case: Case) -> float:
        return 180.0 + case.count / 400

    async def _python(self, case: Case, spec: dict[str, Any]) -> dict[str, Any]:
        module, action = _PY_ACTIONS[(case.section, case.client)]
        spec = {
            **spec,
            "module": module,
            "action": action,
            "uvloop": self.settings.uvloop or case.client.endswith("+uvloop"),
        }
        cmd = [sys.executable, "-m", "bench.worker", json.dumps(spec)]
        return await self._exec(cmd, self._timeout(case))

    async def _go(self, case: Case, spec: dict[str, Any]) -> dict[str, Any]:
        if self.go_binary is None:
            return {"error": self.go_missing or "Go peer not built"}
        cmd = [
            str(self.go_binary),
            "-brokers", ",".join(self.brokers),
            "-stream", spec["stream"],
            "-count", str(spec["count"]),
            "-warmup", str(spec.get("warmup", 0)),
            "-size", str(case.size),
            "-ack", case.ack.lower(),
            "-mode", _GO_MODES[case.client],
            "-partitions", str(case.topology.partitions),
            "-window", str(self.window),
            "-workers", str(spec.get("tasks", 1)),
            "-timeout", f"{int(self._timeout(case))}s",
        ]  # fmt: skip
        if case.keyed:
            cmd += ["-key", KEY.decode(), "-header", f"{HEADER_NAME}={HEADER_VALUE.decode()}"]
        return await self._exec(cmd, self._timeout(case) + 10)

    async def _exec(self, cmd: list[str], limit: float) -> dict[str, Any]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_DIR) + os.pathsep + env.get("PYTHONPATH", "")
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            cwd=REPO_DIR,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), limit)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return {"error": f"timed out after {limit:.0f} s"}
        lines = out.decode(errors="replace").strip().splitlines()
        try:
            result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        except json.JSONDecodeError:
            result = {}
        if proc.returncode != 0 or not result or result.get("error"):
            why = result.get("error") or err.decode(errors="replace").strip() or "no output"
            return {"error": why[-2000:], "exit_status": proc.returncode}
        return result

    async def _fill(self, size: int) -> str:
        """A stream whose partition 0 holds ``subscribe_count`` messages of ``size`` bytes."""
        if size in self._filled:
            filled = self._filled[size]
            if isinstance(filled, Exception):
                raise filled
            return filled
        try:
            self._filled[size] = await self._fill_new(size)
        except Exception as exc:  # every subscribe case of this size reports it
            self._filled[size] = exc
            raise
        return self._filled[size]  # type: ignore[return-value]

    async def _fill_new(self, size: int) -> str:
        name = f"bench-{self._tag}-sub{size}"
        await self.streams.create(name, 1, 1)
        count = self.settings.subscribe_count
        spec = {
            "module": "bare",
            "action": "publish",
            "nats_url": self.nats_url,
            "subject": name,
            "partitions": 1,
            "ack": "LEADER",
            "size": size,
            "count": count,
            "warmup": 0,
        }
        result = await self._exec(
            [sys.executable, "-m", "bench.worker", json.dumps(spec)], 180 + count / 400
        )
        if "error" in result:
            raise RuntimeError(f"filling the subscribe stream failed: {result['error']}")
        newest = await self.streams.newest_offset(name)
        if newest != count - 1:
            raise RuntimeError(f"subscribe stream holds {newest + 1} messages, wanted {count}")
        _log(f"        filled {name}: {count:,} messages of {size} B")
        return name

    async def _fill_fanout(self, partitions: int) -> str:
        """A stream of ``partitions`` partitions holding ``fanout_count`` messages each."""
        filled = self._fanout_filled.get(partitions)
        if isinstance(filled, Exception):
            raise filled
        if filled is None:
            try:
                filled = self._fanout_filled[partitions] = await self._fill_fanout_new(partitions)
            except Exception as exc:  # every case of this partition count reports it
                self._fanout_filled[partitions] = exc
                raise
        return filled

    async def _fill_fanout_new(self, partitions: int) -> str:
        name = f"bench-{self._tag}-fan{partitions}"
        await self.streams.create(name, partitions, 1)
        await self._first_message_each(name, partitions)
        per = self.settings.fanout_count
        # In rounds of at most about 200k messages (each a whole number per partition):
        # the pre-encoded envelopes of one round stay in memory until acked.
        step = max(1, min(per, 200_000 // partitions))
        for done in range(1, per, step):
            spec = {
                "module": "bare",
                "action": "publish",
                "nats_url": self.nats_url,
                "subject": name,
                "partitions": partitions,  # round-robin: the same count on each
                "ack": "LEADER",
                "size": self.settings.sizes[0],
                "count": min(step, per - done) * partitions,
                "warmup": 0,
            }
            result = await self._exec(
                [sys.executable, "-m", "bench.worker", json.dumps(spec)],
                180 + step * partitions / 400,
            )
            if "error" in result:
                raise RuntimeError(f"filling the fan-out stream failed: {result['error']}")
        for partition in {0, partitions - 1}:
            newest = await self.streams.newest_offset(name, partition)
            if newest != per - 1:
                raise RuntimeError(
                    f"fan-out partition {partition} holds {newest + 1} messages, wanted {per}"
                )
        _log(f"        filled {name}: {partitions} partitions x {per:,} messages")
        return name

    async def _first_message_each(self, name: str, partitions: int) -> None:
        """Store one message in every partition, publishing again to those that lack it.

        Metadata may list a partition's leader before that leader listens on the
        partition's subject (it has not applied the change yet); what is published to it
        meanwhile is dropped without an ack. Afterwards every partition is listening.
        """
        missing = list(range(partitions))
        deadline = time.monotonic() + 60 + partitions
        while True:
            spec = {
                "module": "bare",
                "action": "publish",
                "nats_url": self.nats_url,
                "subject": name,
                "partitions": partitions,
                "partition_list": missing,
                "ack": "LEADER",
                "size": self.settings.sizes[0],
                "count": len(missing),
                "warmup": 0,
                "timeout": 5,
            }
            result = await self._exec([sys.executable, "-m", "bench.worker", json.dumps(spec)], 60)
            if "error" not in result:
                return  # every one acked
            missing = [p for p in missing if await self.streams.newest_offset(name, p) < 0]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"fan-out partitions {missing[:8]} of {name} never stored a message"
                )
            _log(f"        {len(missing)} partition(s) of {name} not listening yet: again")

    async def run_latency(self, cases: list[Case], index: int) -> dict[str, dict[str, Any]]:
        """Run the clients of one latency configuration in alternating rounds, pooled.

        Each round every client runs ``latency_seconds / latency_rounds`` seconds;
        percentiles are taken over all rounds' samples together. The clients share one
        stream: Liftbridge gives a new partition to the broker that leads the fewest, so
        streams that live side by side get different leaders, and each client would be
        timed against its own broker.
        """
        rounds = max(1, self.settings.latency_rounds)
        samples: dict[str, list[int]] = {c.id: [] for c in cases}
        per_round: dict[str, list[dict[str, Any]]] = {c.id: [] for c in cases}
        errors: dict[str, str] = {}
        shared = self._name(cases[0], index)
        try:
            await self.streams.create(shared, 1, 1)
            for r in range(rounds):
                for c in plan.round_order(cases, r):
                    if c.id in errors:
                        continue
                    spec = {
                        "nats_url": self.nats_url,
                        "brokers": self.brokers,
                        "stream": shared,
                        "subject": shared,
                        "size": c.size,
                        "ack": c.ack,
                        "partitions": 1,
                        "rate": c.rate,
                        "seconds": self.settings.latency_seconds / rounds,
                        "warmup_seconds": self.settings.latency_warmup_seconds,
                        "count": c.count // rounds,
                    }
                    result = await self._python(c, spec)
                    if "error" in result:
                        errors[c.id] = result["error"]
                        continue
                    samples[c.id].extend(result.pop("samples_us"))
                    per_round[c.id].append(result)
        except Exception as exc:  # setup failure: reported with the cases
            for c in cases:
                errors.setdefault(c.id, f"{exc.__class__.__name__}: {exc}")
        finally:
            await self.streams.delete(shared)
        out: dict[str, dict[str, Any]] = {}
        for c in cases:
            if c.id in errors:
                out[c.id] = {"error": errors[c.id]}
                continue
            rounds_done = per_round[c.id]
            out[c.id] = {
                "count": sum(r["count"] for r in rounds_done),
                "errors": sum(r["errors"] for r in rounds_done),
                "offered_rate": c.rate,
                "achieved_send_rate": min(r["achieved_send_rate"] for r in rounds_done),
                "rounds": len(rounds_done),
                "p99_ms_per_round": [round(r["p99_ms"], 3) for r in rounds_done],
                **({"loop": rounds_done[0]["loop"]} if "loop" in rounds_done[0] else {}),
                **percentiles([x / 1e6 for x in samples[c.id]]),
            }
        return out

    async def run_spark(self, cases: list[Case]) -> dict[str, dict[str, Any]]:
        """Every Spark case in one worker process (one Spark session, one JVM).

        The read is measured on the subscribe cases' stream (one partition), the SDK's
        subscribe beside it; see :mod:`bench.spark` for what each case does.
        """
        size = cases[0].size
        try:
            read_stream = await self._fill(size)
        except Exception as exc:
            return {c.id: {"error": f"{exc.__class__.__name__}: {exc}"} for c in cases}
        spec = {
            "nats_url": self.nats_url,
            "brokers": self.brokers,
            "size": size,
            "rounds": self.settings.spark_rounds,
            "read_stream": read_stream,
            "read_count": self.settings.subscribe_count,
            "sink_count": self.settings.spark_sink_count,
            "scale_count": self.settings.spark_scale_count,
            "scale_rounds": self.settings.spark_rounds,
        }
        cmd = [sys.executable, "-m", "bench.spark", json.dumps(spec)]
        counts = self.settings.spark_sink_count + self.settings.spark_scale_count
        limit = 600.0 + self.settings.spark_rounds * counts / 200
        by_client = await self._exec(cmd, limit)
        if "error" in by_client:
            return {c.id: by_client for c in cases}
        return {
            c.id: by_client.get(c.client, {"error": "the Spark worker gave no figure"})
            for c in cases
        }

    async def run_rounds(
        self, cases: list[Case], index: int, rounds: int | None = None
    ) -> dict[str, dict[str, Any]]:
        """Run the clients of one configuration in alternating rounds (``rounds``, by
        default the settings' ``rounds``); report the median.

        Each round runs every client once (a fresh stream each time), in the opposite
        order of the round before. A client's reported result is its round with the
        median rate; every round's rate is kept under ``rates_per_round`` and the
        rounds it comes from (0-based) under ``round_numbers``, so that two clients' rounds
        pair up even when one of them failed a round the other did not.
        """
        rounds = max(1, self.settings.rounds if rounds is None else rounds)
        runs: dict[str, list[dict[str, Any]]] = {c.id: [] for c in cases}
        for r in range(rounds):
            probe = machine.speed_probe()
            self.speed_probes.append(probe)
            # Printed as well: a run stopped before its end writes no results.json.
            _log(f"  machine speed probe: {probe:.0f} ms ({cases[0].config}, round {r + 1})")
            for c in plan.round_order(cases, r):
                if r and c.client in plan.SEQUENTIAL_CLIENTS:
                    # One message in flight: ~30 s per run and far behind; once is enough.
                    continue
                runs[c.id].append({**await self.run_case(c, index), "round": r})
        out: dict[str, dict[str, Any]] = {}
        for c in cases:
            done = [x for x in runs[c.id] if "error" not in x]
            if not done:
                out[c.id] = {k: v for k, v in runs[c.id][0].items() if k != "round"}
                continue
            by_rate = sorted(done, key=lambda x: float(x.get("rate", 0.0)))
            median = dict(by_rate[len(by_rate) // 2])
            del median["round"]
            if rounds > 1:
                median["rounds"] = len(done)
                median["round_numbers"] = [x["round"] for x in done]
                median["rates_per_round"] = [round(float(x.get("rate", 0.0))) for x in done]
                median["cpu_us_per_msg_per_round"] = [
                    round(float(x.get("cpu_us_per_msg", 0.0)), 2) for x in done
                ]
            if len(done) < len(runs[c.id]):
                median["failed_rounds"] = len(runs[c.id]) - len(done)
            out[c.id] = median
        return out

    async def run_case(self, case: Case, index: int) -> dict[str, Any]:
        """Run one case; never raises for a failing client (the error is the result)."""
        spec: dict[str, Any] = {
            "nats_url": self.nats_url,
            "brokers": self.brokers,
            "size": case.size,
            "ack": case.ack,
            "partitions": case.topology.partitions,
            "count": case.count,
            "warmup": 0 if case.section in ("subscribe", "fanout") else self.settings.warmup,
            "keyed": case.keyed,
        }
        if case.client in _TASKS:
            spec["tasks"] = _TASKS[case.client]
        spec.update(_VARIANTS.get(case.client, {}))
        created = ""
        try:
            if case.section == "subscribe":
                spec["stream"] = spec["subject"] = await self._fill(case.size)
                spec["leader"] = await self.streams.leader_address(spec["stream"])
                spec["metrics"] = _SUB_METRICS.get(case.client, "default")
            elif case.section == "fanout":
                spec["stream"] = await self._fill_fanout(case.topology.partitions)
                spec["mode"] = "tasks" if case.client == plan.FANOUT_TASKS else "consumer"
            elif case.client != plan.RAW and case.section != "portal":
                created = self._name(case, index)
                await self.streams.create(
                    created, case.topology.partitions, case.topology.replication
                )
                spec["stream"] = spec["subject"] = created
            if case.client in _GO_MODES:
                return await self._go(case, spec)
            return await self._python(case, spec)
        except Exception as exc:  # a setup failure is reported with the case, not fatal
            return {"error": f"{exc.__class__.__name__}: {exc}"}
        finally:
            if created:
                await self.streams.delete(created)


async def run(settings: Settings, go_binary: Path | None, go_missing: str) -> dict[str, Any]:
    """Start the cluster, run every case, return the whole record (meta + cases)."""
    cases = plan.build(settings)
    started = datetime.now(UTC)
    load_before = machine.load_average()
    _log(f"liftbridge-nats bench: {len(cases)} cases, {settings.nodes}-node cluster")
    async with running_cluster(settings.nodes) as (cluster, streams):
        from liftbridge_nats.testing import ensure_liftbridge, find_nats_server

        info = machine.describe(str(ensure_liftbridge()), str(find_nats_server()))
        runner = Runner(settings, cluster.nats_url, cluster.brokers, streams)
        runner.go_binary, runner.go_missing = go_binary, go_missing
        failures = FailureLogs(cluster, settings.out_dir / "cluster-logs.txt")
        restarts: list[dict[str, Any]] = []
        m = info["machine"]
        _log(f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}")
        _log("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
        _log(
            f"settings: count {settings.count:,} (+{settings.warmup:,} warm-up), sizes "
            f"{', '.join(f'{s} B' for s in settings.sizes)}, policies {'/'.join(settings.policies)}, "
            f"topologies {', '.join(t.label for t in settings.topologies)}, "
            f"Go PublishAsync window {runner.window or 'unbounded'}, load {load_before}"
        )
        records: list[dict[str, Any]] = []
        t_start = time.monotonic()
        pooled: dict[str, dict[str, Any]] = {}
        for index, case in enumerate(cases, 1):
            t0 = time.monotonic()
            if case.section == "latency":
                if case.id not in pooled:
                    partners = [
                        c for c in cases if c.section == "latency" and c.config == case.config
                    ]
                    pooled.update(await runner.run_latency(partners, index))
                result = pooled[case.id]
            elif case.section == "e2e":
                if case.id not in pooled:
                    partners = [c for c in cases if c.section == "e2e" and c.config == case.config]
                    pooled.update(await e2e.run_config(runner, partners, index))
                result = pooled[case.id]
            elif case.section == "spark":
                if case.id not in pooled:
                    pooled.update(
                        await runner.run_spark([c for c in cases if c.section == "spark"])
                    )
                result = pooled[case.id]
            elif case.section in ("publish", "subscribe", "fanout"):
                if case.id not in pooled:
                    # The services' patterns and their peers run in rounds of their own.
                    partners, rounds = plan.round_partners(case, cases, settings)
                    pooled.update(await runner.run_rounds(partners, index, rounds))
                result = pooled[case.id]
            else:
                result = await runner.run_case(case, index)
            _log(
                f"[{index:>3}/{len(cases)}] {case.section:<9} {case.config:<24} "
                f"{case.client:<18} {_fmt_result(case, result)}  "
                f"({time.monotonic() - t0:.1f} s, {time.monotonic() - t_start:.0f} s total)"
            )
            if "error" in result or result.get("failed_rounds"):
                error = result.get("error") or f"{result['failed_rounds']} round(s) failed"
                failures.case_failed(f"{case.config} / {case.client}", str(error))
                # A server lost mid-run would fail every case after it: start it again,
                # say so in the results, and go on.
                try:
                    restarted = await restart_stopped(cluster)
                except Exception as exc:  # the results so far are still written
                    _log(f"  could not restart the stopped servers: {exc}")
                    restarted = []
                if restarted:
                    _log(f"  restarted {', '.join(restarted)}, which had stopped; going on")
                    restarts.append({"after": case.id, "servers": restarted})
            records.append(
                {
                    "id": case.id,
                    "section": case.section,
                    "client": case.client,
                    "config": case.config,
                    "size": case.size,
                    "ack": case.ack,
                    "partitions": case.topology.partitions,
                    "replication": case.topology.replication,
                    "keyed": case.keyed,
                    "rate": case.rate,
                    "count": case.count,
                    "result": result,
                }
            )
    return {
        "meta": {
            "started": started.isoformat(timespec="seconds"),
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "mode": "quick" if settings.quick else "full",
            "command": " ".join([Path(sys.executable).name, "-m", "bench", *sys.argv[1:]]),
            **info,
            "load_before": load_before,
            "load_after": machine.load_average(),
            "speed_probes_ms": runner.speed_probes,
            "server_restarts": restarts,
            "settings": {
                "nodes": settings.nodes,
                "count": settings.count,
                "warmup": settings.warmup,
                "sizes": list(settings.sizes),
                "policies": list(settings.policies),
                "topologies": [t.label for t in settings.topologies],
                "sequential_topologies": [t.label for t in settings.sequential_topologies],
                "services_topologies": [t.label for t in settings.services_topologies],
                "keyed_sizes": list(settings.keyed_sizes),
                "latency_rates": list(settings.latency_rates),
                "latency_seconds": settings.latency_seconds,
                "latency_rounds": settings.latency_rounds,
                "e2e_rates": list(settings.e2e_rates),
                "e2e_seconds": settings.e2e_seconds,
                "e2e_warmup_seconds": settings.e2e_warmup_seconds,
                "e2e_rounds": settings.e2e_rounds,
                "rounds": settings.rounds,
                "services_rounds": settings.services_rounds,
                "subscribe_count": settings.subscribe_count,
                "fanout_partitions": list(settings.fanout_partitions),
                "fanout_count": settings.fanout_count,
                "memory_count": settings.memory_count,
                "spark": settings.spark,
                "spark_sink_count": settings.spark_sink_count,
                "spark_scale_count": settings.spark_scale_count,
                "spark_rounds": settings.spark_rounds,
                "uvloop": settings.uvloop,
                "go_window": runner.window,
                "ours_ack_timeout": ours_ack_timeouts(),
            },
            "peers_missing": {
                **({"go-liftbridge": go_missing} if go_missing else {}),
            },
        },
        "cases": records,
    }
