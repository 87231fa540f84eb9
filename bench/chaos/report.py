"""The figures of a chaos run, from its history and the checker's verdict: a summary as
JSON (for tools) and as markdown (for people).

- faults injected, by kind;
- messages published, acked, failed, failed with ``maybe_stored`` (and of those, how
  many the final read found), duplicates;
- acked messages lost: those a server truncation explains (each with its log lines)
  and any other (which fails the run);
- acked messages stored twice that two leaders at once explain (each with its log
  lines; any other fails the run);
- acked messages the group never read because a diverged replica served another
  message at their offset (each with its log lines; any other unread one fails the run);
- the longest unavailability: the longest time with no publish acked, between the
  first publish and the last;
- the recovery after each heal: heal to the first ack, and to the first read by the
  group, on every partition the faulted node led when the fault began (the slowest
  partition counts).
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from .checker import Verdict
from .history import History


def _first_after(times: Sequence[float], moment: float) -> float | None:
    """The first of the sorted ``times`` at or after ``moment``."""
    index = bisect.bisect_left(times, moment)
    return times[index] if index < len(times) else None


def recoveries(history: History, partitions: int) -> list[dict[str, Any]]:
    """For each heal: seconds to the first ack and to the first read on the partitions
    its fault touched (None when none came)."""
    ack_times: dict[int, list[float]] = defaultdict(list)
    for publish in history.publishes:
        if publish.acked and publish.end is not None:
            ack_times[publish.partition].append(publish.end)
    read_times: dict[int, list[float]] = defaultdict(list)
    for read in history.reads:
        read_times[read.partition].append(read.t)
    for times in (*ack_times.values(), *read_times.values()):
        times.sort()
    begun = history.meta.get("workload_start", 0.0)
    out = []
    for heal in (f for f in history.faults if f.phase == "heal"):
        touched = heal.partitions or tuple(range(partitions))
        row: dict[str, Any] = {
            "fault": f"{heal.kind}({heal.target})",
            "healed_at": round(heal.t - begun, 1),
            "partitions": list(touched),
        }
        for name, series in (("to_ack", ack_times), ("to_read", read_times)):
            firsts = [_first_after(series[p], heal.t) for p in touched]
            row[name] = (
                None if any(t is None for t in firsts) else round(max(firsts) - heal.t, 2)  # type: ignore[operator,type-var]
            )
        out.append(row)
    return out


def longest_unavailability(history: History) -> dict[str, Any]:
    """The longest time between two acks (or from the first publish to the first ack,
    or from the last ack to the last publish), with when it began (seconds into the
    workload)."""
    starts = [p.start for p in history.publishes]
    if not starts:
        return {"seconds": 0.0, "from": None}
    acks = sorted(p.end for p in history.publishes if p.acked and p.end is not None)
    marks = [min(starts), *acks, max(max(starts), acks[-1] if acks else 0.0)]
    gap, at = max(((b - a, a) for a, b in itertools.pairwise(marks)), default=(0.0, 0.0))
    begun = history.meta.get("workload_start", min(starts))
    return {"seconds": round(gap, 2), "from": round(at - begun, 1)}


def summary(history: History, verdict: Verdict) -> dict[str, Any]:
    """Every figure of the run, as a JSON-ready dict."""
    partitions = int(history.meta.get("partitions", 3))
    injected = Counter(f.kind for f in history.faults if f.phase == "start" and f.kind != "crash")
    crashes = [
        {
            "node": f.target,
            "at": round(f.t - history.meta.get("workload_start", 0.0), 1),
            "last_words": f.detail,
        }
        for f in history.faults
        if f.kind == "crash" and f.phase == "start"
    ]
    return {
        "ok": verdict.ok,
        "run": history.meta,
        "faults": dict(sorted(injected.items())),
        "faults_total": sum(injected.values()),
        "crashes": crashes,
        "member_changes": Counter(m.phase for m in history.members),
        "published": verdict.published,
        "acked": verdict.acked,
        "failed": verdict.failed,
        "errors_by_type": dict(sorted(verdict.errors_by_type.items())),
        "maybe_stored": verdict.maybe_stored,
        "maybe_stored_and_stored": verdict.maybe_stored_and_stored,
        "stored": verdict.stored,
        "reads": len(history.reads),
        "duplicates": verdict.duplicates,
        "acked_lost_explained": [
            {"id": x.id, "partition": x.partition, "offset": x.offset, "evidence": list(x.evidence)}
            for x in verdict.explained_losses
        ],
        "acked_duplicated_explained": [
            {
                "id": x.id,
                "partition": x.partition,
                "offsets": list(x.offsets),
                "evidence": list(x.evidence),
            }
            for x in verdict.explained_duplicates
        ],
        "acked_unread_explained": [
            {
                "id": x.id,
                "partition": x.partition,
                "offset": x.offset,
                "read_instead": x.read_instead,
                "evidence": list(x.evidence),
            }
            for x in verdict.explained_unread
        ],
        "acked_lost_unexplained": [
            {"id": x.id, "partition": x.partition, "offset": x.offset}
            for x in verdict.unexplained_losses
        ],
        "violations": verdict.violations,
        "examples": verdict.examples,
        "longest_unavailability": longest_unavailability(history),
        "recoveries": recoveries(history, partitions),
    }


def markdown(figures: dict[str, Any]) -> str:
    """The summary as a short markdown page."""
    run = figures["run"]
    lines = [
        f"# Chaos run: seed {run.get('seed')}, {run.get('duration')} s",
        "",
        f"**{'PASS' if figures['ok'] else 'FAIL'}**. {run.get('rate')} msg/s offered, "
        f"stream of {run.get('partitions')} partitions (RF 3), "
        f"{run.get('members')} group members; ack timeout {run.get('ack_timeout')} s, "
        f"deadline {run.get('deadline')} s.",
        "",
        f"Machine: {run.get('machine', 'unknown')}; load average (1 min) "
        f"{run.get('load_at_start', '?')} at the start, mean {run.get('load_mean', '?')}, "
        f"max {run.get('load_max', '?')} during the run.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| faults injected | {figures['faults_total']} "
        f"({', '.join(f'{k} {v}' for k, v in figures['faults'].items()) or 'none'}) |",
        f"| nodes that exited by themselves (started again) | {len(figures['crashes'])} |",
        f"| member joins / leaves | {figures['member_changes'].get('join', 0)} / "
        f"{figures['member_changes'].get('leave', 0)} |",
        f"| published | {figures['published']} |",
        f"| acked | {figures['acked']} |",
        f"| failed | {figures['failed']} "
        f"({', '.join(f'{k} {v}' for k, v in figures['errors_by_type'].items()) or 'none'}) |",
        f"| failed, maybe stored (found stored) | {figures['maybe_stored']} "
        f"({figures['maybe_stored_and_stored']}) |",
        f"| acked lost, explained by a server truncation | "
        f"{len(figures['acked_lost_explained'])} |",
        f"| acked lost, unexplained | {len(figures['acked_lost_unexplained'])} |",
        f"| duplicates in the stream | {figures['duplicates']} |",
        f"| acked stored twice, explained by two leaders at once | "
        f"{len(figures.get('acked_duplicated_explained', []))} |",
        f"| acked unread by the group, explained by a diverged replica | "
        f"{len(figures.get('acked_unread_explained', []))} |",
        f"| messages read by the group (with repeats) | {figures['reads']} |",
        f"| longest time without an ack | {figures['longest_unavailability']['seconds']} s "
        f"(from t+{figures['longest_unavailability']['from']} s) |",
    ]
    recovered = [r for r in figures["recoveries"] if r["to_ack"] is not None]
    if recovered:
        worst = max(recovered, key=lambda r: r["to_ack"])
        mean = sum(r["to_ack"] for r in recovered) / len(recovered)
        lines.append(
            f"| recovery after a heal (first ack) | mean {mean:.2f} s, "
            f"worst {worst['to_ack']} s ({worst['fault']}) |"
        )
    if figures["violations"]:
        lines += ["", "## Broken rules", ""]
        for rule, count in figures["violations"].items():
            lines.append(f"- `{rule}`: {count}, e.g. {'; '.join(figures['examples'][rule][:3])}")
    if figures["crashes"]:
        lines += ["", "## Nodes that exited by themselves", ""]
        for crash in figures["crashes"]:
            words = [w.strip()[:200] for w in crash["last_words"].splitlines() if w.strip()]
            lines.append(f"- {crash['node']} at t+{crash['at']} s: `{' / '.join(words[:3])}`")
    if figures["acked_lost_explained"]:
        lines += ["", "## Acked messages a server truncation explains", ""]
        for loss in figures["acked_lost_explained"]:
            lines.append(
                f"- {loss['id']} (partition {loss['partition']}, offset {loss['offset']}): "
                f"{loss['evidence'][0]}"
            )
    explained: tuple[tuple[str, str, Callable[[dict[str, Any]], str]], ...] = (
        (
            "acked_duplicated_explained",
            "Acked messages stored twice that two leaders at once explain",
            lambda x: f"offsets {', '.join(map(str, x['offsets']))}",
        ),
        (
            "acked_unread_explained",
            "Acked messages unread because a diverged replica served another",
            lambda x: f"offset {x['offset']}; the group read {x['read_instead']} there",
        ),
    )
    for key, title, where in explained:
        if figures.get(key):
            lines += ["", f"## {title}", ""]
            for item in figures[key]:
                lines.append(f"- {item['id']} (partition {item['partition']}, {where(item)}):")
                lines += [f"  - {line}" for line in item["evidence"]]
    lines += [
        "",
        "## Recovery after each heal",
        "",
        "| fault | healed at | to first ack | to first read |",
        "|---|---|---|---|",
    ]
    for row in figures["recoveries"]:
        lines.append(
            f"| {row['fault']} | t+{row['healed_at']} s | {_secs(row['to_ack'])} | "
            f"{_secs(row['to_read'])} |"
        )
    return "\n".join(lines) + "\n"


def _secs(value: float | None) -> str:
    return "none" if value is None else f"{value} s"


def page(runs: Sequence[tuple[str, dict[str, Any]]], *, intro: str) -> str:
    """A page of several runs' summaries (``bench/CHAOS.md``): ``intro``, then each
    run under its title, headings one level down."""
    parts = [f"# Randomized fault runs\n\n{intro.strip()}\n"]
    for title, figures in runs:
        body = markdown(figures).split("\n", 1)[1].replace("\n## ", "\n### ")
        parts.append(f"## {title}\n{body}")
    return "\n".join(parts)
