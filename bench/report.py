"""Turn a run's record (results.json) into RESULTS.md and results.png.

``python -m bench.report [results.json]`` regenerates both from a saved record.
"""

from __future__ import annotations

import inspect
import json
import statistics
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench import e2e_report, machine, plan, spark

Record = dict[str, Any]

# Columns of the publish throughput and CPU tables. The services' patterns and their bare
# ceilings have a table of their own (see _services_table).
PUBLISH_ORDER = [
    plan.OURS,
    plan.BARE,
    plan.GO_ASYNC,
    plan.GO_SYNC,
    plan.GUFO_BULK,
    plan.GUFO_UNARY,
    plan.OURS_UVLOOP,
    plan.BARE_UVLOOP,
]

# Bars of the chart: each services' pattern followed by its bare ceiling (and by
# go-liftbridge in the same pattern, where it has a peer).
CHART_ORDER = [
    plan.OURS,
    plan.BARE,
    *(
        c
        for pattern in plan.SERVICES
        for c in (pattern, plan.CEILING_OF[pattern], plan.GO_PEER_OF.get(pattern))
        if c is not None
    ),
    *(c for c in PUBLISH_ORDER if c not in (plan.OURS, plan.BARE)),
]


def _ok(case: Record) -> bool:
    return "error" not in case["result"]


def _matches(case: Record, client: str, match: dict[str, Any]) -> bool:
    # Records written before the key+headers cases existed have no "keyed" field.
    return case["client"] == client and all(
        case.get(k, False if k == "keyed" else None) == v for k, v in match.items()
    )


def _rate(cases: Iterable[Record], client: str, **match: Any) -> float | None:
    for case in cases:
        if _matches(case, client, match):
            return float(case["result"]["rate"]) if _ok(case) else None
    return None


def _cpu(cases: Iterable[Record], client: str, **match: Any) -> float | None:
    for case in cases:
        if _matches(case, client, match):
            return float(case["result"]["cpu_us_per_msg"]) if _ok(case) else None
    return None


def _find(cases: Iterable[Record], client: str, **match: Any) -> Record | None:
    for case in cases:
        if _matches(case, client, match):
            return case
    return None


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _rate_ratio(cases: Iterable[Record], a: str, b: str, **match: Any) -> float | None:
    """Client ``a``'s rate over client ``b``'s (both matching ``match``): the median of
    the ratios of the rounds they ran side by side, or of their reported rates when
    either ran once. Clients of one configuration run back to back in every round, so
    each round's ratio compares them under the same machine; the machine's speed moves
    between rounds more than the clients differ."""
    return _paired_cases(cases, a, b, "rate", match)


def _cpu_ratio(cases: Iterable[Record], a: str, b: str, **match: Any) -> float | None:
    """Client ``a``'s CPU per message over client ``b``'s, as :func:`_rate_ratio`."""
    return _paired_cases(cases, a, b, "cpu_us_per_msg", match)


def _paired_cases(
    cases: Iterable[Record], a: str, b: str, field: str, match: dict[str, Any]
) -> float | None:
    found = list(cases)
    ca, cb = _find(found, a, **match), _find(found, b, **match)
    if ca is None or cb is None or not _ok(ca) or not _ok(cb):
        return None
    return _paired(ca, cb, field)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _size(n: int) -> str:
    return "1 KiB" if n == 1024 else f"{n} B"


def _topo(case: Record) -> str:
    return f"{case['partitions']} part, RF {case['replication']}"


Config = tuple[int, str, int, int, bool]


def _configs(cases: list[Record]) -> list[Config]:
    seen: list[Config] = []
    for c in cases:
        if c["section"] == "publish" and c["client"] != plan.RAW:
            key = (c["size"], c["ack"], c["partitions"], c["replication"], c.get("keyed", False))
            if key not in seen:
                seen.append(key)
    return seen


def _m(key: Config) -> dict[str, Any]:
    return {
        "size": key[0],
        "ack": key[1],
        "partitions": key[2],
        "replication": key[3],
        "keyed": key[4],
    }


def _label(key: Config) -> str:
    return f"{key[2]} part, RF {key[3]}" + (", key+headers" if key[4] else "")


def _pattern_label(key: Config) -> str:
    """A services' configuration (always 1 partition, RF 1) by size and ack policy."""
    return f"{_size(key[0])} {key[1]}" + (", key+headers" if key[4] else "")


def _gufo_best(pub: list[Record], **match: Any) -> tuple[float | None, str]:
    best: tuple[float | None, str] = (None, "")
    for client in (plan.GUFO_BULK, plan.GUFO_UNARY):
        rate = _rate(pub, client, **match)
        if rate is not None and (best[0] is None or rate > best[0]):
            best = (rate, client)
    return best


def targets(record: Record) -> list[dict[str, Any]]:
    """Evaluate the project's targets on the headline configurations (1 partition, RF 1)."""
    cases = record["cases"]
    pub = [c for c in cases if c["section"] == "publish"]
    rows: list[dict[str, Any]] = []
    sizes = sorted({c["size"] for c in pub})
    for size in sizes:
        m = {"size": size, "ack": "LEADER", "partitions": 1, "replication": 1, "keyed": False}
        gufo, gufo_mode = _gufo_best(pub, **m)
        bare = _rate(pub, plan.BARE, **m)
        row = _target(
            f"LEADER publish ≥ 10x gufo-liftbridge best mode ({gufo_mode or 'n/a'}), {_size(size)}",
            _rate_ratio(pub, plan.OURS, gufo_mode, **m) if gufo_mode else None,
            10.0,
        )
        if row["status"] == "missed" and gufo and bare and 10 * gufo > bare:
            # Not a matter of client overhead: no client on nats-py gets there here.
            row["status"] = (
                f"missed: 10x gufo is {_num(10 * gufo)} msg/s, above the bare pipeline's "
                f"ceiling of {_num(bare)} msg/s on this machine"
            )
        rows.append(row)
        rows.append(
            _target(
                f"LEADER publish ≥ 1.0x go-liftbridge PublishAsync, {_size(size)}",
                _rate_ratio(pub, plan.OURS, plan.GO_ASYNC, **m),
                1.0,
            )
        )
        rows.append(
            _target(
                f"LEADER publish ≥ 80% of the bare pipeline, {_size(size)}",
                _rate_ratio(pub, plan.OURS, plan.BARE, **m),
                0.8,
            )
        )
    # The same three throughput targets over every LEADER configuration of the run.
    leader = [k for k in _configs(pub) if k[1] == "LEADER" and not k[4]]
    if len(leader) > len(sizes):
        for name, peer, goal in (
            ("10x gufo-liftbridge best mode", None, 10.0),
            ("1.0x go-liftbridge PublishAsync", plan.GO_ASYNC, 1.0),
            ("80% of the bare pipeline", plan.BARE, 0.8),
        ):
            ratios = []
            for key in leader:
                m = _m(key)
                other = _gufo_best(pub, **m)[1] if peer is None else peer
                r = _rate_ratio(pub, plan.OURS, other, **m) if other else None
                if r is not None:
                    ratios.append(r)
            if ratios:
                met = sum(r >= goal for r in ratios)
                row = _target(
                    f"LEADER publish ≥ {name}, all {len(ratios)} LEADER configurations "
                    f"(worst ratio shown; met in {met} of {len(ratios)})",
                    min(ratios),
                    goal,
                )
                rows.append(row)
    rows += _services_targets(pub)
    rows += _telemetry_targets(pub)
    rows += _sync_targets(pub)
    lat = [c for c in cases if c["section"] == "latency" and c["rate"] == 10_000]
    for size in sorted({c["size"] for c in lat}):
        ours_c = _find(lat, plan.OURS, size=size)
        bare_c = _find(lat, plan.BARE, size=size)
        ratio = None
        measured = ""
        if ours_c and bare_c and _ok(ours_c) and _ok(bare_c):
            ours_p99, bare_p99 = ours_c["result"]["p99_ms"], bare_c["result"]["p99_ms"]
            ratio = ours_p99 / bare_p99
            measured = f" (ours {ours_p99:.2f} ms, bare {bare_p99:.2f} ms)"
        rows.append(
            _target(
                f"ack p99 at 10k msg/s ≤ 1.25x bare p99, {_size(size)}{measured}",
                ratio,
                1.25,
                lower_is_better=True,
            )
        )
    sub = [c for c in cases if c["section"] == "subscribe"]
    for size in sorted({c["size"] for c in sub}):
        rows.append(
            _target(
                f"subscribe ≥ 5x gufo-liftbridge, {_size(size)}",
                _rate_ratio(sub, plan.OURS, plan.GUFO_SUB, size=size),
                5.0,
            )
        )
    for size in sorted({c["size"] for c in sub}):
        rows.append(
            _target(
                f"subscribe ≥ 0.8x go-liftbridge, {_size(size)}",
                _rate_ratio(sub, plan.OURS, plan.GO_SUB, size=size),
                0.8,
            )
        )
    sp = [c for c in cases if c["section"] == "spark"]
    if sp:
        rows.append(
            _target(
                "Spark batch read rows/s per task ≥ 0.8x the SDK's subscribe, same partition",
                _rate_ratio(sp, spark.READ, spark.READ_PEER),
                0.8,
            )
        )
        rows.append(
            _target(
                "Spark sink (local[2]) ≥ 0.9x a single Publisher",
                _rate_ratio(sp, spark.SINK, spark.SINK_PEER),
                0.9,
            )
        )
    rows += _fanout_targets(cases)
    rows += [
        _target(name, ratio, goal, lower_is_better=True)
        for name, ratio, goal in e2e_report.targets(cases)
    ]
    return rows


