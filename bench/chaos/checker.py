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

Likewise an acked message stored twice is not a failure when the nodes' role changes
(:func:`~bench.chaos.logs.role_changes`, given to :func:`check`) show Liftbridge's
known divergence: a node led the partition (epoch A) while another already led it
(epoch B > A), both subscribed to the partition's NATS subject, so both appended the one
publish; the late node then followed B and truncated to an offset at or above its own copy
(B answered its request for epoch A's end with the start of its own next epoch, which
lay past the late node's log), so it kept its copy and fetched B's entries after it.
Each such duplicate is listed with those four lines; any other fails the run.

And an acked message the group never read is not a failure when a diverged replica
explains it: at its offset the group read another message (stored nowhere, or only at
a higher offset), served by a node that had led the partition and, once it followed a
new leader, kept one message of its old epoch there. Its log shows the follower line,
a truncation keeping the offset before (or at) the acked one, and a leader epoch it
records as starting just after the acked offset, while another node records that epoch
as starting at the acked offset or the one before. Each is listed with those four
lines.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .history import History, Publish, Read, Stored, Truncation
from .logs import RoleChange

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


@dataclass(frozen=True)
class Duplicate:
    """An acked message stored at more than one offset, and the log lines that explain
    it (none when nothing does)."""

    id: str
    partition: int
    offsets: tuple[int, ...]
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class DivergedRead:
    """An acked message the group never read because, at its offset, it read another
    message that a diverged replica held there, with the log lines that show it."""

    id: str
    partition: int
    offset: int
    read_instead: str
    evidence: tuple[str, ...]


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
    explained_duplicates: list[Duplicate] = field(default_factory=list)
    explained_unread: list[DivergedRead] = field(default_factory=list)
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


def check(history: History, *, deadline: float, roles: Sequence[RoleChange] = ()) -> Verdict:
    """Judge ``history`` (see the module documentation); ``deadline`` is the longest a
    publish may take to end, in seconds (the ack timeout plus a margin); ``roles`` the
    nodes' role changes, in each node's log order (without them no duplicate is
    explained)."""
    verdict = Verdict(published=len(history.publishes))
    where = _stored_at(history.stored)
    verdict.stored = len(history.stored)
    read_ids = {r.id for r in history.reads}
    reads_at: dict[tuple[int, int], list[Read]] = defaultdict(list)
    for read in history.reads:
        reads_at[(read.partition, read.offset)].append(read)
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
            duplicate = _duplicate(publish, places, roles)
            if duplicate.evidence:
                verdict.explained_duplicates.append(duplicate)
            else:
                verdict._fail("acked_duplicated", f"{publish.id} stored at {places}")
        elif places[0] != (publish.partition, publish.offset):
            verdict._fail(
                "acked_moved", f"{publish.id} acked at {_at(publish)}, stored at {places[0]}"
            )
        if publish.id not in read_ids:
            diverged = _diverged_read(publish, reads_at, where, roles)
            if diverged is not None:
                verdict.explained_unread.append(diverged)
            else:
                verdict._fail(
                    "acked_unread", f"{publish.id} ({_at(publish)}) never read by the group"
                )
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


def _duplicate(
    publish: Publish, places: list[tuple[int, int]], roles: Sequence[RoleChange]
) -> Duplicate:
    """The duplicate of an acked message, with the role changes that explain it (see
    the module documentation). Only the known shape is explained: two copies in the
    publish's partition, the ack naming the higher one; node A's log shows ``leader
    (epoch a)``, then ``follower (epoch b > a)``, then an epoch truncation keeping an
    offset at or above the lower copy and below the higher one; another node logged
    ``leader (epoch b)`` no later than A's follower line; and the publish began while
    both led (log lines carry whole seconds: one second of slack)."""
    offsets = tuple(sorted(offset for _, offset in places))
    duplicate = Duplicate(publish.id, publish.partition, offsets)
    if (
        len(places) != 2
        or any(partition != publish.partition for partition, _ in places)
        or publish.offset != offsets[1]
    ):
        return duplicate
    low, high = offsets
    start = publish.start
    # The leader, follower and truncation lines only: the shape is three of them in a row.
    mine = [c for c in roles if c.partition == publish.partition and c.kind != "epoch"]
    for node, changes in _by_node(mine).items():
        for led, followed, cut in zip(changes, changes[1:], changes[2:], strict=False):
            if not (
                led.kind == "leader"
                and followed.kind == "follower"
                and cut.kind == "truncated"
                and not cut.hw
                and followed.value > led.value
                and low <= cut.value < high
                and led.t - 1.0 <= start <= followed.t + 1.0
            ):
                continue
            for other in mine:
                if (
                    other.node != node
                    and other.kind == "leader"
                    and other.value == followed.value
                    and other.t <= followed.t
                    and other.t - 1.0 <= start
                ):
                    evidence = tuple(f"{c.node}: {c.line}" for c in (led, other, followed, cut))
                    return Duplicate(publish.id, publish.partition, offsets, evidence)
    return duplicate


def _diverged_read(
    publish: Publish,
    reads_at: dict[tuple[int, int], list[Read]],
    where: dict[str, list[tuple[int, int]]],
    roles: Sequence[RoleChange],
) -> DivergedRead | None:
    """Why the group never read an acked message, when a diverged replica explains it
    (see the module documentation): the group read another message at its offset,
    one stored nowhere or only at a higher offset of the partition; a node N that had
    led the partition logged, after it became a follower, a truncation keeping the
    offset before or at that offset and then a leader epoch starting just after it,
    while another node recorded that epoch as starting at the offset or the one before
    (N kept one message of its old epoch there); and the read came after N's follower
    line (log lines carry whole seconds: one second of slack)."""
    if publish.offset is None:
        return None
    partition, offset = publish.partition, publish.offset
    mine = [c for c in roles if c.partition == partition]
    by_node = _by_node(mine)
    for read in reads_at.get((partition, offset), []):
        if read.id == publish.id or any(
            p != partition or o <= offset for p, o in where.get(read.id, [])
        ):
            continue
        for node, changes in by_node.items():
            led = False
            for i, followed in enumerate(changes):
                led = led or followed.kind == "leader"
                if not (led and followed.kind == "follower" and read.t >= followed.t - 1.0):
                    continue
                after = changes[i + 1 : i + 4]
                cut = next((c for c in after if c.kind == "truncated"), None)
                began = next((c for c in after if c.kind == "epoch"), None)
                if (
                    cut is None
                    or began is None
                    or cut.hw
                    or cut.value not in (offset - 1, offset)
                    or began.value != offset + 1
                ):
                    continue
                for other in mine:
                    if (
                        other.node != node
                        and other.kind == "epoch"
                        and other.epoch == began.epoch
                        and other.value in (offset - 1, offset)
                    ):
                        evidence = tuple(
                            f"{c.node}: {c.line}" for c in (followed, cut, began, other)
                        )
                        return DivergedRead(publish.id, partition, offset, read.id, evidence)
    return None


def _by_node(changes: Iterable[RoleChange]) -> dict[str, list[RoleChange]]:
    """``changes`` by the node that logged them, each node's in its log order."""
    by_node: dict[str, list[RoleChange]] = defaultdict(list)
    for change in changes:
        by_node[change.node].append(change)
    return by_node


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
