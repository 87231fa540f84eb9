"""The rules a chaos run's history must keep: a pure function over the recorded events.

:func:`check` passes (``Verdict.ok``) only when

- every acked message is stored exactly once, in its partition, at the offset its ack
  gave (the final read is the truth), and the consumer group read it at least once
  (``acked_lost``, ``acked_duplicated``, ``acked_moved``, ``acked_unread``);
- each partition's offsets in the final read run with no gap and no repeat
  (``offset_gap``);
- per-key order is kept: two acked messages of one key whose publishes did not overlap
  in time (the first ended before the second started) are stored in that order
  (``key_order``);
- every publish ended within ``deadline`` seconds of its start (``deadline``), with an
  ack or an error of the LiftbridgeError family (``untyped_error``), and an error that
  said the message was not stored (``maybe_stored`` False) is not contradicted by the
  final read (``stored_after_not_stored``);
- something was acked at all (``nothing_acked``): a run whose every publish failed
  proves nothing about the rules above.

Messages stored after a ``maybe_stored`` error are counted apart, not failed. A lost
acked message is not a failure when the server's known truncation explains it: some
node logged truncating that partition's log at or below the acked offset, after the
message was published (Liftbridge
truncates an uncommitted tail on a leader change, and falls back to its high watermark
when it cannot reach the old leader); such losses are listed with those log lines.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from .history import History, Publish, Stored, Truncation

RULES = (
    "acked_lost",
    "acked_duplicated",
    "acked_moved",
    "acked_unread",
    "offset_gap",
    "key_order",
    "deadline",
    "untyped_error",
    "stored_after_not_stored",
    "nothing_acked",
)
# Examples kept per broken rule (the counts are whole).
_EXAMPLES = 10


@dataclass(frozen=True)
class Loss:
    """An acked message missing from the final read, and the log lines that explain it
    (none when nothing does)."""

    id: str
    partition: int
    offset: int
    evidence: tuple[str, ...] = ()


@dataclass
class Verdict:
    """The outcome of :func:`check`: broken rules with counts and examples, and the
    figures the report needs."""

    violations: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    published: int = 0
    acked: int = 0
    failed: int = 0
    maybe_stored: int = 0
    maybe_stored_and_stored: int = 0
    explained_losses: list[Loss] = field(default_factory=list)
    unexplained_losses: list[Loss] = field(default_factory=list)
    duplicates: int = 0
    stored: int = 0
    errors_by_type: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether every rule held."""
        return not self.violations

    def _fail(self, rule: str, example: str) -> None:
        self.violations[rule] = self.violations.get(rule, 0) + 1
        shown = self.examples.setdefault(rule, [])
        if len(shown) < _EXAMPLES:
            shown.append(example)


def check(history: History, *, deadline: float) -> Verdict:
    """Judge ``history`` (see the module documentation); ``deadline`` is the longest a
    publish may take to end, in seconds (the ack timeout plus a margin)."""
    verdict = Verdict(published=len(history.publishes))
    where = _stored_at(history.stored)
    verdict.stored = len(history.stored)
    read_ids = {r.id for r in history.reads}
    for publish in history.publishes:
        _check_outcome(verdict, publish, deadline, where)
    acked = [p for p in history.publishes if p.acked]
    verdict.acked = len(acked)
    if history.publishes and not acked:
        verdict._fail("nothing_acked", f"none of {len(history.publishes)} publishes was acked")
    lost_ids: set[str] = set()
    for publish in acked:
        places = where.get(publish.id, [])
        if not places:
            loss = _loss(publish, history.truncations)
            lost_ids.add(publish.id)
            if loss.evidence:
                verdict.explained_losses.append(loss)
            else:
                verdict.unexplained_losses.append(loss)
                verdict._fail("acked_lost", f"{publish.id} acked at {_at(publish)}, not stored")
            continue
        if len(places) > 1:
            verdict._fail("acked_duplicated", f"{publish.id} stored at {places}")
        elif places[0] != (publish.partition, publish.offset):
            verdict._fail(
                "acked_moved", f"{publish.id} acked at {_at(publish)}, stored at {places[0]}"
            )
        if publish.id not in read_ids:
            verdict._fail("acked_unread", f"{publish.id} ({_at(publish)}) never read by the group")
    verdict.duplicates = sum(len(places) - 1 for places in where.values() if len(places) > 1)
    _check_offsets(verdict, history.stored)
    _check_key_order(verdict, [p for p in acked if p.id not in lost_ids], where)
    return verdict


