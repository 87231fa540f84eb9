"""The benchmark report from a small hand-made record: the services' patterns sit beside
their bare ceilings, and the ceilings give context without changing how goals are judged.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
# bench/ is a top-level package of the repository, not part of the installed SDK.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import plan, report  # noqa: E402
from bench.settings import Settings  # noqa: E402

# msg/s and CPU µs/msg per client, the same on every configuration.
FIGURES = {
    plan.OURS: (100_000.0, 5.0),
    plan.BARE: (125_000.0, 4.0),
    plan.GO_ASYNC: (90_000.0, 4.5),
    plan.OURS_BURST: (70_000.0, 8.0),
    plan.BARE_BURST: (80_000.0, 6.0),
    plan.OURS_TASKS_100: (50_000.0, 7.0),
    plan.BARE_TASKS_100: (55_000.0, 6.5),
    plan.OURS_TASKS_1000: (66_000.0, 7.5),
    plan.BARE_TASKS_1000: (60_000.0, 6.0),
    plan.GO_TASKS_100: (40_000.0, 10.0),
}


def _record(slower_config: str = "") -> dict[str, Any]:
    """A record of the quick plan's publish cases of FIGURES' clients; on the case
    whose id ends with ``slower_config`` the bare ceilings reach 0.4x their rate."""
    cases = []
    for case in plan.build(Settings.quick_preset(Path("."))):
        if case.section != "publish" or case.client not in FIGURES:
            continue
        rate, cpu = FIGURES[case.client]
        if (
            case.client in plan.SERVICE_CEILINGS
            and slower_config
            and case.id.endswith(slower_config)
        ):
            rate *= 0.4
        cases.append(
            {
                "id": case.id,
                "section": case.section,
                "client": case.client,
                "size": case.size,
                "ack": case.ack,
                "partitions": case.topology.partitions,
                "replication": case.topology.replication,
                "keyed": case.keyed,
                "count": case.count,
                "result": {"rate": rate, "cpu_us_per_msg": cpu, "errors": 0, "count": 1},
            }
        )
    meta = {
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
    return {"meta": meta, "cases": cases}


def test_the_quick_plan_runs_each_ceiling_beside_its_pattern() -> None:
    cases = plan.build(Settings.quick_preset(Path(".")))
    by_config: dict[str, set[str]] = {}
    for case in cases:
        if case.section == "publish":
            by_config.setdefault(case.config, set()).add(case.client)
    with_patterns = [clients for clients in by_config.values() if plan.OURS_BURST in clients]
    assert len(with_patterns) == 2  # plain and key+headers
    for clients in with_patterns:
        assert {*plan.SERVICES, *plan.SERVICE_CEILINGS, plan.OURS} <= clients
    assert all(
        not (set(plan.SERVICE_CEILINGS) & clients)
        for clients in by_config.values()
        if plan.OURS_BURST not in clients
    )


def test_the_full_plan_runs_the_ceilings_on_the_six_services_configurations() -> None:
    configs = {
        case.config for case in plan.build(Settings.full()) if case.client in plan.SERVICE_CEILINGS
    }
    patterns = {case.config for case in plan.build(Settings.full()) if case.client in plan.SERVICES}
    assert configs == patterns
    assert len(configs) == 6


def test_ceilings_are_context_per_pattern() -> None:
    rows = {row["pattern"]: row for row in report.ceilings(_record())}
    assert list(rows) == list(plan.SERVICES)
    tasks = rows[plan.OURS_TASKS_100]
    assert tasks["ceiling"] == plan.BARE_TASKS_100
    assert tasks["configurations"] == 2
    assert tasks["ceiling_vs_publish_async"] == [pytest.approx(0.55)] * 2
    assert tasks["ours_vs_ceiling"] == [pytest.approx(50 / 55)] * 2


def test_the_worst_configuration_is_shown_with_the_range() -> None:
    text = report.markdown(_record(slower_config="key+headers"))
    # The ceiling at 0.4x on the key+headers configuration: 0.22x of publish_async there,
    # 0.55x on the plain one; ours 0.91x of it on the plain one, 2.27x on key+headers.
    row = (
        "| ours 100 tasks (await publish) | 0.22x (0.22-0.55x) | 0.91x (0.91-2.27x) "
        "| 1.25x (1.25-1.25x) (go Publish, 100 goroutines) |"
    )
    assert row in text, text


def test_the_report_shows_patterns_beside_their_ceilings() -> None:
    record = _record()
    text = report.markdown(record)
    assert "### The services' patterns beside their bare ceilings" in text
    for ceiling in plan.SERVICE_CEILINGS:  # named where the clients are described
        assert ceiling in text
    # ours 100 tasks: 50,000 against its ceiling's 55,000; that ceiling is 0.55x of
    # publish_async's 100,000; CPU 7.0 against 6.5.
    assert "| 100 B LEADER | 100 tasks | 50,000 | 55,000 | 0.91x | 0.55x | 7.0 | 6.5 |" in text
    assert (
        "| 100 B LEADER, key+headers | publish_async | 100,000 | 125,000 | 0.80x | 1.25x "
        "| 5.0 | 4.0 |" in text
    )
    assert (
        "| ours 1000 tasks (await publish) | 0.60x (0.60-0.60x) | 1.10x (1.10-1.10x) | - |" in text
    )
    # The main throughput table keeps to the pipelined clients and the peers.
    header = next(line for line in text.splitlines() if line.startswith("| ack | topology | ours"))
    assert not any(c in header for c in (*plan.SERVICES, *plan.SERVICE_CEILINGS))


def test_the_report_shows_the_pattern_beside_go_in_the_same_pattern() -> None:
    text = report.markdown(_record())
    assert "### The services' patterns beside go-liftbridge in the same pattern" in text
    assert plan.GO_TASKS_100 in text  # named where the clients are described
    # ours 100 tasks: 50,000 against Go's 40,000 from 100 goroutines; CPU 7.0 against 10.0.
    row = "| 100 B LEADER | 100 tasks | 50,000 | 40,000 | 1.25x | 7.0 | 10.0 | 0.70x |"
    assert row in text, text
    assert "| 100 B LEADER, key+headers | 100 tasks | 50,000 | 40,000 |" in text
    # Only the patterns with a Go peer have a row: one per configuration.
    table = text.split("beside go-liftbridge in the same pattern")[1].split("###")[0]
    rows_of = [line for line in table.splitlines() if line.startswith("| 100 B")]
    assert [line.split(" | ")[1] for line in rows_of] == ["100 tasks", "100 tasks"]
    rows = {row["pattern"]: row for row in report.ceilings(_record())}
    assert rows[plan.OURS_TASKS_100]["ours_vs_go_peer"] == [pytest.approx(1.25)] * 2
    assert rows[plan.OURS_BURST]["go_peer"] is None
    assert rows[plan.OURS_BURST]["ours_vs_go_peer"] == []


def test_the_services_patterns_are_judged_against_what_each_pattern_allows() -> None:
    rows = {row["target"]: row for row in report.targets(_record())}

    def row(start: str) -> dict[str, Any]:
        (found,) = [r for name, r in rows.items() if name.startswith(start)]
        return found

    # Each pattern against its own bare ceiling: 70/80, 50/55 and 66/60.
    burst = row(f"{plan.OURS_BURST} (await publish) ≥ 0.95x its pattern's bare ceiling")
    assert (burst["ratio"], burst["status"]) == (0.875, "missed")
    tasks = row(f"{plan.OURS_TASKS_100} (await publish) ≥ 0.95x its pattern's bare ceiling")
    assert tasks["ratio"] == pytest.approx(50 / 55) and tasks["status"] == "missed"
    many = row(f"{plan.OURS_TASKS_1000} (await publish) ≥ 0.95x its pattern's bare ceiling")
    assert many["ratio"] == pytest.approx(1.1) and many["status"] == "met"
    # go-liftbridge in the same pattern where its client runs it, throughput and CPU.
    go = row(f"{plan.OURS_TASKS_100} (await publish) ≥ 1.0x {plan.GO_TASKS_100}")
    assert (go["ratio"], go["status"]) == (1.25, "met")
    cpu = row(f"client CPU per acked message, {plan.OURS_TASKS_100} ≤ 1.0x {plan.GO_TASKS_100}")
    assert (cpu["ratio"], cpu["status"]) == (0.7, "met")
    # Where it stalls, the row says so and is not judged.
    stalls = row(f"{plan.OURS_BURST} (await publish) ≥ 1.0x go-liftbridge in the same pattern")
    assert "stalls" in stalls["target"] and stalls["status"] == "not measured"
    assert all(t["status"] in ("met", "missed", "not measured") for t in rows.values())


def test_without_ceilings_the_services_goals_are_not_judged() -> None:
    record = _record()
    context = (*plan.SERVICE_CEILINGS, *plan.GO_PEER_OF.values())
    without = {
        "meta": record["meta"],
        "cases": [c for c in record["cases"] if c["client"] not in context],
    }
    names = [row["target"] for row in report.targets(without)]
    assert not [n for n in names if "bare ceiling" in n or plan.GO_TASKS_100 in n]
    assert report.ceilings(without) == []


def test_the_chart_draws_the_ceilings(tmp_path: Path) -> None:
    path = tmp_path / "results.png"
    report.chart(_record(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_many_partition_goals_are_judged() -> None:
    def fan(client: str, partitions: int, rate: float, threads: int) -> dict[str, Any]:
        return {
            "id": f"fanout-{client}-{partitions}",
            "section": "fanout",
            "client": client,
            "size": 100,
            "partitions": partitions,
            "result": {"rate": rate, "threads": threads, "errors": 0, "count": 1},
        }

    cases = [
        fan(plan.FANOUT_TASKS, 1, 100_000.0, 8),
        fan(plan.FANOUT_TASKS, 256, 90_000.0, 8),
        fan(plan.FANOUT_CONSUMER, 1, 100_000.0, 8),
        fan(plan.FANOUT_CONSUMER, 256, 50_000.0, 20),
    ]
    rows = {row["target"]: row for row in report.targets({"cases": cases})}
    tasks_rate = rows[f"{plan.FANOUT_TASKS}: msg/s over 256 partitions ≥ 0.8x over 1"]
    assert (tasks_rate["ratio"], tasks_rate["status"]) == (0.9, "met")
    consumer_rate = rows[f"{plan.FANOUT_CONSUMER}: msg/s over 256 partitions ≥ 0.8x over 1"]
    assert (consumer_rate["ratio"], consumer_rate["status"]) == (0.5, "missed")
    consumer_threads = rows[
        f"{plan.FANOUT_CONSUMER}: process threads at 256 partitions ≤ 1.25x at 1 (20 vs 8)"
    ]
    assert consumer_threads["status"] == "missed"


def test_the_machine_section_shows_how_far_the_speed_moved() -> None:
    record = _record()
    assert "Machine speed" not in report.markdown(record)  # records from before the probes
    record["meta"]["speed_probes_ms"] = [210.0, 350.5, 222.0, 228.0]
    text = report.markdown(record)
    assert (
        "- Machine speed: a fixed pure-Python loop (3,000,000 additions), timed before each "
        "of the 4 rounds of the publish, subscribe and fan-out cases, took 210-350 ms "
        "(median 225)" in text
    )


def test_the_machine_section_names_servers_restarted_during_the_run() -> None:
    record = _record()
    assert "Restarted during the run" not in report.markdown(record)
    record["meta"]["server_restarts"] = [
        {"after": "publish/go_PublishAsync/1024B/ALL/p3-rf3", "servers": ["n1"]}
    ]
    assert (
        "- Restarted during the run: n1, found stopped after case "
        "`publish/go_PublishAsync/1024B/ALL/p3-rf3` failed" in report.markdown(record)
    )


def test_the_speed_probe_times_the_loop() -> None:
    from bench import machine

    probes = [machine.speed_probe() for _ in range(3)]
    # Three million additions take CPython tens of milliseconds at the very least; a
    # probe that skipped its loop would report nothing like that.
    assert all(10 < ms < 60_000 for ms in probes)


def _with_rounds(record: dict[str, Any], client: str, rates: list[float]) -> None:
    for case in record["cases"]:
        if case["client"] == client:
            result = case["result"]
            result["rates_per_round"] = rates
            result["cpu_us_per_msg_per_round"] = [result["cpu_us_per_msg"]] * len(rates)
            result["rate"] = sorted(rates)[len(rates) // 2]


def test_a_ratio_of_clients_run_in_the_same_rounds_is_the_median_of_the_rounds_ratios() -> None:
    record = _record()
    # The machine's speed moves between rounds, both clients with it: ours is at 0.98x
    # its ceiling in four rounds of five, while their median rounds (80k, 95k) are 0.84x
    # apart.
    _with_rounds(record, plan.OURS_BURST, [98_000.0, 58_800.0, 117_600.0, 68_600.0, 80_000.0])
    _with_rounds(record, plan.BARE_BURST, [100_000.0, 60_000.0, 120_000.0, 70_000.0, 95_000.0])
    rows = {row["target"]: row for row in report.targets(record)}
    (burst,) = [
        r
        for name, r in rows.items()
        if name.startswith(f"{plan.OURS_BURST} (await publish) ≥ 0.95x its pattern's")
    ]
    assert burst["ratio"] == pytest.approx(0.98) and burst["status"] == "met"
    row = {r["pattern"]: r for r in report.ceilings(record)}[plan.OURS_BURST]
    assert row["ours_vs_ceiling"] == [pytest.approx(0.98)] * 2
    # With one figure each (no rounds), the ratio of the figures.
    assert report._rate_ratio(record["cases"], plan.OURS, plan.BARE) == pytest.approx(0.8)


def test_the_services_patterns_run_in_rounds_of_their_own() -> None:
    assert {*plan.SERVICES, *plan.SERVICE_CEILINGS, plan.GO_TASKS_100} == plan.SERVICES_GROUP
    assert plan.OURS not in plan.SERVICES_GROUP and plan.BARE not in plan.SERVICES_GROUP
    full = Settings.full()
    assert full.services_rounds > full.rounds
    assert Settings.quick_preset(Path(".")).services_rounds == 1
    # What the runner runs together, on every configuration of the full plan that has the
    # patterns: the group in its rounds, everything else of the configuration in the others.
    cases = plan.build(full)
    grouped = 0
    for config in {c.config for c in cases if c.client == plan.OURS_TASKS_100}:
        of_config = [c for c in cases if c.section == "publish" and c.config == config]
        services, services_rounds = plan.round_partners(
            next(c for c in of_config if c.client == plan.OURS_TASKS_100), cases, full
        )
        others, other_rounds = plan.round_partners(
            next(c for c in of_config if c.client == plan.OURS), cases, full
        )
        assert {c.client for c in services} == {*plan.SERVICES_GROUP} & {
            c.client for c in of_config
        }
        assert plan.GO_TASKS_100 in {c.client for c in services}
        assert not {c.client for c in others} & plan.SERVICES_GROUP
        assert sorted(c.id for c in [*services, *others]) == sorted(c.id for c in of_config)
        assert (services_rounds, other_rounds) == (full.services_rounds, full.rounds)
        grouped += 1
    assert grouped == 6


def test_rounds_pair_up_by_number_when_a_client_failed_a_round() -> None:
    # ours failed round 1, the ceiling round 3: rounds 0, 2 and 4 pair up.
    ours = {"rate": 90.0, "rates_per_round": [90.0, 45.0, 99.0], "round_numbers": [0, 2, 4]}
    ceiling = {"rate": 100.0, "rates_per_round": [100.0, 50.0, 200.0, 110.0]}
    ceiling["round_numbers"] = [0, 1, 2, 4]
    ratio = report._paired({"result": ours}, {"result": ceiling}, "rate")
    assert ratio == pytest.approx(0.9)
    # Without round numbers (results of older runs), rounds pair by position.
    del ours["round_numbers"], ceiling["round_numbers"]
    ceiling["rates_per_round"] = [100.0, 50.0, 110.0]
    assert report._paired({"result": ours}, {"result": ceiling}, "rate") == pytest.approx(0.9)
