"""Where a read starts and ends in each partition: the offset and timestamp options.

``startingOffsets`` / ``endingOffsets`` take ``earliest``, ``latest`` or Kafka-style
JSON (``{"orders": {"0": 12, "1": -2}}``); ``startingTimestamp`` / ``endingTimestamp``
one time for every partition; ``startingOffsetsByTimestamp`` /
``endingOffsetsByTimestamp`` JSON of times per partition
(``{"orders": {"0": 1700000000000}}``). Each parses into a :class:`PositionSpec`,
which answers, per stream and partition, an offset, :data:`EARLIEST`, :data:`LATEST`
or an :class:`At` time; the driver turns those into offsets (see ``_lookup``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from liftbridge_nats import InvalidArgumentError

__all__ = [
    "EARLIEST",
    "LATEST",
    "At",
    "Position",
    "PositionSpec",
    "parse_offsets",
    "parse_timestamp",
    "parse_timestamps",
]

EARLIEST = -2
"""In an offsets spec: the oldest offset still stored (as in Spark's Kafka source)."""
LATEST = -1
"""In an offsets spec: just after the high watermark."""
_NAMES = {EARLIEST: "earliest", LATEST: "latest"}


@dataclass(frozen=True, slots=True)
class At:
    """A position given as a time: the first offset stored at or after ``ms``."""

    ms: int


Position: TypeAlias = int | At
"""An offset >= 0, :data:`EARLIEST`, :data:`LATEST` or an :class:`At` time."""

Selected: TypeAlias = Callable[[str], bool]
"""Tells whether the query reads a stream of that name."""


@dataclass(frozen=True, slots=True)
class PositionSpec:
    """Where to start or end, per stream and partition.

    ``streams`` holds what a JSON option named (plain dicts, read-only by convention:
    settings travel to executors by pickle); every other partition gets ``default``.
    """

    default: Position
    streams: Mapping[str, Mapping[int, Position]] = field(default_factory=dict)

    def position(self, stream: str, partition: int) -> Position:
        """The position asked for ``partition`` of ``stream``."""
        return self.streams.get(stream, {}).get(partition, self.default)

    @property
    def uses_time(self) -> bool:
        """Whether some partition's position is a time (needs a look-up)."""
        return isinstance(self.default, At) or any(
            isinstance(p, At) for parts in self.streams.values() for p in parts.values()
        )


def _example(streams: Collection[str], value: str) -> str:
    name = next(iter(streams), "orders")
    return f'{{"{name}":{{"0":{value}}}}}'


def _json_doc(
    raw: str, option: str, streams: Collection[str], value: str
) -> dict[str, dict[str, object]]:
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(
            f"option {option!r} is not valid JSON ({exc.msg}); expected e.g. "
            f"{_example(streams, value)}."
        ) from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise InvalidArgumentError(
            f"option {option!r} must be a JSON object of stream -> {{partition: ...}}, "
            f"e.g. {_example(streams, value)}."
        )
    return doc


def _partition(key: str, option: str) -> int:
    try:
        partition = int(key)
    except ValueError:
        partition = -1
    if partition < 0 or str(partition) != str(key).strip():
        raise InvalidArgumentError(
            f"option {option!r} has partition {key!r}; partitions are non-negative integers "
            "given as JSON strings."
        )
    return partition


def _per_partition(
    doc: Mapping[str, Mapping[str, object]],
    option: str,
    position: Callable[[object, str, int], Position],
) -> dict[str, Mapping[int, Position]]:
    """``{stream: {"0": value}}`` as positions, each value checked by ``position``."""
    out: dict[str, Mapping[int, Position]] = {}
    for stream, parts in doc.items():
        found: dict[int, Position] = {}
        for key, value in parts.items():
            partition = _partition(key, option)
            found[partition] = position(value, stream, partition)
        out[stream] = found
    return out


def _check_streams(doc: Mapping[str, object], option: str, selected: Selected) -> None:
    """Refuse JSON naming streams the query does not read."""
    others = sorted(k for k in doc if not selected(k))
    if others:
        raise InvalidArgumentError(
            f"option {option!r} names stream(s) {others} that the query does not read; "
            "name only streams given by 'stream', 'streams' or matched by 'streamPattern'."
        )


def parse_offsets(
    raw: str,
    *,
    option: str,
    selected: Selected,
    example_streams: Collection[str],
    default: int,
    allowed: tuple[int, ...],
) -> PositionSpec:
    """Parse ``earliest``, ``latest`` or Kafka-style JSON (``{"orders":{"0":12,"1":-2}}``).

    ``selected(name) -> bool`` tells which streams the query reads; ``default`` is what
    partitions absent from a JSON spec get; ``allowed`` lists which of ``EARLIEST`` /
    ``LATEST`` the option accepts (``endingOffsets`` refuses ``earliest``).
    """
    word = raw.strip().lower()
    accepted = " or ".join(repr(_NAMES[a]) for a in allowed)
    if word in ("earliest", "latest"):
        special = EARLIEST if word == "earliest" else LATEST
        if special not in allowed:
            raise InvalidArgumentError(
                f"option {option!r} cannot be {word!r} here; use {accepted} or JSON offsets."
            )
        return PositionSpec(default=special)
    if not raw.strip().startswith("{"):
        raise InvalidArgumentError(
            f"option {option!r} is {raw!r}: use {accepted} or JSON offsets such as "
            f"{_example(example_streams, '12')}."
        )

    def offset(value: object, stream: str, partition: int) -> Position:
        if type(value) is not int or value < EARLIEST:
            raise InvalidArgumentError(
                f"option {option!r} has {value!r} for {stream!r} partition {partition}; "
                "use an offset >= 0, -2 for earliest or -1 for latest."
            )
        if value in _NAMES and value not in allowed:
            raise InvalidArgumentError(
                f"option {option!r} cannot use {value} ({_NAMES[value]}) for {stream!r} "
                f"partition {partition}; use {accepted} or an offset >= 0."
            )
        return value

    doc = _json_doc(raw, option, example_streams, "12")
    _check_streams(doc, option, selected)
    streams = _per_partition(doc, option, offset)
    return PositionSpec(default=default, streams=streams)


def parse_timestamp(raw: str, *, option: str) -> At:
    """Milliseconds since the Unix epoch, as one integer."""
    try:
        ms = int(raw.strip())
    except ValueError:
        ms = -1
    if ms < 0:
        raise InvalidArgumentError(
            f"option {option!r} must be milliseconds since the Unix epoch (an integer >= 0), "
            f"not {raw!r}."
        )
    return At(ms)


def parse_timestamps(
    raw: str, *, option: str, selected: Selected, example_streams: Collection[str], default: int
) -> PositionSpec:
    """JSON of times per partition: ``{"orders": {"0": 1700000000000}}``.

    Partitions the JSON does not name get ``default`` (``EARLIEST`` for a start,
    ``LATEST`` for an end).
    """

    def time(value: object, stream: str, partition: int) -> Position:
        if type(value) is not int or value < 0:
            raise InvalidArgumentError(
                f"option {option!r} has {value!r} for {stream!r} partition {partition}; "
                "use milliseconds since the Unix epoch (an integer >= 0)."
            )
        return At(value)

    doc = _json_doc(raw, option, example_streams, "1700000000000")
    _check_streams(doc, option, selected)
    streams = _per_partition(doc, option, time)
    return PositionSpec(default=default, streams=streams)
