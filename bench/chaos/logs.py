"""Evidence from the servers' logs: the lines where a node truncated a partition's log,
and the lines where it took a partition's leadership or followed another leader.

Liftbridge v1.9.0 (``server/partition.go``) logs at debug level, before it cuts a log
on a leader change, either ``Truncating log for partition [subject=S, stream=S,
partition=P] to N`` (the last offset of the leader's epoch) or ``... to HW N`` (its own
high watermark, when the leader cannot be asked); both keep offset N and remove every
offset above it. Each node logs ``Server becoming leader for partition [...], epoch: E``
or ``Server becoming follower ...`` when it applies a leader change from the metadata
log, each at its own pace: the truncation, when one is logged, follows the follower
line. The run's nodes log at debug level for this.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from pathlib import Path

from .history import Truncation

_TRUNCATION = re.compile(
    r"Truncating log for partition \[subject=[^,]*, stream=(?P<stream>[^,]*), "
    r"partition=(?P<partition>\d+)\] to (?:HW )?(?P<kept>-?\d+)"
)


_ROLE = re.compile(
    r"Server becoming (?P<role>leader|follower) for partition \[subject=[^,]*, "
    r"stream=(?P<stream>[^,]*), partition=(?P<partition>\d+)\], epoch: (?P<epoch>\d+)"
)


@dataclass(frozen=True)
class RoleChange:
    """One line of a node's log about a partition of the run's stream, in log order:
    ``kind`` ``"leader"`` or ``"follower"`` (``value`` the leader epoch),
    ``"truncated"`` (``value`` the last offset kept, ``hw`` whether the node fell back
    to its high watermark), or ``"epoch"`` (``value`` the offset the node recorded for
    the start of leader epoch ``epoch``); ``t`` when it was logged, to the second."""

    node: str
    partition: int
    kind: str
    value: int
    line: str
    t: float
    hw: bool = False
    epoch: int = -1


# A node records where each leader epoch begins in its log: a leader at its newest
# offset when it takes the epoch, a follower at the first offset of the epoch.
_EPOCH = re.compile(
    r"Updated log leader epoch\. New: \{epoch:(?P<epoch>\d+), offset:(?P<offset>-?\d+)\}.* "
    r"for log \[subject=[^,]*, stream=(?P<stream>[^,]*), partition=(?P<partition>\d+)\]"
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


def role_changes(node: str, log: str, stream: str) -> list[RoleChange]:
    """The leader, follower, truncation and epoch-start lines of ``stream``'s
    partitions in ``node``'s ``log``, in the order the node logged them."""
    found = []
    for line in log.splitlines():
        match = _EPOCH.search(line)
        if match and match["stream"] == stream:
            found.append(
                RoleChange(
                    node,
                    int(match["partition"]),
                    "epoch",
                    int(match["offset"]),
                    line.strip(),
                    line_time(line),
                    epoch=int(match["epoch"]),
                )
            )
            continue
        match = _ROLE.search(line)
        if match and match["stream"] == stream:
            found.append(
                RoleChange(
                    node,
                    int(match["partition"]),
                    match["role"],
                    int(match["epoch"]),
                    line.strip(),
                    line_time(line),
                )
            )
            continue
        match = _TRUNCATION.search(line)
        if match and match["stream"] == stream:
            found.append(
                RoleChange(
                    node,
                    int(match["partition"]),
                    "truncated",
                    int(match["kept"]),
                    line.strip(),
                    line_time(line),
                    hw=" to HW " in line,
                )
            )
    return found


def role_changes_in(directory: Path, stream: str) -> list[RoleChange]:
    """:func:`role_changes` of every node log a run kept in ``directory``
    (``node-<id>.log``)."""
    return [
        change
        for path in sorted(directory.glob("node-*.log"))
        for change in role_changes(
            path.stem.removeprefix("node-"), path.read_text(errors="replace"), stream
        )
    ]
