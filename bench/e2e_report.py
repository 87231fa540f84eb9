"""The end-to-end latency part of the report: its goals, its table and its chart
(``results-e2e.png``). :mod:`bench.report` puts them into RESULTS.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import plan

Record = dict[str, Any]

CLIENTS = (plan.E2E_OURS_SUB, plan.E2E_OURS_CONSUMER, plan.E2E_GO, plan.E2E_BARE)
# Ours p99 at most this many times go-liftbridge's, at every offered load.
GOAL_VS_GO = 1.1
CHART = "results-e2e.png"


def _cases(cases: list[Record]) -> list[Record]:
    return [c for c in cases if c["section"] == "e2e"]


def _usable(case: Record | None) -> bool:
    """Ran, and something arrived (a case where nothing did has no percentiles)."""
    return (
        case is not None and "error" not in case["result"] and bool(case["result"].get("arrived"))
    )


def _find(cases: list[Record], client: str, rate: int, size: int) -> Record | None:
    for c in cases:
        if (c["client"], c["rate"], c["size"]) == (client, rate, size):
            return c
    return None


def _loads(e2e: list[Record]) -> list[tuple[int, int]]:
    return sorted({(c["rate"], c["size"]) for c in e2e})


def _lost_note(case: Record) -> str:
    lost = case["result"]["count"] - case["result"]["arrived"]
    return (
        f", {lost:,} of {case['result']['count']:,} not in by the reader's deadline" if lost else ""
    )


def targets(cases: list[Record]) -> list[tuple[str, float | None, float]]:
    """(name, ratio, goal) per offered load and reader of ours: its p99 over
    go-liftbridge's (lower is better). A reader that lost messages reports no ratio."""
    e2e = _cases(cases)
    rows: list[tuple[str, float | None, float]] = []
    for rate, size in _loads(e2e):
        go = _find(e2e, plan.E2E_GO, rate, size)
        for client in plan.E2E_OURS:
            ours = _find(e2e, client, rate, size)
            if ours is None:
                continue
            ratio = None
            measured = ""
            if _usable(ours) and _usable(go) and go is not None:
                a, b = ours["result"]["p99_ms"], go["result"]["p99_ms"]
                ratio = a / b if b else None
                measured = f" (ours {a:.2f} ms, go {b:.2f} ms{_lost_note(ours)})"
            rows.append(
                (
                    f"end-to-end p99 at {rate:,} msg/s ≤ {GOAL_VS_GO}x go-liftbridge, "
                    f"{client}, {size} B{measured}",
                    ratio,
                    GOAL_VS_GO,
                )
            )
    return rows


def table(cases: list[Record]) -> list[str]:
    """The section of RESULTS.md: percentiles per load and client."""
    e2e = _cases(cases)
    if not e2e:
        return []
    out = [
        "",
        "### End-to-end latency at fixed offered load (ms, from each message's scheduled "
        f"send time to its arrival at a reader in another process; chart: `{CHART}`)",
        "",
        "LEADER acks, 1 partition, RF 1, a fresh stream per round. Every message carries "
        "its scheduled send time (wall clock; publisher and reader share the machine); "
        "the reader subtracts it from the time it received the message, so a stall of the "
        "publisher, the servers or the reader all count (no coordinated omission). The "
        "clients of one load run in alternating rounds (A B C D, then D C B A, ...) and "
        "each client's samples are pooled over its rounds, so a stall of the shared "
        "machine falls on every client alike; each round first sends a warm-up at the "
        "same rate that is not timed. **ours subscribe** "
        "= our `Publisher.publish_async`, read with `Client.subscribe` (`async for`); "
        "**ours consumer** = the same publisher, read by one consumer-group member "
        "(`async for` over `Client.consumer`); **go-liftbridge** = `PublishAsync` and "
        "`Subscribe` (two Go processes); **bare** = pre-encoded envelopes published with "
        "nats-py, read with the generated grpc.aio stub (no SDK on either side).",
        "",
        "| load | size | client | p50 | p90 | p99 | p99.9 | max | arrived / expected "
        "| sent at (msg/s) | reader CPU µs/msg (set-up included) | p99 / go p99 |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rate, size in _loads(e2e):
        go = _find(e2e, plan.E2E_GO, rate, size)
        for client in CLIENTS:
            case = _find(e2e, client, rate, size)
            if case is None:
                continue
            head = f"| {rate:,} msg/s | {size} B | {client} |"
            r = case["result"]
            if "error" in r:
                out.append(f"{head} failed |||||||||")
                continue
            if not r.get("arrived"):
                out.append(f"{head} nothing arrived ||||| 0 / {r['count']:,} ||||")
                continue
            ratio = "-"
            if client != plan.E2E_GO and _usable(go) and go is not None:
                ratio = f"{r['p99_ms'] / go['result']['p99_ms']:.2f}x"
            out.append(
                f"{head} {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} | "
                f"{r['p999_ms']:.2f} | {r['max_ms']:.2f} | {r['arrived']:,} / {r['count']:,} "
                f"| {r['achieved_send_rate']:,.0f} | {r['reader_cpu_us_per_msg']:.1f} | {ratio} |"
            )
    return out


def chart(record: Record, path: Path) -> None:
    """Three panels against the offered load: p50, p99 and p99.9 per client."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullLocator

    e2e = [c for c in _cases(record["cases"]) if _usable(c)]
    rates = sorted({c["rate"] for c in e2e})
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, (field, title) in zip(
        axes, (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9")), strict=True
    ):
        values = []
        for client in CLIENTS:
            points = [(c["rate"], c["result"][field]) for c in e2e if c["client"] == client]
            if points:
                ax.plot(*zip(*sorted(points), strict=True), marker="o", label=client)
                values += [v for _, v in points if v > 0]
        ax.set_xscale("log")
        ax.set_yscale("log")
        # Plain numbers, not powers of ten; the in-between ticks labelled too when the
        # figures span less than about a decade and a half (else they would crowd).
        plain = FuncFormatter(lambda v, _pos: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        if values and max(values) < 30 * min(values):
            ax.yaxis.set_minor_formatter(plain)
        if rates:
            ax.set_xticks(rates)
            ax.set_xticklabels([f"{r // 1000}k" for r in rates])
            ax.xaxis.set_minor_locator(NullLocator())  # only the loads measured
        ax.set_xlabel("offered load (msg/s)")
        ax.set_ylabel("ms from scheduled send to arrival")
        ax.set_title(f"End-to-end latency, {title}")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not measured in this run", ha="center", transform=ax.transAxes)
    m = record["meta"]["machine"]
    fig.suptitle(f"End-to-end latency ({record['meta']['mode']}), {m['cpu']}, {m['cores']} cores")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
