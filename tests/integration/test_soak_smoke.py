"""A six-second soak against real servers produces the whole report.

It proves that the soak's workload runs through the public API (publisher, subscription,
consumer group), that every series is sampled once per interval and analysed, and that
the JSON, the chart and the markdown summary are written. It asserts nothing about speed
or growth: six seconds say nothing about leaks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
# bench/ is a top-level package of the repository, not part of the installed SDK.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.soak import report, runner  # noqa: E402
from bench.soak.workload import Load  # noqa: E402
from liftbridge_nats import AckPolicy  # noqa: E402

pytestmark = pytest.mark.slow


async def test_a_short_soak_reports_every_series(liftbridge_cluster: Any, tmp_path: Path) -> None:
    settings = runner.SoakSettings(
        duration=6.0,
        interval=1.0,
        load=Load(rate=1000, publishers=4, partitions=2, ack_policy=AckPolicy.ALL),
        drain_timeout=5.0,
    )
    lines: list[str] = []
    record = await runner.run(
        settings,
        brokers=liftbridge_cluster.brokers,
        nats_url=liftbridge_cluster.nats_url,
        echo=lines.append,
    )
    report.write(record, tmp_path / "soak", tmp_path / "SOAK.md")

    samples = record["samples"]
    assert [s["t"] for s in samples] == pytest.approx(range(1, 7), abs=0.5)
    assert len(lines) == 1 + len(samples)  # a header, then one progress line per interval
    for name in runner.SERIES:
        assert all(s[name] is not None for s in samples), name
        g = record["growth"][name]
        assert "error" not in g, (name, g)
        assert g["samples"] == 5  # t = 2..6: warm-up is the first 20% (1.2 s)
    # The load went through end to end: every message acked, read and consumed.
    totals = record["totals"]
    # Failures first: they say why a message sent was not acked.
    assert totals["failed"] == {} and totals["reader_errors"] == {}, totals
    assert totals["sent"] == totals["acked"] > 4000, totals
    assert totals["drained"] and totals["offset_gaps"] == 0
    assert totals["consumed"] == totals["acked"]
    assert totals["commits"] >= 3
    assert samples[-1]["rss_mib"] > 0 and samples[-1]["fds"] > 0 and samples[-1]["tasks"] > 0

    saved = json.loads((tmp_path / "soak" / "soak.json").read_text())
    assert saved["growth"] == json.loads(json.dumps(record["growth"]))
    assert (tmp_path / "soak" / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = (tmp_path / "SOAK.md").read_text()
    assert summary.startswith("# liftbridge-nats soak")
    for name in runner.SERIES:
        assert f"| `{name}` |" in summary
    assert "![soak chart](soak/soak.png)" in summary
