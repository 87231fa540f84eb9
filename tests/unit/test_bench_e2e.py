"""The benchmark's end-to-end latency cases and its fast_path=False case: planned at
every offered load, stamped and timed from the schedule, judged against go-liftbridge."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
# bench/ is a top-level package of the repository, not part of the installed SDK.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import e2e as e2e_runs  # noqa: E402
from bench import e2e_report, plan, report  # noqa: E402
from bench.clients import e2e  # noqa: E402
from bench.settings import Settings  # noqa: E402


def test_every_load_has_every_reader_of_ours_beside_go_and_bare() -> None:
    assert {c.rate for c in plan.build(Settings.full()) if c.section == "e2e"} == {
        1_000,
        10_000,
        50_000,
    }
    settings = Settings.quick_preset(Path("."))
    cases = [c for c in plan.build(settings) if c.section == "e2e"]
    assert {c.rate for c in cases} == {1_000, 10_000}
    for rate in (1_000, 10_000):
        clients = [c.client for c in cases if c.rate == rate]
        assert clients == [plan.E2E_OURS_SUB, plan.E2E_OURS_CONSUMER, plan.E2E_GO, plan.E2E_BARE]
    one = next(c for c in cases if c.rate == 10_000 and c.client == plan.E2E_OURS_SUB)
    assert one.id == "e2e/ours_subscribe/100B/LEADER/10000mps"
    assert one.count == int(10_000 * settings.e2e_seconds)
    # --only e2e selects them all and nothing else.
    only = plan.build(settings.with_(case_filter=("e2e",)))
    assert only == cases
    assert not any(c.client == plan.E2E_GO for c in plan.build(settings.with_(go=False)))


def test_the_public_api_case_runs_beside_ours_on_p1_rf1_leader() -> None:
    cases = [c for c in plan.build(Settings.full()) if c.client == plan.OURS_PUBLIC_API]
    assert [(c.section, c.ack, c.topology.label, c.size) for c in cases] == [
        ("publish", "LEADER", "p1-rf1", 100)
    ]
    partners = {
        c.client
        for c in plan.build(Settings.full())
        if c.section == "publish" and c.config == cases[0].config
    }
    assert plan.OURS in partners


def test_a_message_carries_its_sequence_and_due_time_from_the_schedule() -> None:
    sched = e2e.WallSchedule(1_000.0, 10, t0=0.0)
    # Message i is due i ms after message 0, on the wall clock too.
    assert [sched.due_ns(i) - sched.due_ns(0) for i in (1, 5)] == [1_000_000, 5_000_000]
    tally = e2e.Tally(total=3, warm=1)
    value = e2e.STAMP.pack(0, 1_000) + b"x" * 84
    assert not tally.see(value, 2_000_000)  # warm-up: counted, not timed
    assert not tally.see(e2e.STAMP.pack(1, 1_000_000) + b"x" * 84, 3_500_000)
    assert tally.see(e2e.STAMP.pack(2, 2_000_000) + b"x" * 84, 2_250_000)
    result = tally.result()
    assert (result["count"], result["errors"]) == (3, 0)
    assert result["samples_us"] == [2_500, 250]


def _e2e(client: str, rate: int, p99: float, arrived: int = 1000) -> dict[str, Any]:
    return {
        "id": f"e2e/{client}/{rate}",
        "section": "e2e",
        "client": client,
        "size": 100,
        "rate": rate,
        "result": {
            "count": 1000,
            "arrived": arrived,
            "errors": 1000 - arrived,
            "achieved_send_rate": float(rate),
            "reader_cpu_us_per_msg": 20.0,
            "p50_ms": p99 / 4,
            "p90_ms": p99 / 2,
            "p99_ms": p99,
            "p999_ms": p99 * 2,
            "max_ms": p99 * 3,
        },
    }


def test_ours_p99_is_judged_against_go_at_each_load() -> None:
    cases = [
        _e2e(plan.E2E_GO, 1_000, 2.0),
        _e2e(plan.E2E_OURS_SUB, 1_000, 2.1),
        _e2e(plan.E2E_OURS_CONSUMER, 1_000, 3.0),
        _e2e(plan.E2E_BARE, 1_000, 1.0),
        _e2e(plan.E2E_GO, 50_000, 4.0),
        _e2e(plan.E2E_OURS_SUB, 50_000, 4.0, arrived=990),
        _e2e(plan.E2E_OURS_CONSUMER, 50_000, 8.0, arrived=0),
    ]
    rows = {r["target"]: r for r in report.targets({"cases": cases})}
    sub_1k = rows[
        "end-to-end p99 at 1,000 msg/s ≤ 1.1x go-liftbridge, ours subscribe, 100 B (ours 2.10 ms, go 2.00 ms)"
    ]
    assert (sub_1k["ratio"], sub_1k["status"]) == (pytest.approx(1.05), "met")
    consumer_1k = rows[
        "end-to-end p99 at 1,000 msg/s ≤ 1.1x go-liftbridge, ours consumer, 100 B (ours 3.00 ms, go 2.00 ms)"
    ]
    assert consumer_1k["status"] == "missed"
    lost = rows[
        "end-to-end p99 at 50,000 msg/s ≤ 1.1x go-liftbridge, ours subscribe, 100 B (ours 4.00 ms, go 4.00 ms, 10 of 1,000 not in by the reader's deadline)"
    ]
    assert lost["status"] == "met"
    nothing = rows["end-to-end p99 at 50,000 msg/s ≤ 1.1x go-liftbridge, ours consumer, 100 B"]
    assert nothing["status"] == "not measured"
    text = "\n".join(e2e_report.table(cases))
    assert (
        "| 1,000 msg/s | 100 B | ours subscribe | 0.53 | 1.05 | 2.10 | 4.20 | 6.30 | 1,000 / 1,000 | 1,000 | 20.0 | 1.05x |"
        in text
    )
    assert "| 50,000 msg/s | 100 B | ours consumer | nothing arrived" in text


def test_the_public_api_ratio_is_stated_in_the_summary() -> None:
    def pub(client: str, rates: list[float]) -> dict[str, Any]:
        return {
            "id": client,
            "section": "publish",
            "client": client,
            "size": 100,
            "ack": "LEADER",
            "partitions": 1,
            "replication": 1,
            "keyed": False,
            "result": {
                "rate": sorted(rates)[1],
                "rates_per_round": rates,
                "cpu_us_per_msg": 5.0,
                "errors": 0,
            },
        }

    cases = [
        pub(plan.OURS, [100_000.0, 90_000.0, 110_000.0]),
        pub(plan.OURS_PUBLIC_API, [40_000.0, 45_000.0, 44_000.0]),
    ]
    ratio, _, _ = report.fast_path_ratio(cases)
    assert ratio == pytest.approx(0.4)  # the median of 0.4, 0.5, 0.4
    record = {"meta": _meta(), "cases": cases}
    assert "`fast_path=False`" in report.markdown(record)
    assert "**0.40x** the fast path's rate (44,000 against 100,000 msg/s" in report.markdown(record)


def _meta() -> dict[str, Any]:
    return {
        "machine": {"cpu": "test cpu", "cores": 2, "memory_gib": 1, "os": "Linux"},
        "versions": {"python": "3"},
        "started": "t0",
        "finished": "t1",
        "mode": "quick",
        "command": "python -m bench --quick",
        "load_before": [0, 0, 0],
        "load_after": [0, 0, 0],
        "settings": {
            "nodes": 1,
            "count": 2000,
            "warmup": 200,
            "sizes": [100],
            "sequential_topologies": ["p1-rf1"],
            "latency_seconds": 1,
            "subscribe_count": 2000,
            "memory_count": 0,
            "go_window": 16384,
        },
    }


def test_a_round_where_nothing_arrived_has_no_p99_and_rounds_alternate() -> None:
    assert e2e_runs._round_p99([]) is None
    assert e2e_runs._round_p99([1_000, 2_000, 3_000]) == 3.0
    cases = plan.build(Settings.quick_preset(Path(".")))[:3]
    assert plan.round_order(cases, 0) == cases
    assert plan.round_order(cases, 1) == cases[::-1]
