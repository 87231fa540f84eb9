"""The events of a chaos run and their file: one JSON object per line, ``"ev"`` naming
the kind. Times are wall-clock seconds (``time.time()``), the clock the servers' log
lines use too, so that a truncation in a log can be placed among the publishes.

The writer appends as the run goes (a run that is interrupted keeps what it recorded);
:func:`load` turns a file back into typed events for the checker and the report.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any


@dataclass(frozen=True)
class Publish:
    """The outcome of one publish. ``end`` is None when the future never ended;
    ``offset`` is the ack's; ``error`` the error's class name, ``typed`` whether it is
    a LiftbridgeError, ``maybe_stored`` its flag."""

    id: str
    key: str
    partition: int
    start: float
    end: float | None
    offset: int | None = None
    error: str | None = None
    typed: bool = True
    maybe_stored: bool = False

    @property
    def acked(self) -> bool:
        """Whether the publish ended with an ack."""
        return self.end is not None and self.error is None and self.offset is not None


@dataclass(frozen=True)
class Read:
    """One message delivered to a consumer-group member."""

    id: str
    partition: int
    offset: int
    member: str
    t: float


@dataclass(frozen=True)
class Stored:
    """One message of the final read (what the stream holds); ``id`` is "" for a
    message the run did not publish."""

    id: str
    partition: int
    offset: int


@dataclass(frozen=True)
class Truncation:
    """A node's log line saying it truncated a partition's log to offset ``to``."""

    node: str
    partition: int
    to: int
    line: str
    t: float = 0.0


@dataclass(frozen=True)
class Fault:
    """A fault injected (``phase="start"``) or healed (``"heal"``). ``partitions``: those
    whose leader was on the faulted node when it started (all of them when unknown).
    Kind ``"crash"`` is a node found exited by itself (``detail``: its last words) and
    started again; the schedule did not inject it."""

    kind: str
    target: str
    phase: str
    t: float
    partitions: tuple[int, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class Member:
    """A consumer-group member joining or leaving (``phase``), or failing (``"error"``)."""

    member: str
    phase: str
    t: float
    detail: str = ""


@dataclass
class History:
    """Every event of a run, by kind; ``meta`` holds the run's settings."""

    meta: dict[str, Any] = field(default_factory=dict)
    publishes: list[Publish] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    stored: list[Stored] = field(default_factory=list)
    truncations: list[Truncation] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    members: list[Member] = field(default_factory=list)


_KINDS: dict[str, tuple[type[Any], str]] = {
    "publish": (Publish, "publishes"),
    "read": (Read, "reads"),
    "stored": (Stored, "stored"),
    "truncation": (Truncation, "truncations"),
    "fault": (Fault, "faults"),
    "member": (Member, "members"),
}
_NAMES = {cls: name for name, (cls, _) in _KINDS.items()}


class HistoryWriter:
    """Appends events to a JSON-lines file, flushed every ``flush_every`` events so that
    an interrupted run leaves a readable file."""

    def __init__(self, path: Path, *, flush_every: int = 200) -> None:
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._flush_every = flush_every
        self._unflushed = 0

    def meta(self, **values: Any) -> None:
        """Record the run's settings (seed, deadlines, stream...)."""
        self._write({"ev": "meta", **values})

    def record(self, event: Publish | Read | Stored | Truncation | Fault | Member) -> None:
        """Append one event."""
        self._write({"ev": _NAMES[type(event)], **dataclasses.asdict(event)})

    def _write(self, values: dict[str, Any]) -> None:
        self._file.write(json.dumps(values, separators=(",", ":")) + "\n")
        self._unflushed += 1
        if self._unflushed >= self._flush_every:
            self.flush()

    def flush(self) -> None:
        """Write what is buffered to the file."""
        self._file.flush()
        self._unflushed = 0

    def close(self) -> None:
        """Flush and close the file."""
        if not self._file.closed:
            self._file.close()


def load(path: Path) -> History:
    """Read a history file back (a half-written last line, from an interrupted run, is
    skipped)."""
    history = History()
    with path.open(encoding="utf-8") as file:
        for line in file:
            try:
                values = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = values.pop("ev", None)
            if kind == "meta":
                history.meta.update(values)
            elif kind in _KINDS:
                cls, attr = _KINDS[kind]
                if cls is Fault:
                    values["partitions"] = tuple(values.get("partitions", ()))
                getattr(history, attr).append(cls(**values))
    return history