def _at(publish: Publish) -> str:
    return f"partition {publish.partition} offset {publish.offset}"


def _stored_at(stored: Iterable[Stored]) -> dict[str, list[tuple[int, int]]]:
    """Message id -> every (partition, offset) the final read found it at."""
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for message in stored:
        if message.id:
            where[message.id].append((message.partition, message.offset))
    return where


def _check_outcome(
    verdict: Verdict, publish: Publish, deadline: float, where: dict[str, list[tuple[int, int]]]
) -> None:
    if publish.end is None:
        verdict._fail("deadline", f"{publish.id} never ended")
    elif publish.end - publish.start > deadline:
        took = publish.end - publish.start
        verdict._fail("deadline", f"{publish.id} ended after {took:.1f} s (> {deadline:.1f} s)")
    if publish.error is None:
        return
    verdict.failed += 1
    verdict.errors_by_type[publish.error] = verdict.errors_by_type.get(publish.error, 0) + 1
    if not publish.typed:
        verdict._fail("untyped_error", f"{publish.id} ended with {publish.error}")
    if publish.maybe_stored:
        verdict.maybe_stored += 1
        if publish.id in where:
            verdict.maybe_stored_and_stored += 1
    elif publish.id in where:
        verdict._fail(
            "stored_after_not_stored",
            f"{publish.id} failed with {publish.error} (maybe_stored False) but is stored "
            f"at {where[publish.id]}",
        )


def _loss(publish: Publish, truncations: Iterable[Truncation]) -> Loss:
    """The loss of an acked message, with the truncations that cut its offset after it
    was published (log lines carry whole seconds: one second of slack)."""
    offset = publish.offset if publish.offset is not None else -1
    evidence = tuple(
        f"{t.node}: {t.line}"
        for t in truncations
        if t.partition == publish.partition and t.to <= offset and t.t >= publish.start - 1.0
    )
    return Loss(publish.id, publish.partition, offset, evidence)


def _check_offsets(verdict: Verdict, stored: Iterable[Stored]) -> None:
    by_partition: dict[int, list[int]] = defaultdict(list)
    for message in stored:
        by_partition[message.partition].append(message.offset)
    for partition, offsets in sorted(by_partition.items()):
        offsets.sort()
        first = offsets[0]
        for index, offset in enumerate(offsets):
            if offset != first + index:
                verdict._fail(
                    "offset_gap",
                    f"partition {partition}: offset {offset} where {first + index} was due",
                )
                break


def _check_key_order(
    verdict: Verdict, acked: list[Publish], where: dict[str, list[tuple[int, int]]]
) -> None:
    """For each key, a message whose publish started after another's ended must be
    stored after it. Sweeps the key's publishes by start time, keeping the highest
    stored offset among those that ended before: O(n log n)."""
    by_key: dict[str, list[tuple[Publish, int]]] = defaultdict(list)
    for publish in acked:
        places = where.get(publish.id)
        if places:
            by_key[publish.key].append((publish, places[0][1]))
    for key, entries in sorted(by_key.items()):
        by_end = sorted(entries, key=lambda e: e[0].end or 0.0)
        highest: tuple[Publish, int] | None = None
        k = 0
        for publish, offset in sorted(entries, key=lambda e: e[0].start):
            while k < len(by_end) and (by_end[k][0].end or 0.0) < publish.start:
                if highest is None or by_end[k][1] > highest[1]:
                    highest = by_end[k]
                k += 1
            if highest is not None and highest[1] > offset:
                verdict._fail(
                    "key_order",
                    f"key {key}: {publish.id} (published after {highest[0].id} was acked) "
                    f"stored at offset {offset}, before it (offset {highest[1]})",
                )
