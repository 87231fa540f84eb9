"""Offset arithmetic of the ``liftbridge`` source: bounds, splits and streaming offsets.

Pure functions over numbers, so they are tested without Spark or servers. Ranges are
half-open, ``[from_offset, until_offset)``, as in Spark's Kafka source: a partition
whose high watermark is ``hw`` has everything stored up to ``until = hw + 1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from liftbridge_nats.errors import InvalidArgumentError

from ._options import EARLIEST, LATEST, OffsetSpec

__all__ = [
    "OffsetRange",
    "cap_offsets",
    "check_partitions",
    "offsets_from_json",
    "offsets_to_json",
    "plan_ranges",
    "resolve_bounds",
    "split_range",
]


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark task's share of a stream partition: offsets ``[from_offset, until_offset)``.

    Not slotted: Spark's ``InputPartition.__repr__`` reads ``__dict__``.
    """

    stream: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def count(self) -> int:
        """How many offsets the range spans."""
        return max(0, self.until_offset - self.from_offset)


def check_partitions(spec: OffsetSpec, known: Mapping[int, Any], *, option: str) -> None:
    """Refuse a JSON spec naming partitions the stream does not have."""
    unknown = sorted(p for p in spec.partitions if p not in known)
    if unknown:
        raise InvalidArgumentError(
            f"option {option!r} names partition(s) {unknown}, but the stream has partitions "
            f"{sorted(known)}."
        )


def resolve_bounds(
    high_watermarks: Mapping[int, int],
    starting: OffsetSpec,
    ending: OffsetSpec,
    *,
    starting_override: Mapping[int, int] | None = None,
) -> dict[int, tuple[int, int]]:
    """Turn offset specs into concrete ``(from, until)`` bounds per partition.

    ``high_watermarks`` maps each partition to its high watermark (-1 when empty), read
    once at planning time so that the result is a consistent snapshot.
    ``starting_override`` (offsets resolved from a timestamp) replaces ``starting``.
    Earliest means offset 0: the server starts at the oldest retained offset when 0 is
    gone. Ends beyond the high watermark are cut to it, since reading past it would
    wait for messages that may never come.
    """
    check_partitions(starting, high_watermarks, option="startingOffsets")
    check_partitions(ending, high_watermarks, option="endingOffsets")
    bounds: dict[int, tuple[int, int]] = {}
    for partition in sorted(high_watermarks):
        stored_until = max(0, high_watermarks[partition] + 1)
        end = ending.for_partition(partition)
        until = stored_until if end == LATEST else min(end, stored_until)
        if starting_override is not None:
            begin = starting_override[partition]
        else:
            start = starting.for_partition(partition)
            if start == EARLIEST:
                begin = 0
            elif start == LATEST:
                begin = stored_until
            else:
                begin = start
                if end not in (LATEST, EARLIEST) and start > end:
                    raise InvalidArgumentError(
                        f"partition {partition}: option 'startingOffsets' ({start}) is after "
                        f"option 'endingOffsets' ({end}); ending offsets are exclusive."
                    )
        bounds[partition] = (min(begin, until), until)
    return bounds


def split_range(
    stream: str, partition: int, from_offset: int, until_offset: int, max_per_split: int
) -> list[OffsetRange]:
    """Cut ``[from_offset, until_offset)`` into ranges of at most ``max_per_split`` offsets."""
    if max_per_split <= 0:
        raise ValueError("max_per_split must be positive")
    out: list[OffsetRange] = []
    start = from_offset
    while start < until_offset:
        stop = min(start + max_per_split, until_offset)
        out.append(OffsetRange(stream, partition, start, stop))
        start = stop
    return out


def plan_ranges(
    stream: str, bounds: Mapping[int, tuple[int, int]], max_per_split: int
) -> list[OffsetRange]:
    """One or more ranges per non-empty partition, in partition then offset order."""
    out: list[OffsetRange] = []
    for partition in sorted(bounds):
        begin, until = bounds[partition]
        out.extend(split_range(stream, partition, begin, until, max_per_split))
    return out


def cap_offsets(
    start: Mapping[int, int], available: Mapping[int, int], max_rows: int | None
) -> dict[int, int]:
    """The end offsets of a micro-batch: everything available, or at most ``max_rows``.

    The budget is shared fairly (water-filling): partitions with little new data take
    all of it, the rest split what remains evenly, so a busy partition cannot starve
    the others. An end never moves backwards.
    """
    end = {p: max(start.get(p, 0), available[p]) for p in available}
    if max_rows is None:
        return end
    lags = sorted(((end[p] - start.get(p, 0), p) for p in end), key=lambda t: (t[0], t[1]))
    remaining = max_rows
    capped: dict[int, int] = {}
    for i, (lag, partition) in enumerate(lags):
        share = remaining // (len(lags) - i)
        take = min(lag, share)
        capped[partition] = start.get(partition, 0) + take
        remaining -= take
    return capped


def offsets_to_json(stream: str, offsets: Mapping[int, int]) -> dict[str, dict[str, int]]:
    """Spark checkpoint form of per-partition next offsets: ``{"orders": {"0": 12}}``."""
    return {stream: {str(p): int(o) for p, o in sorted(offsets.items())}}


def offsets_from_json(stream: str, doc: Mapping[str, Any]) -> dict[int, int]:
    """Read back :func:`offsets_to_json`; refuses a checkpoint of another stream."""
    if set(doc) != {stream}:
        raise InvalidArgumentError(
            f"the checkpoint holds offsets of stream(s) {sorted(doc)}, but option 'stream' "
            f"is {stream!r}; use a new checkpointLocation for a different stream."
        )
    return {int(p): int(o) for p, o in doc[stream].items()}
