"""The benchmark suite's quick mode runs end to end.

It proves that every case of the quick plan runs against real servers and yields a
figure; it asserts nothing about speed. The suite starts its own LocalCluster.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# bench/ is a top-level package of the repository, not part of the installed SDK.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import plan  # noqa: E402
from bench.cli import _parser, settings_from  # noqa: E402

ARGS = ["--quick", "--count", "300", "--warmup", "50", "--subscribe-count", "300",
        "--latency-seconds", "0.5", "--e2e-seconds", "0.5"]  # fmt: skip

pytestmark = [
    pytest.mark.slow,
    pytest.mark.processes_only(
        "the benchmark suite starts its own LocalCluster: its figures are of local processes"
    ),
]


def test_quick_mode_produces_every_case(tmp_path: Path) -> None:
    out = tmp_path / "quick"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *ARGS, "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((out / "results.json").read_text())
    assert (out / "RESULTS.md").read_text().startswith("# liftbridge-nats benchmark results")
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "results-fanout.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The machine's speed was probed before every round, printed, kept and reported.
    probes = record["meta"]["speed_probes_ms"]
    assert probes and all(ms > 0 for ms in probes)
    assert proc.stdout.count("machine speed probe:") == len(probes)
    assert "- Machine speed: a fixed pure-Python loop" in (out / "RESULTS.md").read_text()

    # Every peer is part of quick mode: a missing one is a failure, not a skip.
    assert record["meta"]["peers_missing"] == {}
    expected = {
        case.id
        for case in plan.build(settings_from(_parser().parse_args([*ARGS, "--out", str(out)])))
    }
    got = {case["id"]: case["result"] for case in record["cases"]}
    assert set(got) == expected
    clients = {case["client"] for case in record["cases"]}
    for client in (plan.OURS, plan.BARE, plan.RAW, plan.GUFO_BULK, plan.GUFO_UNARY,
                   plan.GO_ASYNC, plan.GO_SYNC, plan.GO_SUB, plan.GUFO_SUB, plan.GRPC_SUB, plan.OURS_UVLOOP,
                   plan.GRPC_SYNC_SUB, *plan.FANOUT_CLIENTS, plan.GO_FANOUT, *plan.SERVICES,
                   *plan.SERVICE_CEILINGS, plan.GO_TASKS_100, *plan.TELEMETRY_CLIENTS,
                   *plan.SUB_METRICS_CLIENTS):  # fmt: skip
        assert client in clients
    # "ours" publishes with opentelemetry-api imported (no SDK); its "no opentelemetry"
    # twin really ran without it, and the report gives both ratios of the same run.
    imported = {
        case["client"]: case["result"].get("opentelemetry_imported")
        for case in record["cases"]
        if case["section"] == "publish" and case["client"] in (plan.OURS, plan.OURS_NO_OTEL)
    }
    assert imported == {plan.OURS: True, plan.OURS_NO_OTEL: False}
    results_md = (out / "RESULTS.md").read_text()
    assert re.search(
        r"opentelemetry-api without an SDK / no opentelemetry .*: throughput \d+\.\d{3}x, "
        r"CPU per message \d+\.\d{3}x",
        results_md,
    ), results_md
    assert re.search(
        r"msgspec Struct through value_serializer / raw bytes: throughput \d+\.\d{3}x, "
        r"CPU per message \d+\.\d{3}x",
        results_md,
    ), results_md
    # The services' pattern and the key+headers messages, for ours, the bare ceilings and
    # the Go peers alike.
    keyed = {case["client"] for case in record["cases"] if case.get("keyed")}
    assert {
        plan.OURS,
        plan.BARE,
        plan.GO_ASYNC,
        plan.GO_TASKS_100,
        *plan.SERVICES,
        *plan.SERVICE_CEILINGS,
    } <= keyed
    client_of = {case["id"]: case["client"] for case in record["cases"]}
    # Its stall is rare where quick mode runs it (100 B, about 15 KiB in flight): at least
    # one of its cases (plain, key+headers) must have measured, or the harness broke it.
    assert any(
        "error" not in got[case_id] for case_id, c in client_of.items() if c == plan.GO_TASKS_100
    )
    for case_id, result in got.items():
        if client_of[case_id] == plan.GO_TASKS_100 and "error" in result:
            # go-liftbridge's Publish from many goroutines can stall (see bench.plan): the
            # run reports that as the peer's failure, in seconds, and goes on.
            assert result["error"].startswith("stalled: no Publish returned"), result["error"]
            continue
        assert "error" not in result, f"{case_id}: {result.get('error')}"
        assert result["errors"] == 0, case_id
        if "p99_ms" in result:
            assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["p999_ms"], case_id
        else:
            assert result["rate"] > 0 and result["count"] > 0, case_id
            assert result["cpu_us_per_msg"] > 0, case_id
        if client_of[case_id] == plan.OURS_PUBLIC_API:  # nats-py's public API only
            assert result["fast_path_sent"] == 0 < result["public_api_sent"], case_id
        elif "public_api_sent" in result:  # the others stay on the fast path
            assert result["public_api_sent"] == 0, case_id
        if case_id.startswith("fanout/"):
            assert result["threads"] > 0, case_id
    assert "[" in proc.stdout and "/" in proc.stdout  # one progress line per case
    assert record["meta"]["versions"]["go-liftbridge"] == "v2.3.0"
