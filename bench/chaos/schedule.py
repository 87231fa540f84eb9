"""The seeded fault schedule of a chaos run, and the rules it keeps.

A schedule is a list of :class:`Step`: when a fault starts (seconds from the start of
the workload), what it is, on which node(s), and how long it is held before it is
healed. The same seed and settings give the same schedule. The rules, for a 3-node
cluster:

- at most two faults at once, and mostly one (a second starts only when the draw says
  so and the pair keeps the rules below);
- at most one node is down (killed, paused, isolated, cut from NATS or with a full
  disk) at any time, and at most one pair of nodes is partitioned; a partition may
  overlap a node fault only when the downed node is one of the pair, so the two other
  nodes always form a connected, working majority;
- ``nats_restart`` (every NATS server killed and started again: a short outage for
  everyone, no node loses data) and ``kill`` are always alone;
- ``kill`` never hits the node whose data directory is a tmpfs (a tmpfs is emptied
  when its container stops, which would be a lost disk, not a crash), and
  ``full_disk`` only hits that node;
- the last ``quiet_tail`` seconds have no fault, so the run ends on a healed cluster.

Consumer-group churn (a member leaves, a new one joins after a hold) runs on its own
draw and does not count as a fault.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

# Node faults: each takes one node out of the cluster for its hold.
NODE_FAULTS = ("kill", "pause", "isolate", "nats_loss", "full_disk")
FAULT_KINDS = (*NODE_FAULTS, "partition", "nats_restart")
_ALONE = ("nats_restart", "kill")


@dataclass(frozen=True)
class Step:
    """One fault: it starts ``at`` seconds into the run on ``nodes`` and is healed
    ``hold`` seconds later. ``kind`` "churn" is a consumer-group member (``nodes[0]``,
    a member slot) leaving and a new one joining after ``hold``."""

    at: float
    kind: str
    nodes: tuple[int, ...]
    hold: float

    @property
    def end(self) -> float:
        """When the fault is healed (seconds into the run), on the same 0.1 s grid as
        the starts: a sum of two rounded floats may land a hair after a start that the
        plan put at the same time, and the runner would then inject both at once."""
        return round(self.at + self.hold, 1)

    def describe(self) -> str:
        """``kill(n1)``, ``partition(n0, n2)``, ``nats_restart()``, ``churn(member 2)``."""
        if self.kind == "churn":
            return f"churn(member {self.nodes[0]})"
        return f"{self.kind}({', '.join(f'n{i}' for i in self.nodes)})"


@dataclass(frozen=True)
class Settings:
    """What a schedule may contain and how it is paced (seconds)."""

    nodes: int = 3
    disk_node: int | None = 2
    kinds: tuple[str, ...] = FAULT_KINDS
    warmup: float = 5.0
    quiet_tail: float = 10.0
    gap: tuple[float, float] = (2.0, 6.0)
    hold: tuple[float, float] = (3.0, 10.0)
    overlap_chance: float = 0.3
    churn_every: tuple[float, float] = (15.0, 40.0)
    members: int = 3


def allowed(steps: Sequence[Step], settings: Settings) -> bool:
    """Whether ``steps``, all in force at once, keep the rules (see the module doc)."""
    if len(steps) > 2:
        return False
    if len(steps) > 1 and any(s.kind in _ALONE for s in steps):
        return False
    down = [s.nodes[0] for s in steps if s.kind in NODE_FAULTS]
    if len(down) > 1:
        return False
    pairs = [s.nodes for s in steps if s.kind == "partition"]
    if len(pairs) > 1:
        return False
    if down and pairs and down[0] not in pairs[0]:
        return False
    for step in steps:
        if step.kind == "kill" and step.nodes[0] == settings.disk_node:
            return False
        if step.kind == "full_disk" and step.nodes[0] != settings.disk_node:
            return False
    return True


def _targets(kind: str, settings: Settings) -> list[tuple[int, ...]]:
    if kind == "nats_restart":
        return [()]
    if kind == "partition":
        n = settings.nodes
        return [(i, j) for i in range(n) for j in range(i + 1, n)]
    return [(i,) for i in range(settings.nodes)]


def make_schedule(seed: int, duration: float, settings: Settings | None = None) -> list[Step]:
    """The faults (and member churn) of a run of ``duration`` seconds, sorted by start."""
    settings = settings or Settings()
    rng = random.Random(seed)
    last = duration - settings.quiet_tail
    faults: list[Step] = []
    t = settings.warmup
    while t < last:
        active = [s for s in faults if s.at <= t < s.end]
        if active and (len(active) >= 2 or rng.random() >= settings.overlap_chance):
            t = min(s.end for s in active) + rng.uniform(*settings.gap)
            continue
        hold = min(rng.uniform(*settings.hold), last - t)
        choices = [
            Step(round(t, 1), kind, nodes, round(hold, 1))
            for kind in settings.kinds
            for nodes in _targets(kind, settings)
        ]
        choices = [c for c in choices if allowed([*active, c], settings)]
        if not choices or hold < 1.0:
            if not active:
                break
            t = min(s.end for s in active) + rng.uniform(*settings.gap)
            continue
        # Kind first, then target: every kind as likely, however many targets it has.
        kind = rng.choice(sorted({c.kind for c in choices}))
        faults.append(rng.choice([c for c in choices if c.kind == kind]))
        t += rng.uniform(*settings.gap)
    churn: list[Step] = []
    t = settings.warmup + rng.uniform(*settings.churn_every)
    while settings.members > 1 and t < last:
        hold = min(rng.uniform(*settings.hold), last - t)
        churn.append(Step(round(t, 1), "churn", (rng.randrange(settings.members),), round(hold, 1)))
        t += hold + rng.uniform(*settings.churn_every)
    return sorted(faults + churn, key=lambda s: (s.at, s.kind))


def in_force(steps: Sequence[Step], at: float) -> list[Step]:
    """The faults (churn left out) in force ``at`` seconds into the run."""
    return [s for s in steps if s.kind != "churn" and s.at <= at < s.end]


def describe(steps: Sequence[Step]) -> str:
    """The schedule as printed at the start of a run: one line per step."""
    return "\n".join(
        f"  t+{s.at:7.1f}s  {s.describe():<26} hold {s.hold:5.1f}s  (healed at t+{s.end:.1f}s)"
        for s in steps
    )
