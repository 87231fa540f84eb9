"""What a soak samples about processes: memory, file descriptors, CPU, live objects.

Everything is read from ``/proc`` (Linux) or the interpreter itself; a value that cannot
be read is None rather than an error, so a sample never stops the run.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

from bench.settings import REPO_DIR


def rss_kib(pid: int | str = "self") -> int | None:
    """Resident set size of a process (``VmRSS``) in KiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def open_fds(pid: int | str = "self") -> int | None:
    """Number of open file descriptors of a process."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def cpu_seconds() -> float:
    """User plus system CPU time this process has used."""
    times = os.times()
    return times.user + times.system


def release_free_memory() -> dict[str, int | None]:
    """RSS (KiB) before and after a full collection and glibc's ``malloc_trim(0)``.

    What the second figure gives back was free memory the allocator still held (the
    high-water mark of an earlier burst), not live objects: a leak does not shrink here.
    """
    before = rss_kib()
    gc.collect()
    trimmed = None
    with contextlib.suppress(OSError, AttributeError):
        trimmed = int(ctypes.CDLL("libc.so.6").malloc_trim(0))
    return {"rss_before_kib": before, "rss_after_kib": rss_kib(), "malloc_trim": trimmed}


def type_counts() -> Counter[str]:
    """Live objects the garbage collector tracks, by type name."""
    return Counter(type(o).__name__ for o in gc.get_objects())


def type_growth(
    before: Counter[str], after: Counter[str], top: int = 15
) -> list[tuple[str, int, int, int]]:
    """The ``top`` types whose live count grew the most: ``(name, before, after, diff)``."""
    rows = [(n, before[n], after[n], after[n] - before[n]) for n in set(before) | set(after)]
    rows.sort(key=lambda r: r[3], reverse=True)
    return [r for r in rows[:top] if r[3] > 0]


def short_path(filename: str) -> str:
    """A source file's name without the machine's directories (reports are committed)."""
    for marker in ("site-packages/", "/lib/python3."):
        if marker in filename:
            tail = filename.split(marker, 1)[1]
            return tail if marker == "site-packages/" else "python3." + tail
    try:
        return str(Path(filename).resolve().relative_to(REPO_DIR))
    except ValueError:
        return Path(filename).name


class AllocationTracer:
    """tracemalloc snapshots at the end of warm-up and at the end, and their difference.

    Tracing starts only when warm-up ends: it slows every allocation, and the warm-up
    (imports, first connections, buffers reaching their size) is not what is looked for.
    """

    def __init__(self, frames: int = 6) -> None:
        self._frames = frames
        self._first: tracemalloc.Snapshot | None = None

    def start(self) -> None:
        """Start tracing and take the first snapshot."""
        tracemalloc.start(self._frames)
        self._first = tracemalloc.take_snapshot()

    def finish(self, top: int = 20) -> list[dict[str, Any]]:
        """Take the second snapshot, stop tracing, and return the ``top`` growths by line."""
        if self._first is None:
            return []
        second = tracemalloc.take_snapshot()
        tracemalloc.stop()
        keep = (
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
        )
        first = self._first.filter_traces(keep)
        diffs = second.filter_traces(keep).compare_to(first, "traceback")
        grown = [stat for stat in diffs if stat.size_diff > 0]
        grown.sort(key=lambda stat: stat.size_diff, reverse=True)
        out: list[dict[str, Any]] = []
        for stat in grown[:top]:
            out.append(
                {
                    "size_diff_kib": round(stat.size_diff / 1024, 1),
                    "count_diff": stat.count_diff,
                    "size_kib": round(stat.size / 1024, 1),
                    "traceback": [f"{short_path(f.filename)}:{f.lineno}" for f in stat.traceback],
                }
            )
        self._first = None
        return out
