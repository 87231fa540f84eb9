"""The faults of a chaos run, done to a ContainerCluster, and the schedule followed in
time.

Each fault kind is one call to inject and one to heal:

========================  ===================================  ===========================
kind                      inject                               heal
========================  ===================================  ===========================
``kill``                  ``kill_node(i)`` (SIGKILL)           ``restart_node(i)``
``pause``                 ``pause_node(i)`` (frozen)           ``resume_node(i)``
``isolate``               ``isolate_node(i)`` (off the net)    ``heal_node(i)``
``nats_loss``             ``isolate_nats(i)``                  ``heal_nats(i)``
``partition``             ``partition(i, j)``                  ``heal_partition(i, j)``
``nats_restart``          ``kill_nats()``                      ``restart_nats()``
``full_disk``             ``fill_disk(i)`` (ENOSPC)            ``free_disk(i)``, then
                                                               ``restart_node(i)`` if the
                                                               node exited
========================  ===================================  ===========================

A step starts only once the faults the schedule healed before its start are healed
(a restart that waits for the cluster can run late), so the schedule's rules hold in
the real run too; the step is then late, and its print says when it really began.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from liftbridge_nats import ServerStartError
from liftbridge_nats.testing import ContainerCluster

from .history import Fault, HistoryWriter
from .schedule import Step

Say = Callable[[str], None]


class Nemesis:
    """Injects and heals faults on ``cluster``, recording each to ``history``.

    ``leaders(i)`` gives the partitions node ``i`` leads (or () when unknown): the
    partitions a fault on that node touches, for the recovery figures.
    """

    def __init__(
        self,
        cluster: ContainerCluster,
        history: HistoryWriter,
        *,
        say: Say,
        leaders: Callable[[int], Awaitable[tuple[int, ...]]],
    ) -> None:
        self._cluster = cluster
        self._history = history
        self._say = say
        self._leaders = leaders
        # When the workload began (time.time()), for the printed times.
        self.began = time.time()
        self.injected: dict[str, int] = {}
        # Nodes the schedule keeps down (killed, or on a full disk, which Liftbridge
        # does not survive): the watch leaves them to their heal.
        self._expected_down: set[int] = set()
        # While the schedule holds NATS down, no node can be started (it needs NATS).
        self._nats_down = False
        self._recovering = asyncio.Lock()

    async def inject(self, step: Step) -> None:
        """Start ``step``'s fault."""
        c, nodes = self._cluster, step.nodes
        actions: dict[str, Callable[[], Awaitable[None]]] = {
            "kill": lambda: c.kill_node(nodes[0]),
            "pause": lambda: c.pause_node(nodes[0]),
            "isolate": lambda: c.isolate_node(nodes[0]),
            "nats_loss": lambda: c.isolate_nats(nodes[0]),
            "partition": lambda: c.partition(nodes[0], nodes[1]),
            "nats_restart": c.kill_nats,
            "full_disk": lambda: c.fill_disk(nodes[0]),
        }
        if step.kind in ("kill", "full_disk"):
            self._expected_down.add(nodes[0])
        self._nats_down = self._nats_down or step.kind == "nats_restart"
        await self._retrying(actions[step.kind])

    async def heal(self, step: Step) -> None:
        """End ``step``'s fault (a restart waits until the cluster is ready)."""
        c, nodes = self._cluster, step.nodes
        actions: dict[str, Callable[[], Awaitable[None]]] = {
            "kill": lambda: c.restart_node(nodes[0]),
            "pause": lambda: c.resume_node(nodes[0]),
            "isolate": lambda: c.heal_node(nodes[0]),
            "nats_loss": lambda: c.heal_nats(nodes[0]),
            "partition": lambda: c.heal_partition(nodes[0], nodes[1]),
            "nats_restart": c.restart_nats,
            "full_disk": lambda: self._free_disk(nodes[0]),
        }
        await self._retrying(actions[step.kind])
        if step.kind in ("kill", "full_disk"):
            self._expected_down.discard(nodes[0])
        if step.kind == "nats_restart":
            self._nats_down = False

    async def _free_disk(self, node: int) -> None:
        """Free the disk; start the node again if it exited meanwhile (Liftbridge
        v1.9.0 panics when its high-watermark checkpoint hits ENOSPC)."""
        await self._cluster.free_disk(node)
        if not await asyncio.to_thread(self._cluster.is_running, node):
            detail = last_words(await asyncio.to_thread(self._cluster.node_log, node))
            self._say(f"           n{node} exited on the full disk: {detail.splitlines()[0]}")
            self._history.record(Fault("crash", f"n{node}", "start", time.time(), (), detail))
            await self._cluster.restart_node(node)
            self._history.record(Fault("crash", f"n{node}", "heal", time.time(), (), detail))

    async def recover(self, *, everyone: bool = False) -> int:
        """Start again every node that exited by itself (not one the schedule keeps
        down, unless ``everyone``), recording each as a ``crash`` with the end of its
        log; return how many."""
        if self._nats_down and not everyone:
            return 0
        async with self._recovering:
            started = 0
            for node in range(len(self._cluster.node_ids)):
                if node in self._expected_down and not everyone:
                    continue
                if await asyncio.to_thread(self._cluster.is_running, node):
                    continue
                log = await asyncio.to_thread(self._cluster.node_log, node)
                detail = last_words(log)
                target = f"n{node}"
                self._say(f"[{_stamp()}] {target} exited by itself: {detail.splitlines()[0]}")
                self._history.record(Fault("crash", target, "start", time.time(), (), detail))
                await self._cluster.restart_node(node)
                self._history.record(Fault("crash", target, "heal", time.time(), (), detail))
                self._say(f"[{_stamp()}] {target} started again")
                started += 1
            return started

    async def watch(self, every: float = 5.0) -> None:
        """Look for nodes that exited by themselves every ``every`` seconds. A node
        that cannot be started now is tried again at the next look (the steps and the
        end of the run try too)."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.recover()
            except ServerStartError as exc:
                self._say(f"[{_stamp()}] could not start a node again yet: {str(exc)[:300]}")

    async def _retrying(self, action: Callable[[], Awaitable[None]]) -> None:
        """Run a fault action; when it fails because another node exited by itself
        (a restart waits for the whole cluster), start that node and try once more."""
        try:
            await action()
        except ServerStartError as exc:
            if "exited by itself" not in str(exc):
                raise
            # Whichever node it is: the one this step restarts may be the one that died.
            if not await self.recover(everyone=True):
                raise
            await action()

    async def run_step(self, step: Step) -> None:
        """Inject, hold, heal; print and record both ends."""
        touched: tuple[int, ...] = ()
        for node in step.nodes:
            touched += await self._leaders(node)
        target = ", ".join(f"n{i}" for i in step.nodes)
        self._mark(step, "start", sorted(set(touched)), target)
        await self.inject(step)
        self.injected[step.kind] = self.injected.get(step.kind, 0) + 1
        await asyncio.sleep(step.hold)
        await self.heal(step)
        self._mark(step, "heal", sorted(set(touched)), target)

    def _mark(self, step: Step, phase: str, touched: list[int], target: str) -> None:
        now = time.time()
        stamp = _stamp(now)
        planned = step.at if phase == "start" else step.end
        self._say(
            f"[{stamp}] t+{now - self.began:7.1f}s (planned t+{planned:.1f}s) "
            f"{'inject' if phase == 'start' else 'heal  '} {step.kind}({target})"
            + (f" leader of partitions {touched}" if phase == "start" and touched else "")
        )
        self._history.record(Fault(step.kind, target, phase, now, tuple(touched)))
        self._history.flush()


def _stamp(now: float | None = None) -> str:
    now = time.time() if now is None else now
    return time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


def last_words(log: str, lines: int = 8) -> str:
    """What a node said as it died: from its last ``panic:`` or ``fatal`` line on (a
    few lines), else its last lines."""
    text = log.rstrip("\n").splitlines()
    for index in range(len(text) - 1, -1, -1):
        if text[index].startswith("panic:") or "level=fatal" in text[index]:
            return "\n".join(text[index : index + lines])
    return "\n".join(text[-lines:]) or "(no log)"


async def follow(
    steps: Sequence[Step],
    *,
    began: float,
    until: float,
    fault: Callable[[Step], Coroutine[Any, Any, None]],
    churn: Callable[[Step], Coroutine[Any, Any, None]],
    say: Say,
) -> None:
    """Run every step at its time (seconds after ``began``, a ``time.time()``): faults
    through ``fault``, member churn through ``churn``. A fault waits for the faults
    planned to be healed before it starts; steps that could not start ``until``
    seconds into the run are skipped (heals that wait for the cluster make a busy
    machine's run late); an error in any step ends the run."""
    running: list[tuple[Step, asyncio.Task[None]]] = []
    try:
        for index, step in enumerate(steps):
            if step.kind != "churn":
                for other, task in running:
                    if other.kind != "churn" and other.end <= step.at:
                        await task
            if time.time() - began > until:
                say(f"           {len(steps) - index} steps left unstarted: the run is late")
                break
            delay = began + step.at - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            for _, task in running:
                if task.done() and task.exception() is not None:
                    await task  # raises the step's error
            action = churn if step.kind == "churn" else fault
            running.append((step, asyncio.create_task(action(step))))
        for _, task in running:
            await task
    finally:
        for _, task in running:
            task.cancel()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)
