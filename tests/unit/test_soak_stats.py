"""The soak's verdict arithmetic: least-squares slope, growth after warm-up, percentiles.

A soak passes or fails on these numbers, so they are checked on series whose answer is
known by hand: exact lines, a series whose only growth is in its warm-up, noise around a
flat level, and a level of zero.
"""

from __future__ import annotations

import math
import random
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# bench/ is a top-level package of the repository, not part of the installed SDK.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.soak import probes, report, stats  # noqa: E402


def test_fit_line_recovers_an_exact_line() -> None:
    ts = [0.0, 5.0, 10.0, 15.0, 20.0]
    line = stats.fit_line(ts, [3.0 + 0.5 * t for t in ts])
    assert line.slope == pytest.approx(0.5)
    assert line.intercept == pytest.approx(3.0)
    assert line.slope_stderr == pytest.approx(0.0, abs=1e-12)
    assert line.at(40.0) == pytest.approx(23.0)


def test_fit_line_is_least_squares_not_end_to_end() -> None:
    # The ends say "no change"; the points between rise: least squares sees the middle.
    line = stats.fit_line([0, 1, 2, 3], [0.0, 1.0, 1.0, 0.0])
    assert line.slope == pytest.approx(0.0)
    line = stats.fit_line([0, 1, 2], [1.0, 2.0, 6.0])
    # slope = cov / var = ((-1)(-2) + 0 + (1)(3)) / 2 = 2.5
    assert line.slope == pytest.approx(2.5)


@pytest.mark.parametrize(
    ("ts", "ys"), [([], []), ([1.0], [1.0]), ([1.0, 1.0], [1.0, 2.0]), ([1.0, 2.0], [1.0])]
)
def test_fit_line_refuses_what_has_no_slope(ts: list[float], ys: list[float]) -> None:
    with pytest.raises(ValueError):
        stats.fit_line(ts, ys)


def test_growth_is_the_rise_over_the_window_as_a_share_of_its_mean() -> None:
    ts = [float(t) for t in range(0, 101, 10)]
    ys = [100.0 + 0.1 * t for t in ts]  # 100 -> 110 over the run
    g = stats.growth(ts, ys, start_s=0.0)
    assert g.rise == pytest.approx(10.0)
    assert g.mean == pytest.approx(105.0)
    assert g.growth_percent == pytest.approx(100 * 10 / 105)
    assert g.slope_per_min == pytest.approx(6.0)
    assert not g.passed and g.significant


def test_growth_leaves_warm_up_out() -> None:
    # Memory climbs during warm-up then stays put: the soak passes.
    ts = [float(t) for t in range(0, 60)]
    ys = [50.0 + 2 * t if t < 12 else 74.0 for t in ts]
    assert not stats.growth(ts, ys, start_s=0.0).passed
    after = stats.growth(ts, ys, start_s=stats.warmup_end(60.0, 0.2))
    assert after.window_start_s == 12.0 and after.samples == 48
    assert after.growth_percent == pytest.approx(0.0, abs=1e-9)
    assert after.passed


def test_growth_just_under_and_just_over_the_limit() -> None:
    ts = [0.0, 50.0, 100.0]
    under = stats.growth(ts, [97.6, 100.0, 102.4], 0.0)  # rise 4.8 on a mean of 100
    over = stats.growth(ts, [97.4, 100.0, 102.6], 0.0)  # rise 5.2
    assert under.growth_percent == pytest.approx(4.8) and under.passed
    assert over.growth_percent == pytest.approx(5.2) and not over.passed


def test_noise_around_a_flat_level_is_flat_and_not_significant() -> None:
    rng = random.Random(7)
    ts = [float(t) for t in range(0, 1800, 5)]
    g = stats.growth(ts, [200.0 + rng.gauss(0, 2) for _ in ts], 360.0)
    assert g.passed
    assert abs(g.growth_percent or 0) < 1
    assert not g.significant


def test_shrinking_passes_and_zero_levels_are_judged_by_their_rise() -> None:
    ts = [0.0, 1.0, 2.0, 3.0]
    assert stats.growth(ts, [40.0, 30.0, 20.0, 10.0], 0.0).passed
    flat_zero = stats.growth(ts, [0.0] * 4, 0.0)
    assert flat_zero.growth_percent == 0.0 and flat_zero.passed
    # A mean of 0 with a rising line (-1, -1, 1, 1): no percentage, and a failure.
    rising = stats.growth(ts, [-1.0, -1.0, 1.0, 1.0], 0.0)
    assert rising.growth_percent is None and not rising.passed


def test_growth_needs_two_samples_after_warm_up() -> None:
    with pytest.raises(ValueError):
        stats.growth([0.0, 1.0, 2.0], [1.0, 1.0, 1.0], start_s=2.0)


@pytest.mark.parametrize("fraction", [-0.1, 1.0])
def test_warmup_fraction_is_checked(fraction: float) -> None:
    with pytest.raises(ValueError):
        stats.warmup_end(100.0, fraction)


def test_percentiles_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 1001)]  # 1..1000
    assert stats.percentile(values, 0.5) == 500.0
    assert stats.percentile(values, 0.99) == 990.0
    assert stats.percentile(values, 1.0) == 1000.0
    assert stats.percentile(values, 0.0) == 1.0
    assert stats.percentile([], 0.5) is None
    summary = stats.latency_summary([v / 1000 for v in reversed(values)])  # seconds
    assert summary["p50_ms"] == 500.0 and summary["p999_ms"] == 999.0
    assert summary["max_ms"] == 1000.0
    assert stats.latency_summary([]) == {
        "p50_ms": None, "p90_ms": None, "p99_ms": None, "p999_ms": None, "max_ms": None
    }  # fmt: skip


def test_verdict_words() -> None:
    ts = [float(t) for t in range(10)]
    grows = stats.growth(ts, [100.0 + t for t in ts], 0.0).as_dict()
    shrinks = stats.growth(ts, [100.0 - t for t in ts], 0.0).as_dict()
    flat = stats.growth(ts, [100.0] * 10, 0.0).as_dict()
    noisy = stats.growth([0.0, 1.0, 2.0], [90.0, 120.0, 100.0], 0.0).as_dict()
    assert [report.verdict(g) for g in (grows, shrinks, flat, noisy)] == [
        "grows", "shrinks", "flat", "noise (rise not significant)"
    ]  # fmt: skip
    assert math.isclose(noisy["growth_percent"], 10 / 310 * 300)
    assert report.verdict({"error": "absent"}) == "not measured"


def test_type_growth_lists_only_what_grew() -> None:
    before = Counter({"dict": 10, "Future": 5, "list": 7})
    after = Counter({"dict": 12, "Future": 50, "list": 3, "Ack": 1})
    assert probes.type_growth(before, after) == [
        ("Future", 5, 50, 45), ("dict", 10, 12, 2), ("Ack", 0, 1, 1)
    ]  # fmt: skip


def test_short_path_drops_the_machines_directories() -> None:
    assert probes.short_path("/x/venv/lib/python3.11/site-packages/nats/aio/client.py") == (
        "nats/aio/client.py"
    )
    assert probes.short_path("/usr/lib/python3.11/asyncio/events.py") == (
        "python3.11/asyncio/events.py"
    )
    assert probes.short_path(str(REPO / "bench" / "soak" / "stats.py")) == "bench/soak/stats.py"
