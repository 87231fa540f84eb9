"""Evidence from the servers' logs: the lines where a node truncated a partition's log.

Liftbridge v1.9.0 (``server/partition.go``) logs at debug level, before it cuts a log
on a leader change, either ``Truncating log for partition [subject=S, stream=S,
partition=P] to N`` (the last offset of the leader's epoch) or ``... to HW N`` (its own
high watermark, when the leader cannot be asked); both keep offset N and remove every
offset above it. The run's nodes log at debug level for this.
"""

from __future__ import annotations

import calendar
import re
import time

from .history import Truncation

_TRUNCATION = re.compile(
    r"Truncating log for partition \[subject=[^,]*, stream=(?P<stream>[^,]*), "
    r"partition=(?P<partition>\d+)\] to (?:HW )?(?P<kept>-?\d+)"
)


_TIME = re.compile(r'time="(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"')


def line_time(line: str) -> float:
    """The time of a log line (UTC, to the second, as the servers in the containers log
    it), as ``time.time()`` counts; 0.0 when the line has none."""
    match = _TIME.search(line)
    if match is None:
        return 0.0
    return float(calendar.timegm(time.strptime(match[1], "%Y-%m-%d %H:%M:%S")))


def truncations(node: str, log: str, stream: str) -> list[Truncation]:
    """The truncations of ``stream``'s partitions in ``node``'s ``log``; ``to`` is the
    first offset removed, ``t`` when it was logged."""
    found = []
    for line in log.splitlines():
        match = _TRUNCATION.search(line)
        if match and match["stream"] == stream:
            found.append(
                Truncation(
                    node,
                    int(match["partition"]),
                    int(match["kept"]) + 1,
                    line.strip(),
                    line_time(line),
                )
            )
    return found