def _fanout(cases: list[Record]) -> tuple[list[Record], list[int]]:
    fan = [c for c in cases if c["section"] == "fanout"]
    return fan, sorted({c["partitions"] for c in fan})


def _fanout_targets(cases: list[Record]) -> list[dict[str, Any]]:
    fan, counts = _fanout(cases)
    if len(counts) < 2:
        return []
    low, high = counts[0], counts[-1]
    rows = []
    for client in plan.FANOUT_CLIENTS:
        one, many = _find(fan, client, partitions=low), _find(fan, client, partitions=high)
        rate_ratio = threads_ratio = None
        threads = ""
        if one is not None and many is not None and _ok(one) and _ok(many):
            r1, rn = one["result"], many["result"]
            rate_ratio = _ratio(rn["rate"], r1["rate"])
            threads_ratio = _ratio(rn.get("threads"), r1.get("threads"))
            threads = f" ({rn.get('threads')} vs {r1.get('threads')})"
        rows.append(
            _target(f"{client}: msg/s over {high} partitions ≥ 0.8x over {low}", rate_ratio, 0.8)
        )
        rows.append(
            _target(
                f"{client}: process threads at {high} partitions ≤ 1.25x at {low}{threads}",
                threads_ratio,
                1.25,
                lower_is_better=True,
            )
        )
    return rows


def _services_targets(pub: list[Record]) -> list[dict[str, Any]]:
    """The services' patterns (awaited publishes) against what each pattern allows: its
    own bare ceiling, and go-liftbridge in the same pattern (throughput, then client
    CPU per message), over every configuration where they ran (plain and key+headers);
    worst ratio shown. Where go-liftbridge's client stalls in a pattern, the row says so."""
    rows: list[dict[str, Any]] = []
    configs = [k for k in _configs(pub) if _find(pub, plan.OURS_BURST, **_m(k))]
    if not configs:
        return rows

    def worst(name: str, pairs: list[float | None], goal: float, lower: bool = False) -> None:
        ratios = [r for r in pairs if r is not None]
        if not ratios:
            return
        met = sum((r <= goal) if lower else (r >= goal) for r in ratios)
        rows.append(
            _target(
                f"{name}, {len(ratios)} configurations, plain and key+headers "
                f"({'highest' if lower else 'worst'} ratio shown; met in {met} of {len(ratios)})",
                max(ratios) if lower else min(ratios),
                goal,
                lower_is_better=lower,
            )
        )

    for client in plan.SERVICES:
        worst(
            f"{client} (await publish) ≥ 0.95x its pattern's bare ceiling",
            [_rate_ratio(pub, client, plan.CEILING_OF[client], **_m(k)) for k in configs],
            0.95,
        )
        go = plan.GO_PEER_OF.get(client)
        if go is None:
            rows.append(
                _target(
                    f"{client} (await publish) ≥ 1.0x go-liftbridge in the same pattern: "
                    "go-liftbridge's Publish stalls in it (see the clients' notes)",
                    None,
                    1.0,
                )
            )
            continue
        worst(
            f"{client} (await publish) ≥ 1.0x {go}",
            [_rate_ratio(pub, client, go, **_m(k)) for k in configs],
            1.0,
        )
        worst(
            f"client CPU per acked message, {client} ≤ 1.0x {go}'s",
            [_cpu_ratio(pub, client, go, **_m(k)) for k in configs],
            1.0,
            lower=True,
        )
    return rows


# The blocking API's cases: (client, its peer, goal, what the target says).
_SYNC_GOALS = (
    (
        plan.SYNC_PUBLISH_ASYNC,
        plan.OURS,
        0.5,
        "sync publish_async from one thread, then its futures ≥ 0.5x ours (async) publish_async",
    ),
    (
        plan.SYNC_THREADS_16,
        plan.GO_TASKS_16,
        1.0,
        "sync publish from 16 threads ≥ 1.0x go-liftbridge Publish from 16 goroutines",
    ),
    (
        plan.SYNC_THREADS_16_ONE_CORE,
        plan.GO_TASKS_16,
        1.0,
        "sync publish from 16 threads, the process held to one core, ≥ 1.0x go-liftbridge "
        "Publish from 16 goroutines",
    ),
)


def _sync_match(case: Record) -> dict[str, Any]:
    keys = ("size", "ack", "partitions", "replication", "keyed")
    return {k: case.get(k, False if k == "keyed" else None) for k in keys}


def _sync_targets(pub: list[Record]) -> list[dict[str, Any]]:
    """The blocking API against its peers, where its cases ran."""
    rows: list[dict[str, Any]] = []
    for client, peer, goal, what in _SYNC_GOALS:
        case = _find(pub, client)
        if case is None:
            continue
        m = _sync_match(case)
        rows.append(
            _target(
                f"{what}, {_size(case['size'])}",
                _rate_ratio(pub, client, peer, **m),
                goal,
            )
        )
    return rows


