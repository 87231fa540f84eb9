"""End-to-end latency cases: a paced publisher and a reader, each in its own process.

For each case the runner creates a fresh stream (1 partition, RF 1), starts the reader
(which reads the stream from its start and creates a file once subscribed), waits for
that file, then runs the publisher. The reader reports, for every timed message, its
arrival time minus the scheduled send time the message carries (see
:mod:`bench.clients.e2e`), so a stall anywhere between the two, the publisher's
included, counts.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import plan
from bench.measure import percentiles
from bench.plan import Case

if TYPE_CHECKING:
    from bench.runner import Runner

# Python (publisher action, reader action) in bench.clients.e2e, per client.
_PY: dict[str, tuple[str, str]] = {
    plan.E2E_OURS_SUB: ("ours_publish", "ours_subscribe"),
    plan.E2E_OURS_CONSUMER: ("ours_publish", "ours_consumer"),
    plan.E2E_BARE: ("bare_publish", "bare_read"),
}
# How long a reader may take to subscribe before the case is given up.
READY_WAIT = 60.0
# How long a reader keeps reading after the publisher's last due time (lost messages
# end the case this long after the run).
GRACE = 20.0


async def run_config(runner: Runner, cases: list[Case], index: int) -> dict[str, dict[str, Any]]:
    """Run the clients of one offered load in alternating rounds (A B C, then C B A, ...),
    each round on a fresh stream; every client's samples are pooled over its rounds."""
    rounds = max(1, runner.settings.e2e_rounds)
    per_round: dict[str, list[dict[str, Any]]] = {c.id: [] for c in cases}
    errors: dict[str, str] = {}
    for r in range(rounds):
        for case in plan.round_order(cases, r):
            if case.id in errors:
                continue
            try:
                result = await run_case(runner, case, index, case.count // rounds)
            except Exception as exc:  # a setup failure is reported with the case, not fatal
                result = {"error": f"{exc.__class__.__name__}: {exc}"}
            if "error" in result:
                errors[case.id] = result["error"]
            else:
                per_round[case.id].append(result)
    out: dict[str, dict[str, Any]] = {}
    for case in cases:
        if case.id in errors:
            out[case.id] = {"error": errors[case.id]}
            continue
        done = per_round[case.id]
        samples = [x for r in done for x in r["samples_us"]]
        count = sum(r["count"] for r in done)
        out[case.id] = {
            "count": count,
            "arrived": len(samples),
            "errors": count - len(samples),
            "offered_rate": case.rate,
            "achieved_send_rate": min(r["achieved_send_rate"] for r in done),
            "publish_errors": sum(r["publish_errors"] for r in done),
            "reader_cpu_us_per_msg": sum(r["reader_cpu_us_per_msg"] for r in done) / len(done),
            "rounds": len(done),
            "p99_ms_per_round": [_round_p99(r["samples_us"]) for r in done],
            **percentiles([x / 1e6 for x in samples]),
        }
    return out


def _round_p99(samples_us: list[int]) -> float | None:
    """One round's p99 in ms (None when nothing arrived in it)."""
    p99 = percentiles([x / 1e6 for x in samples_us]).get("p99_ms")
    return None if p99 is None else round(p99, 3)


def _worker(action: str, spec: dict[str, Any], uvloop: bool) -> list[str]:
    spec = {**spec, "module": "e2e", "action": action, "uvloop": uvloop}
    return [sys.executable, "-m", "bench.worker", json.dumps(spec)]


def _go(runner: Runner, mode: str, stream: str, case: Case, total: int, limit: float) -> list[str]:
    return [
        str(runner.go_binary),
        "-brokers", ",".join(runner.brokers),
        "-stream", stream,
        "-count", str(total),
        "-size", str(case.size),
        "-ack", case.ack.lower(),
        "-mode", mode,
        "-rate", str(case.rate),
        "-timeout", f"{int(limit)}s",
    ]  # fmt: skip


def _exists(path: Path) -> bool:
    # A stat of a local temp file: too short to be worth a thread.
    return path.exists()


async def _subscribed(ready: Path, reader: asyncio.Task[Any]) -> None:
    """Return once the reader created ``ready``, ended, or READY_WAIT passed."""
    # A file, not a pipe: the runner reads a worker's output only once it has ended.
    for _ in range(int(READY_WAIT / 0.02)):
        if _exists(ready) or reader.done():
            return
        await asyncio.sleep(0.02)


async def run_case(runner: Runner, case: Case, index: int, count: int) -> dict[str, Any]:
    """One round of an end-to-end case (``count`` timed messages) on a fresh stream; the
    stream is deleted afterwards. Returns the round's latency samples (µs)."""
    settings = runner.settings
    if case.client == plan.E2E_GO and runner.go_binary is None:
        return {"error": runner.go_missing or "Go peer not built"}
    warm = int(case.rate * settings.e2e_warmup_seconds)
    total = warm + count
    run_seconds = total / case.rate
    deadline = run_seconds + GRACE
    limit = READY_WAIT + deadline + 60
    stream = runner._name(case, index)
    await runner.streams.create(stream, 1, 1)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp:
            ready = Path(tmp) / "ready"
            if case.client == plan.E2E_GO:
                reader_cmd = [
                    *_go(runner, "e2e-subscribe", stream, case, total, limit),
                    "-skip", str(warm),
                    "-ready", str(ready),
                    "-deadline", f"{deadline:.0f}s",
                ]  # fmt: skip
                publisher_cmd = _go(runner, "e2e-publish", stream, case, total, limit)
            else:
                publish_action, read_action = _PY[case.client]
                reader_cmd = _worker(
                    read_action,
                    {
                        "brokers": runner.brokers,
                        "leader": await runner.streams.leader_address(stream),
                        "stream": stream,
                        "total": total,
                        "warm": warm,
                        "ready": str(ready),
                        "deadline": deadline,
                    },
                    settings.uvloop,
                )
                publisher_cmd = _worker(
                    publish_action,
                    {
                        "nats_url": runner.nats_url,
                        "subject": stream,
                        "size": case.size,
                        "ack": case.ack,
                        "rate": case.rate,
                        "total": total,
                    },
                    settings.uvloop,
                )
            reader_task = asyncio.create_task(runner._exec(reader_cmd, limit))
            await _subscribed(ready, reader_task)
            if not _exists(ready):
                # The reader ends by itself (its deadline, or _exec's limit kills it).
                reader = await reader_task
                why = reader.get("error") or f"the reader did not subscribe in {READY_WAIT:.0f} s"
                return {"error": f"reader: {why}"}
            publisher = await runner._exec(publisher_cmd, limit)
            reader = await reader_task
    finally:
        await runner.streams.delete(stream)
    if "error" in publisher:
        return {"error": f"publisher: {publisher['error']}"}
    if "error" in reader:
        return {"error": f"reader: {reader['error']}"}
    return {
        "count": count,
        "samples_us": reader.get("samples_us") or [],
        "achieved_send_rate": publisher.get("achieved_send_rate", 0.0),
        "publish_errors": publisher.get("errors", 0),
        "reader_cpu_us_per_msg": reader.get("cpu_us_per_msg", 0.0),
    }
