"""The benchmark's cases of the blocking API: planned beside their peers, judged
against them, and reported with the cost of one call through the loop."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# bench/ is a top-level package of the repository, not part of the installed SDK.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import plan, report  # noqa: E402
from bench.settings import Settings  # noqa: E402

RATES = {
    plan.OURS: 100_000.0,
    plan.SYNC_PUBLISH_ASYNC: 60_000.0,
    plan.SYNC_THREADS_16: 12_000.0,
    plan.SYNC_THREADS_16_ONE_CORE: 16_500.0,
    plan.GO_TASKS_16: 15_000.0,
}


def _record() -> dict[str, Any]:
    cases = []
    for case in plan.build(Settings.quick_preset(Path("."))):
        if case.section == "portal":
            result = {"count": case.count, "rate": 8_000.0, "us_per_call": 125.0}
            result |= {"cpu_us_per_msg": 40.0, "errors": 0}
        elif case.client in RATES and not case.keyed:
            result = {"count": case.count, "rate": RATES[case.client], "errors": 0}
            result["cpu_us_per_msg"] = 10.0
        else:
            continue
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
                "rate": case.rate,
                "result": result,
            }
        )
    return {"meta": {}, "cases": cases}


def test_the_blocking_cases_run_in_the_same_rounds_as_their_peers() -> None:
    cases = plan.build(Settings.quick_preset(Path(".")))
    config = {c.client: c.config for c in cases if c.section == "publish" and not c.keyed}
    for client, peer in plan.SYNC_PEER_OF.items():
        assert config[client] == config[peer]
    [portal] = [c for c in cases if c.section == "portal"]
    assert portal.client == plan.PORTAL_CALL and portal.count <= plan.PORTAL_CALLS


def test_the_report_judges_the_blocking_api_against_its_peers() -> None:
    record = _record()
    targets = report.targets(record)

    def judged(start: str) -> tuple[float, str]:
        [row] = [t for t in targets if t["target"].startswith(start)]
        return row["ratio"], row["status"]

    assert judged("sync publish_async from one thread") == (0.6, "met")
    assert judged("sync publish from 16 threads ≥") == (0.8, "missed")
    assert judged("sync publish from 16 threads, the process held") == (1.1, "met")
    text = "\n".join(report._sync_table(record["cases"]))
    assert "| sync publish, 16 threads | 12,000 |" in text
    assert "| sync publish, 16 threads, one core | 16,500 |" in text
    assert "**125.0 µs** per call" in text
