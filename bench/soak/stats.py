"""The soak's arithmetic: warm-up split, least-squares slope, growth, percentiles.

Pure functions of lists of numbers, so that the verdict a soak prints can be checked by
unit tests without servers.

Growth is measured on a straight line fitted (least squares) to the samples taken after
warm-up, not between the first and last samples: one noisy sample at either end would
otherwise decide the verdict. The fitted line passes through the window's mean, so the
growth is the line's rise over the window as a share of the window's mean value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

GROWTH_LIMIT_PERCENT = 5.0
"""The most a series may grow over the post-warm-up window and still pass."""


@dataclass(frozen=True, slots=True)
class Line:
    """A straight line ``y = intercept + slope * t``, and the standard error of its slope
    (infinite when two points leave no freedom to estimate it)."""

    slope: float
    intercept: float
    slope_stderr: float = math.inf

    def at(self, t: float) -> float:
        """The line's value at ``t``."""
        return self.intercept + self.slope * t


@dataclass(frozen=True, slots=True)
class Growth:
    """How a series moved over the window after warm-up."""

    samples: int
    window_start_s: float
    window_end_s: float
    mean: float
    slope_per_min: float
    """The fitted line's slope, in the series' unit per minute."""
    rise: float
    """The fitted line's rise over the window (end value minus start value)."""
    growth_percent: float | None
    """``rise`` as a share of ``mean``; None when the mean is 0 and the line rises."""
    passed: bool
    """True when the growth is at most the limit."""
    significant: bool
    """True when the slope is more than two standard errors from 0: the rise is not
    just the noise of the samples."""

    def as_dict(self) -> dict[str, Any]:
        """A plain dict for the JSON report."""
        return asdict(self)


def fit_line(ts: Sequence[float], ys: Sequence[float]) -> Line:
    """The least-squares line through the points ``(ts[i], ys[i])``.

    Raises ValueError for fewer than two points, different lengths, or all ``ts`` equal
    (no slope can be fitted).
    """
    if len(ts) != len(ys):
        raise ValueError(f"{len(ts)} times but {len(ys)} values")
    n = len(ts)
    if n < 2:
        raise ValueError("a line needs at least two points")
    mean_t = math.fsum(ts) / n
    mean_y = math.fsum(ys) / n
    var_t = math.fsum((t - mean_t) ** 2 for t in ts)
    if var_t == 0:
        raise ValueError("every point has the same time: no slope")
    cov = math.fsum((t - mean_t) * (y - mean_y) for t, y in zip(ts, ys, strict=True))
    slope = cov / var_t
    intercept = mean_y - slope * mean_t
    stderr = math.inf
    if n > 2:
        residuals = math.fsum((y - intercept - slope * t) ** 2 for t, y in zip(ts, ys, strict=True))
        stderr = math.sqrt(residuals / (n - 2) / var_t)
    return Line(slope=slope, intercept=intercept, slope_stderr=stderr)


def warmup_end(duration_s: float, fraction: float) -> float:
    """Seconds from the start at which warm-up ends: ``fraction`` of the run."""
    if not 0 <= fraction < 1:
        raise ValueError(f"the warm-up fraction must be in [0, 1), got {fraction!r}")
    return duration_s * fraction


def after_warmup(
    ts: Sequence[float], ys: Sequence[float], start_s: float
) -> tuple[list[float], list[float]]:
    """The points taken at or after ``start_s``."""
    kept = [(t, y) for t, y in zip(ts, ys, strict=True) if t >= start_s]
    return [t for t, _ in kept], [y for _, y in kept]


def growth(
    ts: Sequence[float],
    ys: Sequence[float],
    start_s: float,
    limit_percent: float = GROWTH_LIMIT_PERCENT,
) -> Growth:
    """Fit a line to the samples from ``start_s`` on and say how much it grows.

    A series that shrinks passes (only growth is a leak). A series whose mean is 0 passes
    only if its line does not rise. Raises ValueError with fewer than two samples after
    warm-up.
    """
    wt, wy = after_warmup(ts, ys, start_s)
    line = fit_line(wt, wy)
    span = wt[-1] - wt[0]
    rise = line.slope * span
    mean = math.fsum(wy) / len(wy)
    percent: float | None
    if mean != 0:
        percent = 100.0 * rise / abs(mean)
        passed = percent <= limit_percent
    else:
        percent = 0.0 if rise <= 0 else None
        passed = rise <= 0
    return Growth(
        samples=len(wt),
        window_start_s=wt[0],
        window_end_s=wt[-1],
        mean=mean,
        slope_per_min=line.slope * 60.0,
        rise=rise,
        growth_percent=percent,
        passed=passed,
        significant=abs(line.slope) > 2 * line.slope_stderr,
    )


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of already sorted values, nearest rank; None if empty."""
    if not sorted_values:
        return None
    if not 0 <= q <= 1:
        raise ValueError(f"a quantile is in [0, 1], got {q!r}")
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def latency_summary(latencies_s: Sequence[float]) -> dict[str, float | None]:
    """p50, p90, p99, p99.9 and max of ack latencies, in milliseconds."""
    ordered = sorted(latencies_s)
    out: dict[str, float | None] = {}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999), ("max", 1.0)):
        value = percentile(ordered, q)
        out[f"{name}_ms"] = None if value is None else round(value * 1000, 3)
    return out
