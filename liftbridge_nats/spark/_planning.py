"""Offset arithmetic of the ``liftbridge`` source: bounds, splits and streaming offsets.

Pure functions over numbers, so they are tested without Spark or servers. Ranges are
half-open, ``[from_offset, until_offset)``, as in Spark's Kafka source: a partition
whose high watermark is ``hw`` has everything stored up to ``until = hw + 1``.
Offsets of several streams are ``{stream: {partition: offset}}`` (:data:`Offsets`),
the shape Spark checkpoints as JSON.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from pyspark.sql.datasource import InputPartition

from liftbridge_nats import InvalidArgumentError

from ._positions import EARLIEST, LATEST, At, Position, PositionSpec

__all__ = [
    "Lookup",
    "OffsetRange",
    "Offsets",
    "cap_offsets",
    "check_partitions",
    "flatten",
    "lookups_needed",
    "nest",
    "offsets_from_json",
    "offsets_to_json",
    "plan_ranges",
    "resolve_bounds",
    "resolve_starts",
    "split_range",
]

Offsets: TypeAlias = dict[str, dict[int, int]]
"""Per stream, per partition: an offset (a high watermark, a next offset...)."""

Lookup: TypeAlias = tuple[str, int, Position]
"""A position the driver must ask the cluster about: (stream, partition, position),
where the position is :data:`EARLIEST` (the oldest offset stored) or an :class:`At`."""

_K = TypeVar("_K", bound=Hashable)


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


def check_partitions(
    spec: PositionSpec, known: Mapping[str, Mapping[int, Any]], option: str
) -> None:
    """Refuse a JSON spec naming streams or partitions that do not exist."""
    missing = sorted(s for s in spec.streams if s not in known)
    if missing:
        raise InvalidArgumentError(
            f"option {option!r} names stream(s) {missing}, which do not exist; streams read: "
            f"{sorted(known)}."
        )
    for stream, parts in spec.streams.items():
        unknown = sorted(p for p in parts if p not in known[stream])
        if unknown:
            raise InvalidArgumentError(
                f"option {option!r} names partition(s) {unknown} of stream {stream!r}, but it "
                f"has partitions {sorted(known[stream])}."
            )


def _needs_lookup(position: Position) -> bool:
    return position == EARLIEST or isinstance(position, At)


def lookups_needed(
    high_watermarks: Mapping[str, Mapping[int, int]], *specs: PositionSpec
) -> set[Lookup]:
    """The positions of ``specs`` that only the cluster can turn into offsets.

    Empty partitions need none: every position there is offset 0.
    """
    out: set[Lookup] = set()
    for stream, hws in high_watermarks.items():
        for partition, hw in hws.items():
            if hw < 0:
                continue
            for spec in specs:
                position = spec.position(stream, partition)
                if _needs_lookup(position):
                    out.add((stream, partition, position))
    return out


def _offset(
    found: Mapping[Lookup, int], stream: str, partition: int, position: Position, until: int
) -> int:
    """A start or end position as an offset, at most ``until`` (just past the snapshot)."""
    if position == LATEST:
        return until
    if _needs_lookup(position):
        return min(found.get((stream, partition, position), 0), until)
    assert isinstance(position, int)
    return position if position <= until else until


def resolve_starts(
    high_watermarks: Mapping[str, Mapping[int, int]],
    starting: PositionSpec,
    found: Mapping[Lookup, int],
) -> Offsets:
    """Where a read starts in each partition (``found`` answers :func:`lookups_needed`)."""
    check_partitions(starting, high_watermarks, "startingOffsets")
    out: Offsets = {}
    for stream, hws in sorted(high_watermarks.items()):
        out[stream] = {
            p: _offset(found, stream, p, starting.position(stream, p), max(0, hw + 1))
            for p, hw in sorted(hws.items())
        }
    return out


def resolve_bounds(
    high_watermarks: Mapping[str, Mapping[int, int]],
    starting: PositionSpec,
    ending: PositionSpec,
    found: Mapping[Lookup, int],
) -> dict[str, dict[int, tuple[int, int]]]:
    """Concrete ``(from, until)`` bounds per stream and partition.

    ``high_watermarks`` (-1 when empty) were read once at planning time, so the
    result is a consistent snapshot; ``found`` holds the offsets looked up for
    :func:`lookups_needed`. Ends beyond the high watermark are cut to it, since
    reading past it would wait for messages that may never come; a start past the
    end gives an empty range.
    """
    check_partitions(ending, high_watermarks, "endingOffsets")
    starts = resolve_starts(high_watermarks, starting, found)
    bounds: dict[str, dict[int, tuple[int, int]]] = {}
    for stream, hws in sorted(high_watermarks.items()):
        bounds[stream] = {}
        for partition, hw in sorted(hws.items()):
            stored_until = max(0, hw + 1)
            start_pos = starting.position(stream, partition)
            end_pos = ending.position(stream, partition)
            if type(start_pos) is int and type(end_pos) is int and 0 <= end_pos < start_pos:
                raise InvalidArgumentError(
                    f"stream {stream!r} partition {partition}: option 'startingOffsets' "
                    f"({start_pos}) is after option 'endingOffsets' ({end_pos}); ending "
                    "offsets are exclusive."
                )
            until = _offset(found, stream, partition, end_pos, stored_until)
            begin = starts[stream][partition]
            bounds[stream][partition] = (min(begin, until), until)
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
    bounds: Mapping[str, Mapping[int, tuple[int, int]]], max_per_split: int
) -> list[OffsetRange]:
    """One or more ranges per non-empty partition, in stream, partition, offset order."""
    out: list[OffsetRange] = []
    for stream in sorted(bounds):
        for partition in sorted(bounds[stream]):
            begin, until = bounds[stream][partition]
            out.extend(split_range(stream, partition, begin, until, max_per_split))
    return out


def cap_offsets(
    start: Mapping[_K, int], available: Mapping[_K, int], max_rows: int | None
) -> dict[_K, int]:
    """The end offsets of a micro-batch: everything available, or at most ``max_rows``.

    Keys are partitions (of any shape, e.g. ``(stream, partition)``). The budget is
    shared fairly (water-filling): partitions with little new data take all of it,
    the rest split what remains evenly, so a busy partition cannot starve the others.
    An end never moves backwards.
    """
    end = {k: max(start.get(k, 0), available[k]) for k in available}
    if max_rows is None:
        return end
    lags = sorted(((end[k] - start.get(k, 0), k) for k in end), key=lambda t: (t[0], str(t[1])))
    remaining = max_rows
    capped: dict[_K, int] = {}
    for i, (lag, key) in enumerate(lags):
        share = remaining // (len(lags) - i)
        take = min(lag, share)
        capped[key] = start.get(key, 0) + take
        remaining -= take
    return capped


def flatten(offsets: Mapping[str, Mapping[int, int]]) -> dict[tuple[str, int], int]:
    """``{(stream, partition): offset}`` from :data:`Offsets`."""
    return {(s, p): o for s, parts in offsets.items() for p, o in parts.items()}


def nest(flat: Mapping[tuple[str, int], int]) -> Offsets:
    """:data:`Offsets` from ``{(stream, partition): offset}``."""
    out: Offsets = {}
    for (stream, partition), offset in flat.items():
        out.setdefault(stream, {})[partition] = offset
    return out


def offsets_to_json(offsets: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    """Spark checkpoint form of per-partition next offsets: ``{"orders": {"0": 12}}``."""
    return {
        s: {str(p): int(o) for p, o in sorted(parts.items())}
        for s, parts in sorted(offsets.items())
    }


def offsets_from_json(doc: Mapping[str, Any]) -> Offsets:
    """Read back :func:`offsets_to_json`."""
    return {str(s): {int(p): int(o) for p, o in parts.items()} for s, parts in doc.items()}