def _sync_table(cases: list[Record]) -> list[str]:
    pub = [c for c in cases if c["section"] == "publish"]
    portal = _find([c for c in cases if c["section"] == "portal"], plan.PORTAL_CALL)
    present = [g for g in _SYNC_GOALS if _find(pub, g[0])]
    if not present and portal is None:
        return []
    out = [
        "",
        "### The blocking API, `liftbridge_nats.sync` (msg/s, CPU µs/msg)",
        "",
        "Plain threads, no event loop of their own: the SDK runs on one background loop "
        "per process. **sync publish_async** = the blocking Publisher's `publish_async` "
        "from one thread, then waiting on each future it returned, beside ours (the async "
        "`publish_async`, then `flush`); **sync publish, 16 threads** = 16 threads sharing "
        "one blocking Publisher, each looping on `publish` (which returns the ack), beside "
        "go-liftbridge's blocking `Publish` from 16 goroutines; **sync publish, 16 "
        "threads, one core** = the same with the publishing process held to one core "
        "(`os.sched_setaffinity`, as the guide suggests for many threads; the servers "
        "keep both cores). Same rounds, same stream configuration.",
        "",
        "| case | msg/s | CPU | peer | peer msg/s | peer CPU | ratio | goal |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for client, peer, goal, _ in present:
        case = _find(pub, client)
        assert case is not None
        m = _sync_match(case)
        peer_case = _find(pub, peer, **m)
        out.append(
            f"| {client} | {_figure(case, 'rate', 0)} | {_figure(case, 'cpu_us_per_msg', 1)} "
            f"| {peer} | {_figure(peer_case, 'rate', 0)} "
            f"| {_figure(peer_case, 'cpu_us_per_msg', 1)} "
            f"| {_x(_rate_ratio(pub, client, peer, **m))} | {goal}x |"
        )
    if portal is not None:
        if _ok(portal):
            r = portal["result"]
            figure = (
                f"**{r['us_per_call']:.1f} µs** per call ({r['cpu_us_per_msg']:.1f} µs of "
                f"process CPU), over {r['count']:,} calls"
            )
        else:
            figure = "failed (see Failures)"
        out += [
            "",
            "One blocking call through the background loop (a coroutine that does nothing, "
            f"called from the main thread, one after the other): {figure}.",
        ]
    return out


def _services_configs(pub: list[Record]) -> list[Config]:
    """The configurations where a services' pattern or its bare ceiling ran."""
    clients = (*plan.SERVICES, *plan.SERVICE_CEILINGS)
    return [k for k in _configs(pub) if any(_find(pub, c, **_m(k)) for c in clients)]


def ceilings(record: Record) -> list[dict[str, Any]]:
    """Context for the services' goals, not goals themselves: per pattern, what its own
    bare ceiling reaches against ours publish_async, what ours reaches against that
    ceiling, and ours against go-liftbridge in the same pattern where it has a peer (the
    worst ratio over the configurations where both ran, and the range)."""
    pub = [c for c in record["cases"] if c["section"] == "publish"]
    configs = _services_configs(pub)
    rows: list[dict[str, Any]] = []
    for pattern in plan.SERVICES:
        ceiling = plan.CEILING_OF[pattern]
        go_peer = plan.GO_PEER_OF.get(pattern)
        vs_async: list[float] = []
        ours_vs: list[float] = []
        ours_vs_go: list[float] = []
        for key in configs:
            m = _m(key)
            if (r := _rate_ratio(pub, ceiling, plan.OURS, **m)) is not None:
                vs_async.append(r)
            if (r := _rate_ratio(pub, pattern, ceiling, **m)) is not None:
                ours_vs.append(r)
            if go_peer and (r := _rate_ratio(pub, pattern, go_peer, **m)) is not None:
                ours_vs_go.append(r)
        if vs_async or ours_vs:
            rows.append(
                {
                    "pattern": pattern,
                    "ceiling": ceiling,
                    "configurations": len(configs),
                    "ceiling_vs_publish_async": vs_async,
                    "ours_vs_ceiling": ours_vs,
                    "go_peer": go_peer,
                    "ours_vs_go_peer": ours_vs_go,
                }
            )
    return rows


def spread(ratios: list[float]) -> str:
    """The worst (lowest) ratio, then the range when there are several."""
    if not ratios:
        return "-"
    low, high = min(ratios), max(ratios)
    return _x(low) + (f" ({low:.2f}-{high:.2f}x)" if len(ratios) > 1 else "")


def _ceilings_table(record: Record) -> list[str]:
    rows = ceilings(record)
    if not rows:
        return []
    out = [
        "",
        "Context for the services' patterns, not goals: the same pattern with no SDK (its "
        "bare ceiling) against ours `publish_async`, ours against that ceiling, and ours "
        "against go-liftbridge calling its blocking `Publish` in the same pattern, over "
        f"the {rows[0]['configurations']} configurations where they ran (worst ratio, then "
        "the range; per configuration in the tables of the services' patterns below).",
        "",
        "| pattern | its bare ceiling / ours publish_async | ours / its bare ceiling "
        "| ours / go, same pattern |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        ratios = row["ours_vs_go_peer"]
        go = f"{spread(ratios)} ({row['go_peer']})" if ratios else "-"
        out.append(
            f"| {row['pattern']} (await publish) | {spread(row['ceiling_vs_publish_async'])} "
            f"| {spread(row['ours_vs_ceiling'])} | {go} |"
        )
    return out


def _figure(case: Record | None, field: str, digits: int) -> str:
    """A case's figure for a table cell: blank if it did not run, "failed" if it failed."""
    if case is None:
        return ""
    if not _ok(case):
        return "failed"
    text = _num(case["result"][field], digits)
    errs = case["result"].get("errors") or 0
    return text + (f" ({errs} err)" if errs and field == "rate" else "")


def _services_table(cases: list[Record]) -> list[str]:
    pub = [c for c in cases if c["section"] == "publish"]
    configs = _services_configs(pub)
    if not configs:
        return []
    out = [
        "",
        "### The services' patterns beside their bare ceilings (msg/s, CPU µs/msg)",
        "",
        "Each pattern of `await publish()` calls, ours and its bare ceiling (the same "
        "pattern with no SDK), in the same rounds; the first row of each configuration is "
        "ours `publish_async` beside the bare pipeline, its own ceiling. ours / ceiling is "
        "the share of what the pattern allows that the SDK reaches; ceiling / "
        "publish_async is how far the pattern itself can go against ours `publish_async`.",
        "",
        "| configuration | pattern | ours | bare ceiling | ours / ceiling "
        "| ceiling / publish_async | ours CPU | ceiling CPU |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    patterns = [("publish_async", plan.OURS, plan.BARE)]
    patterns += [(p.removeprefix("ours "), p, plan.CEILING_OF[p]) for p in plan.SERVICES]
    for key in configs:
        m = _m(key)
        label = _pattern_label(key)
        for name, client, ceiling in patterns:
            ours_c, bare_c = _find(pub, client, **m), _find(pub, ceiling, **m)
            out.append(
                f"| {label} | {name} | {_figure(ours_c, 'rate', 0)} | "
                f"{_figure(bare_c, 'rate', 0)} | {_x(_rate_ratio(pub, client, ceiling, **m))} | "
                f"{_x(_rate_ratio(pub, ceiling, plan.OURS, **m))} | "
                f"{_figure(ours_c, 'cpu_us_per_msg', 1)} | "
                f"{_figure(bare_c, 'cpu_us_per_msg', 1)} |"
            )
    return out


def _go_patterns_table(cases: list[Record]) -> list[str]:
    pub = [c for c in cases if c["section"] == "publish"]
    pairs = list(plan.GO_PEER_OF.items())
    configs = [k for k in _configs(pub) if any(_find(pub, go, **_m(k)) for _, go in pairs)]
    if not configs:
        return []
    out = [
        "",
        "### The services' patterns beside go-liftbridge in the same pattern (msg/s, CPU µs/msg)",
        "",
        "Ours awaiting `publish()` from many tasks, go-liftbridge calling its blocking "
        "`Publish` from as many goroutines, in the same rounds. go-liftbridge v2.3.0's "
        "`Publish` sends on one gRPC stream from every calling goroutine, which grpc-go "
        "does not support, and it stalls (its sends wait for flow-control quota that never "
        "comes back; the run fails the case after 30 s without a returning call) once the "
        "calls in flight hold more than about 64 KiB, gRPC's default write quota per "
        "stream: in separate trials 400 goroutines with 100 B values ran and 700 stalled, "
        "60 with 1 KiB ran and 80 stalled. So only the 100-task pattern has a Go peer; "
        "where it stalls (100 calls of 1 KiB hold about 100 KiB) its case shows as failed, "
        "with no ratio.",
        "",
        "| configuration | pattern | ours | go | ours / go | ours CPU | go CPU "
        "| ours CPU / go CPU |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key in configs:
        m = _m(key)
        label = _pattern_label(key)
        for pattern, go in pairs:
            ours_c, go_c = _find(pub, pattern, **m), _find(pub, go, **m)
            out.append(
                f"| {label} | {pattern.removeprefix('ours ')} | {_figure(ours_c, 'rate', 0)} "
                f"| {_figure(go_c, 'rate', 0)} "
                f"| {_x(_rate_ratio(pub, pattern, go, **m))} "
                f"| {_figure(ours_c, 'cpu_us_per_msg', 1)} "
                f"| {_figure(go_c, 'cpu_us_per_msg', 1)} "
                f"| {_x(_cpu_ratio(pub, pattern, go, **m))} |"
            )
    return out


def _telemetry_cases(pub: list[Record]) -> tuple[dict[str, Any], dict[str, Record]]:
    """The configuration the telemetry variants ran on, and its cases by client."""
    for case in pub:
        if case["client"] == plan.OURS_NO_OTEL:
            m = {k: case[k] for k in ("size", "ack", "partitions", "replication", "keyed")}
            found = {
                client: c
                for client in (plan.OURS, *plan.TELEMETRY_CLIENTS)
                if (c := _find(pub, client, **m)) is not None and _ok(c)
            }
            return m, found
    return {}, {}


def _paired(a: Record | None, b: Record | None, field: str) -> float | None:
    """a / b for ``field`` (``rate`` or ``cpu_us_per_msg``): the median of the ratios of
    the rounds they ran side by side, or of their reported figures with one round."""
    if a is None or b is None:
        return None
    ra, rb = a["result"], b["result"]
    key = "rates_per_round" if field == "rate" else "cpu_us_per_msg_per_round"
    xs, ys = ra.get(key) or [], rb.get(key) or []
    na, nb = ra.get("round_numbers"), rb.get("round_numbers")
    if na is not None and nb is not None and len(na) == len(xs) and len(nb) == len(ys):
        # Rounds by number: a round one client failed leaves the other's unpaired.
        theirs = dict(zip(nb, ys, strict=True))
        pairs = [(x, theirs[n]) for n, x in zip(na, xs, strict=True) if n in theirs]
    elif len(xs) == len(ys):
        pairs = list(zip(xs, ys, strict=True))  # results from before round numbers
    else:
        pairs = []
    if len(pairs) > 1 and all(y for _, y in pairs):
        return float(statistics.median(x / y for x, y in pairs))
    return _ratio(ra.get(field), rb.get(field))


def _telemetry_targets(pub: list[Record]) -> list[dict[str, Any]]:
    m, found = _telemetry_cases(pub)
    if not found:
        return []
    base = found.get(plan.OURS_NO_OTEL)
    label = f"{_size(m['size'])} {m['ack']}"
    return [
        _target(
            f"publish throughput with opentelemetry-api and no SDK ≥ 0.97x without "
            f"opentelemetry, {label}",
            _paired(found.get(plan.OURS), base, "rate"),
            0.97,
        ),
        _target(
            f"client CPU per message with opentelemetry-api and no SDK ≤ 1.03x without "
            f"opentelemetry, {label}",
            _paired(found.get(plan.OURS), base, "cpu_us_per_msg"),
            1.03,
            lower_is_better=True,
        ),
    ]


def fast_path_ratio(cases: list[Record]) -> tuple[float | None, Record | None, Record | None]:
    """Ours with ``fast_path=False`` (nats-py's public API only) over ours with the
    fast path, ``publish_async`` on the configuration where it ran (the median of the
    rounds' ratios), with both cases."""
    pub = [c for c in cases if c["section"] == "publish"]
    slow = next((c for c in pub if c["client"] == plan.OURS_PUBLIC_API), None)
    if slow is None or not _ok(slow):
        return None, slow, None
    m = {k: slow[k] for k in ("size", "ack", "partitions", "replication", "keyed")}
    fast = _find(pub, plan.OURS, **m)
    if fast is None or not _ok(fast):
        return None, slow, fast
    return _paired(slow, fast, "rate"), slow, fast


def _fast_path_line(cases: list[Record]) -> list[str]:
    ratio, slow, fast = fast_path_ratio(cases)
    if slow is None:
        return []
    where = f"{_size(slow['size'])} {slow['ack']}, {_topo(slow)}"
    if ratio is None or fast is None:
        figures = "not measured (a case failed)"
    else:
        figures = (
            f"**{_x(ratio)}** the fast path's rate ({_num(slow['result']['rate'])} against "
            f"{_num(fast['result']['rate'])} msg/s"
            + (
                ", median of the rounds' ratios)"
                if len(slow["result"].get("rates_per_round") or []) > 1
                else ")"
            )
        )
    return [
        "",
        f"Public API path: our Publisher with `fast_path=False` (nats-py's public API only, "
        f"what a nats-py outside the tested range gets), `publish_async`, {where}: {figures}.",
    ]


def _telemetry_table(cases: list[Record]) -> list[str]:
    pub = [c for c in cases if c["section"] == "publish"]
    m, found = _telemetry_cases(pub)
    if not found:
        return []
    out = [
        "",
        f"### Telemetry and serializers ({_size(m['size'])}, {m['ack']}, "
        f"{m['partitions']} part, RF {m['replication']})",
        "",
        "**ours** runs with opentelemetry-api installed and no SDK configured (the "
        "Publisher's defaults, `tracing=True, metrics=True`); **ours, no opentelemetry** the "
        "same with opentelemetry not importable in the worker; **ours, traced (OTel SDK)** "
        "with an SDK tracer provider (a span per message, BatchSpanProcessor) and meter "
        "provider (collected every second) given to the Publisher, exporting into nothing; "
        "**ours, msgspec Struct** publishes a msgspec Struct whose JSON is as long as the "
        "raw value through `value_serializer=MsgspecSerializer()`.",
        "",
        "| client | msg/s | CPU µs/msg | msg/s per round | CPU µs/msg per round |",
        "|---|---:|---:|---|---|",
    ]
    for client in (plan.OURS_NO_OTEL, plan.OURS, plan.OURS_TRACED, plan.OURS_MSGSPEC):
        case = found.get(client)
        if case is None:
            out.append(f"| {client} | - | - | | |")
            continue
        r = case["result"]
        rates = "/".join(f"{x / 1000:.0f}k" for x in r.get("rates_per_round", []))
        cpus = "/".join(f"{x:.2f}" for x in r.get("cpu_us_per_msg_per_round", []))
        out.append(
            f"| {client} | {_num(r['rate'])} | {_num(r['cpu_us_per_msg'], 2)} | {rates} | {cpus} |"
        )

    def line(what: str, a: str, b: str) -> str:
        rate = _paired(found.get(a), found.get(b), "rate")
        cpu = _paired(found.get(a), found.get(b), "cpu_us_per_msg")
        rate_text = "-" if rate is None else f"{rate:.3f}x"
        cpu_text = "-" if cpu is None else f"{cpu:.3f}x"
        return f"- {what}: throughput {rate_text}, CPU per message {cpu_text}"

    out += [
        "",
        "Ratios in the same run (the median of the rounds' ratios when there are several):",
        "",
        line(
            "opentelemetry-api without an SDK / no opentelemetry (goal: throughput within 3%)",
            plan.OURS,
            plan.OURS_NO_OTEL,
        ),
        line("msgspec Struct through value_serializer / raw bytes", plan.OURS_MSGSPEC, plan.OURS),
        line("traced and metered by the OTel SDK / no SDK", plan.OURS_TRACED, plan.OURS),
    ]
    return out


def _target(
    name: str, ratio: float | None, goal: float, lower_is_better: bool = False
) -> dict[str, Any]:
    if ratio is None:
        status = "not measured"
    elif (ratio <= goal) if lower_is_better else (ratio >= goal):
        status = "met"
    else:
        status = "missed"
    return {"target": name, "goal": goal, "ratio": ratio, "status": status}


def _publisher_default(name: str) -> Any:
    """A keyword default of our Publisher (None when it cannot be imported)."""
    try:
        from liftbridge_nats import Publisher
    except ImportError:
        return None
    parameter = inspect.signature(Publisher).parameters.get(name)
    return None if parameter is None else parameter.default


def _ours_settings(meta: Record) -> str:
    """How our Publisher was configured, naming every setting away from its defaults."""
    timeouts = meta["settings"].get("ours_ack_timeout")
    if not timeouts:
        return "with the Publisher's defaults except `ack_timeout` (this run did not record it)"
    default = _publisher_default("ack_timeout")
    return (
        f"with the Publisher's defaults except `ack_timeout`: {timeouts['publish']:g} s in the "
        f"publish and memory cases, {timeouts['latency']:g} s in the latency cases"
        + (f" (default {default:g} s)" if isinstance(default, int | float) else "")
        + ", so that a round slowed down by the machine shows as a low rate rather than as "
        "failed messages; `max_inflight` is the default, the Go peer's window is set to it"
    )


def _machine_section(meta: Record) -> list[str]:
    m = meta["machine"]
    lines = [
        f"- Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB RAM, {m['os']}",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        f"- Run: {meta['started']} → {meta['finished']} (UTC), mode `{meta['mode']}`, "
        f"command `{meta['command']}`",
        f"- Load average (1/5/15 min) before: {meta['load_before']}, after: {meta['load_after']}",
    ]
    probes = meta.get("speed_probes_ms") or []
    if probes:
        lines.append(
            f"- Machine speed: a fixed pure-Python loop ({machine.SPEED_PROBE_ADDITIONS:,} "
            f"additions), timed before each of the {len(probes)} rounds of the publish, "
            f"subscribe and fan-out cases, took {min(probes):.0f}-{max(probes):.0f} ms "
            f"(median {statistics.median(probes):.0f}); the wider that range, the more the "
            "machine's speed moved during the run, and rounds of one client with it"
        )
    s = meta["settings"]
    lines.append(
        f"- Settings: {s['nodes']}-node cluster (one nats-server), {s['count']:,} messages per "
        f"publish case after {s['warmup']:,} warm-up messages, sizes "
        f"{', '.join(_size(x) for x in s['sizes'])}; one-at-a-time peers (gufo `publish`, "
        f"go `Publish`) on {', '.join(s['sequential_topologies'])} only; latency "
        f"{s['latency_seconds']:.0f} s per load and client in {s.get('latency_rounds', 1)} "
        "alternating rounds; "
        + (
            f"end-to-end latency {s['e2e_seconds']:g} s per load and client in "
            f"{s.get('e2e_rounds', 1)} alternating round(s), each after "
            f"{s.get('e2e_warmup_seconds', 0):g} s of warm-up, pooled; "
            if "e2e_seconds" in s
            else ""
        )
        + f"publish and subscribe cases in {s.get('rounds', 1)} alternating "
        "round(s) per configuration (one-at-a-time peers in one)"
        + (
            f", the services' patterns with their bare ceilings and go-liftbridge's "
            f"goroutines in {s['services_rounds']} rounds of their own"
            if "services_rounds" in s
            else ""
        )
        + ", the round with the median rate reported, and a ratio of two clients the "
        "median of their rounds' ratios; subscribe reads "
        f"{s['subscribe_count']:,} "
        f"messages; memory case {s['memory_count']:,} publishes; Go PublishAsync window "
        f"{s['go_window'] or 'unbounded'} (our Publisher's default max_inflight)"
        + ("; every Python client on uvloop" if s.get("uvloop") else "")
    )
    if s.get("spark"):
        lines.append(
            f"- Spark section: read of the subscribe stream's {s['subscribe_count']:,} "
            f"messages, sink of {s['spark_sink_count']:,} rows, scaling runs of "
            f"{s['spark_scale_count']:,} rows; the read and the sink first run once untimed "
            f"(JVM warm-up), then {s['spark_rounds']} alternating round(s), the median round "
            "reported"
        )
    if meta.get("note"):
        lines.append(f"- Note: {meta['note']}")
    for restart in meta.get("server_restarts", []):
        lines.append(
            f"- Restarted during the run: {', '.join(restart['servers'])}, found stopped "
            f"after case `{restart['after']}` failed (the servers' log tails are in "
            "cluster-logs.txt); the cases after it ran on the restarted cluster"
        )
    for peer, why in meta.get("peers_missing", {}).items():
        lines.append(f"- Missing peer {peer}: {why}")
    return lines


def _publish_tables(cases: list[Record]) -> list[str]:
    pub = [c for c in cases if c["section"] == "publish"]
    out: list[str] = []
    clients = [c for c in PUBLISH_ORDER if any(x["client"] == c for x in pub)]
    peers = [c for c in clients if c not in (plan.OURS, plan.OURS_UVLOOP, plan.BARE_UVLOOP)]
    uv = plan.OURS_UVLOOP in clients and plan.BARE_UVLOOP in clients
    for size in sorted({c["size"] for c in pub}):
        raw = _rate(pub, plan.RAW, size=size)
        keys = [k for k in _configs(pub) if k[0] == size]
        out += [
            "",
            f"### Acked publish throughput, {_size(size)} values (msg/s)",
            "",
            f"Raw nats-py with no server in the loop (the same envelopes, no acks): "
            f"**{_num(raw)} msg/s** (ours reaches {_x(_ratio(_rate(pub, plan.OURS, size=size, ack='LEADER', partitions=1, replication=1), raw))} "
            "of it with LEADER acks on 1 partition, RF 1).",
            "",
            "| ack | topology | " + " | ".join(clients) + " |",
            "|---|---|" + "---:|" * len(clients),
        ]
        for key in keys:
            m = _m(key)
            cells = [_figure(_find(pub, client, **m), "rate", 0) for client in clients]
            out.append(f"| {key[1]} | {_label(key)} | " + " | ".join(cells) + " |")
        out += [
            "",
            f"Ratios, {_size(size)}: ours / the ceiling (bare) and ours / each peer"
            + (" (last column: ours+uvloop / bare+uvloop)" if uv else "")
            + ".",
            "",
            "| ack | topology | "
            + " | ".join(f"ours / {p}" for p in peers)
            + (" | uvloop: ours / bare |" if uv else " |"),
            "|---|---|" + "---:|" * (len(peers) + (1 if uv else 0)),
        ]
        for key in keys:
            m = _m(key)
            cells = [_x(_rate_ratio(pub, plan.OURS, p, **m)) for p in peers]
            if uv:
                cells.append(_x(_rate_ratio(pub, plan.OURS_UVLOOP, plan.BARE_UVLOOP, **m)))
            out.append(f"| {key[1]} | {_label(key)} | " + " | ".join(cells) + " |")
    return out


def _cpu_table(cases: list[Record]) -> list[str]:
    pub = [c for c in cases if c["section"] in ("publish", "memory") and _ok(c)]
    rows = [c for c in pub if c["partitions"] == 1 and c["replication"] == 1]
    if not rows:
        return []
    clients = [c for c in [plan.RAW, *PUBLISH_ORDER] if any(x["client"] == c for x in rows)]
    out = [
        "",
        "### Client CPU per message (µs of process CPU time / message, 1 partition, RF 1)",
        "",
        "Encode + publish + ack match, all threads of the client process (gRPC peers "
        "include their gRPC threads; the Go peer all goroutines).",
        "",
        "| size | ack | messages | " + " | ".join(clients) + " |",
        "|---|---|---|" + "---:|" * len(clients),
    ]
    keys = sorted(
        {
            (c["size"], c["ack"], c.get("keyed", False))
            for c in rows
            if c["section"] == "publish" and c["client"] != plan.RAW
        }
    )
    for size, ack, keyed in keys:
        cells = []
        for client in clients:
            match: dict[str, Any] = (
                {"size": size} if client == plan.RAW else {"size": size, "ack": ack, "keyed": keyed}
            )
            case = _find([c for c in rows if c["section"] == "publish"], client, **match)
            cells.append(_num(case["result"]["cpu_us_per_msg"], 1) if case else "")
        kind = "key+headers" if keyed else "plain"
        out.append(f"| {_size(size)} | {ack} | {kind} | " + " | ".join(cells) + " |")
    return out


def _latency_table(cases: list[Record]) -> list[str]:
    lat = [c for c in cases if c["section"] == "latency"]
    if not lat:
        return []
    out = [
        "",
        "### Ack latency at fixed offered load (ms, from each message's scheduled send time)",
        "",
        "LEADER acks, 1 partition, RF 1; ours and bare alternate in rounds (pooled) on one "
        "stream, so that both see the same background load and the same partition leader. "
        "Sends are scheduled at a fixed rate and every "
        "latency is measured from the scheduled time, so a stall that delays sending "
        "counts against the client (no coordinated omission).",
        "",
        "| load | size | client | p50 | p90 | p99 | p99.9 | max | lost | p99 / bare p99 "
        "| p99 per round | median round p99 / bare's |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for case in lat:
        r = case["result"]
        if not _ok(case):
            out.append(
                f"| {case['rate']:,} msg/s | {_size(case['size'])} | {case['client']} | failed |||||||"
            )
            continue
        bare = _find(lat, plan.BARE, size=case["size"], rate=case["rate"])
        ratio = None
        if bare and _ok(bare):
            ratio = r["p99_ms"] / bare["result"]["p99_ms"]
        out.append(
            f"| {case['rate']:,} msg/s | {_size(case['size'])} | {case['client']} | "
            f"{r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} | {r['p999_ms']:.2f} | "
            f"{r['max_ms']:.2f} | {r['errors']} | {_x(ratio)} | "
            f"{', '.join(f'{x:.1f}' for x in r.get('p99_ms_per_round', []))} | "
            f"{_x(_median_round_ratio(r, bare))} |"
        )
    return out


def _median_round_ratio(r: Record, bare: Record | None) -> float | None:
    """Median of this client's per-round p99s over bare's: robust to one noisy round."""
    mine = r.get("p99_ms_per_round") or []
    if not bare or not _ok(bare) or not mine:
        return None
    theirs = bare["result"].get("p99_ms_per_round") or []
    if not theirs:
        return None
    return _ratio(statistics.median(mine), statistics.median(theirs))


def _subscribe_table(cases: list[Record]) -> list[str]:
    sub = [c for c in cases if c["section"] == "subscribe"]
    if not sub:
        return []
    clients = [
        c
        for c in (
            plan.OURS,
            *plan.SUB_METRICS_CLIENTS,
            plan.GRPC_SUB,
            plan.GRPC_SYNC_SUB,
            plan.GO_SUB,
            plan.GUFO_SUB,
        )
        if any(x["client"] == c for x in sub)
    ]
    out = [
        "",
        f"### Subscribe throughput (msg/s, reading the same {sub[0]['count']:,}-message partition from offset 0)",
        "",
        "**ours** = `Client.subscribe` and `async for` (HTTP/2 read by the event loop); "
        "**raw grpc.aio** = the generated stub's `Subscribe` alone (no SDK): the ceiling "
        "for a Python reader on grpc.aio; **raw grpc sync thread** = the generated "
        "synchronous stub iterated by a thread that only counts, on a single-threaded "
        "channel: the ceiling of a thread per subscription. **ours** runs with "
        "opentelemetry-api installed and no SDK; **ours, metrics off** with "
        "`Client(metrics=False)`; **ours + OTel SDK** reports its read metrics to an "
        "OpenTelemetry SDK meter provider collected every second.",
        "",
        "| size | " + " | ".join(clients) + " | ours / raw grpc.aio | ours / gufo | ours / go |",
        "|---|" + "---:|" * (len(clients) + 3),
    ]
    for size in sorted({c["size"] for c in sub}):
        cells = []
        for client in clients:
            case = _find(sub, client, size=size)
            cells.append(
                "failed" if case and not _ok(case) else _num(_rate(sub, client, size=size))
            )
        out.append(
            f"| {_size(size)} | "
            + " | ".join(cells)
            + f" | {_x(_rate_ratio(sub, plan.OURS, plan.GRPC_SUB, size=size))}"
            + f" | {_x(_rate_ratio(sub, plan.OURS, plan.GUFO_SUB, size=size))}"
            + f" | {_x(_rate_ratio(sub, plan.OURS, plan.GO_SUB, size=size))} |"
        )
    out += [
        "",
        "Client CPU per message (µs of process CPU time, all threads):",
        "",
        "| size | " + " | ".join(clients) + " |",
        "|---|" + "---:|" * len(clients),
    ]
    for size in sorted({c["size"] for c in sub}):
        cells = []
        for client in clients:
            case = _find(sub, client, size=size)
            result = case["result"] if case is not None and _ok(case) else None
            cells.append(f"{result['cpu_us_per_msg']:.1f}" if result else "-")
        out.append(f"| {_size(size)} | " + " | ".join(cells) + " |")
    out += _read_metrics_cost(sub)
    return out


def _read_metrics_cost(sub: list[Record]) -> list[str]:
    """Read metrics' cost: CPU per message of our subscribe against metrics off."""
    lines = []
    for size in sorted({c["size"] for c in sub}):
        base = _cpu(sub, plan.OURS_METRICS_OFF, size=size)
        if not base:
            continue
        ratios = []
        for client in (plan.OURS, plan.OURS_OTEL_SDK):
            cpu = _cpu(sub, client, size=size)
            if cpu is not None:
                ratios.append(f"{client} {cpu / base:.3f}x")
        if ratios:
            lines.append(f"- {_size(size)}: " + "; ".join(ratios))
    if not lines:
        return []
    return [
        "",
        "Read metrics, CPU per message against `metrics=False` (goal: within 3%):",
        "",
        *lines,
    ]


def _fanout_table(cases: list[Record]) -> list[str]:
    fan, counts = _fanout(cases)
    if not fan:
        return []
    per = fan[0]["count"]
    out = [
        "",
        f"### Many partitions: {per:,} messages from each partition, {_size(fan[0]['size'])} "
        "(chart: `results-fanout.png`)",
        "",
        "**a task per partition** = one `Client.subscribe` and `async for` per partition, "
        "all in one event loop; **one consumer** = one consumer-group member (`async for` "
        "over the consumer) holding every partition; **go** = go-liftbridge with one "
        "`Subscribe` per partition, on the same servers (how far the servers' own rate "
        "moves with the partition count). Threads are the process's, as the "
        "kernel counts them (gRPC's own included), at their peak during the run; peak RSS "
        "is VmHWM. The rate is against the same client on the fewest partitions.",
        "",
        "| partitions | client | msg/s | vs fewest | threads | peak RSS (MiB) | CPU µs/msg |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for count in counts:
        for client in (*plan.FANOUT_CLIENTS, plan.GO_FANOUT):
            case = _find(fan, client, partitions=count)
            if case is None:
                continue
            if not _ok(case):
                out.append(f"| {count} | {client} | failed | | | | |")
                continue
            r = case["result"]
            base = _find(fan, client, partitions=counts[0])
            ratio = _ratio(r["rate"], base["result"]["rate"]) if base and _ok(base) else None
            out.append(
                f"| {count} | {client} | {r['rate']:,.0f} | {_x(ratio)} | {r.get('threads', '-')} "
                f"| {r['max_rss_kib'] / 1024:.1f} | {r['cpu_us_per_msg']:.2f} |"
            )
    return out


def fanout_chart(record: Record, path: Path) -> None:
    """Four panels against the partition count: msg/s, threads, peak RSS, CPU per message."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fan, counts = _fanout(record["cases"])
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.5))
    panels: list[tuple[str, Callable[[Record], float]]] = [
        ("k msg/s (all partitions)", lambda r: r["rate"] / 1000),
        ("process threads (peak)", lambda r: r.get("threads", 0)),
        ("peak RSS (MiB)", lambda r: r["max_rss_kib"] / 1024),
        ("CPU µs per message", lambda r: r["cpu_us_per_msg"]),
    ]
    for ax, (title, value) in zip(axes, panels, strict=True):
        for client in (*plan.FANOUT_CLIENTS, plan.GO_FANOUT):
            points = [
                (n, value(c["result"]))
                for n in counts
                if (c := _find(fan, client, partitions=n)) is not None and _ok(c)
            ]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=client)
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts)
        ax.set_xticklabels([str(n) for n in counts])
        ax.set_xlabel("partitions read")
        ax.set_ylim(bottom=0)
        ax.set_title(title)
        _legend(ax)
    m = record["meta"]["machine"]
    fig.suptitle(
        f"Reading many partitions ({record['meta']['mode']}), {m['cpu']}, {m['cores']} cores"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _memory_table(cases: list[Record]) -> list[str]:
    mem = [c for c in cases if c["section"] == "memory"]
    if not mem:
        return []
    out = [
        "",
        f"### {mem[0]['count']:,} publishes: CPU and peak memory ({_size(mem[0]['size'])}, LEADER, 1 partition)",
        "",
        "| client | msg/s | CPU µs/msg | peak RSS (MiB) | peak RSS growth during the run (MiB) |",
        "|---|---:|---:|---:|---:|",
    ]
    for case in mem:
        r = case["result"]
        if not _ok(case):
            out.append(f"| {case['client']} | failed | | | |")
            continue
        delta = f"{r['rss_delta_kib'] / 1024:.1f}" if "rss_delta_kib" in r else "-"
        out.append(
            f"| {case['client']} | {r['rate']:,.0f} | {r['cpu_us_per_msg']:.1f} | "
            f"{r['max_rss_kib'] / 1024:.1f} | {delta} |"
        )
    return out


def _spark_table(cases: list[Record]) -> list[str]:
    sp = [c for c in cases if c["section"] == "spark"]
    if not sp:
        return []

    def row(client: str, what: str) -> str:
        case = _find(sp, client)
        if case is None:
            return f"| {client} | {what} | | | |"
        if not _ok(case):
            return f"| {client} | {what} | failed | | |"
        r = case["result"]
        rounds = "/".join(f"{x / 1000:.0f}k" for x in r.get("rates_per_round", []))
        return (
            f"| {client} | {what} | {_num(r['rate'])} | {_num(r['cpu_us_per_msg'], 1)} | {rounds} |"
        )

    def ratio(a: str, b: str) -> str:
        return _x(_rate_ratio(sp, a, b))

    count = {c["client"]: c["count"] for c in sp}
    return [
        "",
        f"### Spark ({_size(sp[0]['size'])} values)",
        "",
        "Read: one task reads the whole partition into Spark's `noop` sink; its rate is "
        "rows over the task's run time as Spark reports it (no job scheduling). Sink: "
        '`df.write.format("liftbridge")` from a `local[2]` session, two tasks, ALL acks, '
        "two partitions, against one Python Publisher with `publish_async` publishing the "
        "same values (built before it is timed), and against two such Publishers in two "
        "processes with half the rows each (the sink's shape, two tasks in two Python "
        "workers, without Spark). The read and "
        "the sink each run once, untimed, before the rounds: the JVM compiles its hot "
        "paths over its first rows, and a cold first round ran 0.6-0.75x the later ones. "
        "Every write goes to a new stream, deleted after its round, so that every write's "
        "partitions get the same brokers (Liftbridge places a new partition on the broker "
        "that holds the fewest). Scaling: a "
        "standalone cluster (master and workers as processes, one core per worker) with "
        "one worker and with two, in alternating rounds, reading a 4-partition stream "
        "and writing it to another. CPU "
        "is that of every process involved (driver, JVM, Python workers; the cluster's "
        "daemons and executors), per row.",
        "",
        "| case | what | rows/s | CPU µs/row | rounds |",
        "|---|---|---:|---:|---|",
        row(spark.READ, f"{count.get(spark.READ, 0):,} rows, one task"),
        row(spark.READ_PEER, "`Client.subscribe`, the same partition"),
        row(spark.SINK, f"{count.get(spark.SINK, 0):,} rows"),
        row(spark.SINK_PEER, "`publish_async`, the same rows"),
        row(spark.SINK_PAIR, "the same, half the rows in each of two processes"),
        row(spark.SCALE_READ_1, f"{count.get(spark.SCALE_READ_1, 0):,} rows, 4 partitions"),
        row(spark.SCALE_READ_2, "the same, two workers"),
        row(spark.SCALE_SINK_1, f"{count.get(spark.SCALE_SINK_1, 0):,} rows, 4 tasks"),
        row(spark.SCALE_SINK_2, "the same, two workers"),
        "",
        f"Ratios: read per task / subscribe {ratio(spark.READ, spark.READ_PEER)} (goal 0.8x); "
        f"sink / one Publisher {ratio(spark.SINK, spark.SINK_PEER)} (goal 0.9x), / two "
        f"Publishers {ratio(spark.SINK, spark.SINK_PAIR)}; two Publishers / one "
        f"{ratio(spark.SINK_PAIR, spark.SINK_PEER)}; two workers "
        f"/ one: read {ratio(spark.SCALE_READ_2, spark.SCALE_READ_1)}, sink "
        f"{ratio(spark.SCALE_SINK_2, spark.SCALE_SINK_1)} (on 2 cores shared with the "
        "servers and the driver).",
    ]


def _failures(cases: list[Record]) -> list[str]:
    bad = [c for c in cases if not _ok(c)]
    if not bad:
        return []
    out = ["", "### Failed cases (no figure is shown for them)", ""]
    for c in bad:
        why = str(c["result"]["error"]).strip().splitlines()
        out.append(f"- `{c['id']}`: {why[-1][:300] if why else 'unknown'}")
    return out


def _method() -> list[str]:
    return [
        "",
        "How it is measured:",
        "",
        "- Every case runs in a fresh process (a worker) on a fresh stream that is deleted "
        "afterwards; all clients of one configuration run back to back, in alternating "
        "rounds (A B C, then C B A, ...), the services' patterns with their peers in rounds "
        "of their own; each client's round with the median rate is the one reported, and "
        "results.json keeps every round's rate. A ratio of two clients that ran in the same "
        "rounds is the median of the rounds' ratios, so the tables' ratios can differ from "
        "the quotient of their figures: the machine's speed moves between rounds more than "
        "the clients differ, and within a round both see the same machine. CPU is the worker "
        "process's CPU time (all threads) over the timed section divided by the messages; "
        "peak memory is the process's VmHWM.",
        "- Each publish case first sends the warm-up messages (connections, stream, "
        "followers busy), then times `count` messages until the last ack is in. "
        "Multi-partition cases spread messages round-robin over the partitions.",
        "- Publish clients: ours and bare publish on NATS; the Go and gufo peers publish over "
        "gRPC to a broker, which publishes on NATS for them. go `Publish` and gufo "
        "`publish` wait for each ack before the next message (one in flight), as their "
        "APIs do; they run on the 1-partition RF 1 configuration only, with the same count.",
        "- The bare pipeline pre-encodes its envelopes before the clock starts and only "
        "counts acks, so it is a ceiling, not a usable client: no futures, no matching, "
        "no timeouts. Raw nats-py sends the same bytes where no server listens.",
        "- The bare ceilings of the services' patterns (bare burst 20k, bare 100 tasks, "
        "bare 1000 tasks) run the same pattern with no SDK: pre-encoded envelopes, one "
        "plain future per message that the ack subscription resolves in arrival order (one "
        "partition acks in publishing order), no matching, no timeouts. They show how fast "
        "each pattern can go on nats-py at all, beside the SDK doing it.",
        "- Latency: sends are scheduled at the offered rate (batches of the messages due "
        "whenever the event loop wakes up); each latency runs from the message's "
        "scheduled time to the moment its ack is seen (ours: the future's callback; "
        "bare: the subscription callback). Each round starts with a warm-up at the same "
        "rate that is not recorded.",
        "- Ratios are ours / peer on the same configuration of the same run. "
        "key+headers rows put the same key and one header on every message, for every "
        "client (the Go peer with `lift.Key` and `lift.Header`).",
    ]


def markdown(record: Record, chart_name: str = "results.png") -> str:
    """The whole RESULTS.md text."""
    meta, cases = record["meta"], record["cases"]
    lines = [
        "# liftbridge-nats benchmark results",
        "",
        "Generated by `python -m bench` (`make bench`); raw numbers in `results.json`, "
        f"chart in `{chart_name}`. Every client runs in its own process against the same "
        "servers, one case after another; figures are from one run, on one machine.",
        "",
        "## Machine and settings",
        "",
        *_machine_section(meta),
        "",
        "## Targets (reported, not asserted)",
        "",
        "Headline configuration: LEADER acks, 1 partition, RF 1.",
        "",
        "| target | measured ratio | goal | status |",
        "|---|---:|---:|---|",
    ]
    for t in targets(record):
        lines.append(f"| {t['target']} | {_x(t['ratio'])} | {t['goal']}x | {t['status']} |")
    lines += _fast_path_line(cases)
    lines += _ceilings_table(record)
    lines += ["", "## Figures", ""]
    lines += [
        "Clients: **ours** = `Publisher.publish_async` then `flush`, "
        + _ours_settings(record["meta"])
        + "; **ours burst 20k** = 20,000 `await publish()` calls started at once and "
        "gathered, burst after burst; **ours 100 tasks / 1000 tasks** = that many tasks, each "
        "looping on `await publish()` (the services' pattern), with the same Publisher "
        "settings; **bare burst 20k / 100 tasks / 1000 tasks** = the bare ceilings of those "
        "patterns (below); **bare** = "
        "pre-encoded envelopes published with nats-py, acks only counted by a subscription "
        "callback (the ceiling the server and nats-py allow); **go PublishAsync / Publish** = "
        "go-liftbridge (gRPC); **go Publish, 100 goroutines** = 100 goroutines, each looping "
        "on go-liftbridge's blocking `Publish` (the 100-task pattern in Go); **gufo "
        "publish_bulk / publish** = gufo-liftbridge (gRPC); **+uvloop** = the same Python "
        "client on uvloop.",
    ]
    lines += _method()
    lines += _publish_tables(cases)
    lines += _cpu_table(cases)
    lines += _services_table(cases)
    lines += _go_patterns_table(cases)
    lines += _telemetry_table(cases)
    lines += _sync_table(cases)
    lines += _latency_table(cases)
    lines += e2e_report.table(cases)
    lines += _subscribe_table(cases)
    lines += _fanout_table(cases)
    lines += _memory_table(cases)
    lines += _spark_table(cases)
    lines += _failures(cases)
    lines.append("")
    return "\n".join(lines)


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "not measured in this run", ha="center", transform=ax.transAxes)


def chart(record: Record, path: Path) -> None:
    """Three panels: publish throughput, ack latency percentiles, subscribe throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = record["cases"]
    pub = [
        c
        for c in cases
        if c["section"] == "publish" and c["partitions"] == 1 and c["replication"] == 1
    ]
    fig, axes = plt.subplots(1, 3, figsize=(19, 5.5), width_ratios=(1.6, 1, 1))
    ax = axes[0]
    groups = sorted(
        {(c["size"], c["ack"]) for c in pub if c["client"] != plan.RAW},
        key=lambda k: (k[0], k[1] != "LEADER"),
    )
    clients = [c for c in CHART_ORDER if any(x["client"] == c for x in pub)]
    width = 0.8 / max(1, len(clients))
    # One colour per client (tab20's dark shades first); a services' pattern's bare
    # ceiling has the pattern's colour, hatched.
    palette = plt.get_cmap("tab20")
    own = [c for c in CHART_ORDER if c not in plan.SERVICE_CEILINGS]
    colours: dict[str, Any] = {c: palette((2 * i) % 20 + (2 * i) // 20) for i, c in enumerate(own)}
    colours |= {plan.CEILING_OF[p]: colours[p] for p in plan.SERVICES}
    for j, client in enumerate(clients):
        values = [(_rate(pub, client, size=s, ack=a, keyed=False) or 0) / 1000 for s, a in groups]
        ceiling = client in plan.SERVICE_CEILINGS
        ax.bar(
            [i + j * width for i in range(len(groups))],
            values,
            width,
            label=client,
            color=colours[client],
            hatch="//" if ceiling else None,
            edgecolor="white" if ceiling else None,
        )
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))])
    ax.set_xticklabels([f"{a}\n{_size(s)}" for s, a in groups])
    ax.set_ylabel("k msg/s")
    ax.set_title("Acked publish, 1 partition, RF 1 (hatched: a pattern's bare ceiling)")
    if clients:  # room above the bars for a legend of many clients
        ax.set_ylim(top=ax.get_ylim()[1] * 1.4)
        ax.legend(fontsize=7, ncol=4, loc="upper center")
    else:
        _legend(ax)
    ax = axes[1]
    lat = [c for c in cases if c["section"] == "latency" and _ok(c)]
    labels = ["p50", "p90", "p99", "p999"]
    # Colour: load and size; line style: client (ours solid, bare dashed).
    configs = sorted({(c["rate"], c["size"]) for c in lat})
    for case in lat:
        r = case["result"]
        ax.plot(
            ["p50", "p90", "p99", "p99.9"],
            [r[f"{p}_ms"] for p in labels],
            marker="o",
            color=f"C{configs.index((case['rate'], case['size']))}",
            linestyle="-" if case["client"] == plan.OURS else "--",
            label=f"{case['client']} {case['rate'] // 1000}k/s {_size(case['size'])}",
        )
    ax.set_yscale("log")
    ax.set_ylabel("ms from scheduled send")
    ax.set_title("Ack latency (LEADER)")
    _legend(ax)
    ax = axes[2]
    sub = [c for c in cases if c["section"] == "subscribe"]
    sizes = sorted({c["size"] for c in sub})
    sub_clients = [
        c
        for c in (plan.OURS, plan.GRPC_SUB, plan.GO_SUB, plan.GUFO_SUB)
        if any(x["client"] == c for x in sub)
    ]
    w = 0.8 / max(1, len(sub_clients))
    for j, client in enumerate(sub_clients):
        ax.bar(
            [i + j * w for i in range(len(sizes))],
            [(_rate(sub, client, size=s) or 0) / 1000 for s in sizes],
            w,
            label=client,
        )
    ax.set_xticks([i + 0.4 - w / 2 for i in range(len(sizes))])
    ax.set_xticklabels([_size(s) for s in sizes])
    ax.set_ylabel("k msg/s")
    ax.set_title("Subscribe from offset 0")
    _legend(ax)
    m = record["meta"]["machine"]
    fig.suptitle(
        f"liftbridge-nats bench ({record['meta']['mode']}), {m['cpu']}, {m['cores']} cores"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(record: Record, out_dir: Path) -> None:
    """Write results.json, RESULTS.md and the charts into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(record, indent=1) + "\n")
    (out_dir / "RESULTS.md").write_text(markdown(record))
    chart(record, out_dir / "results.png")
    fanout_chart(record, out_dir / "results-fanout.png")
    e2e_report.chart(record, out_dir / e2e_report.CHART)


def main(argv: list[str]) -> int:
    """Regenerate the report from a saved results.json."""
    source = Path(argv[1]) if len(argv) > 1 else Path(__file__).parent / "results.json"
    record = json.loads(source.read_text())
    (source.parent / "RESULTS.md").write_text(markdown(record))
    chart(record, source.parent / "results.png")
    fanout_chart(record, source.parent / "results-fanout.png")
    e2e_report.chart(record, source.parent / e2e_report.CHART)
    print(source.parent / "RESULTS.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
