"""A chaos run from start to clean-up.

1. Print the seed and the whole schedule; start a 3-node ContainerCluster (one NATS
   server per node, for partitions; node ``disk_node``'s data directory on a tmpfs,
   for the full disk; debug logs, for truncation evidence).
2. Create the stream (3 partitions, RF 3, min ISR 2), start the consumer group and the
   publishers, and follow the schedule, printing each fault as it happens.
3. At the end: stop publishing, wait for the last acks (each until its deadline), heal
   everything, start any node that is down, let the group catch up, then read every
   partition from its earliest offset: the ground truth.
4. Keep the node logs, check the history, write ``summary.json`` and ``summary.md``.

Whatever happens (a failure, Ctrl-C, SIGTERM), the cluster is removed before the
process ends: containers, networks, helpers and tmpfs mounts go with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import nats

from liftbridge_nats import Client, LiftbridgeError, Publisher
from liftbridge_nats.testing import ContainerCluster

from . import checker, logs, report
from .history import HistoryWriter
from .history import load as load_history
from .nemesis import Nemesis, follow
from .schedule import FAULT_KINDS, Settings, Step, describe, make_schedule
from .workload import GroupLoad, PublishLoad, read_everything


# Clients reconnect forever, quickly: a fault must not end the run's NATS connection.
async def _quiet(_: Exception) -> None:
    """nats-py prints a traceback per failed reconnect by default: faults make many."""


_NATS_OPTIONS: dict[str, Any] = {
    "connect_timeout": 3,
    "max_reconnect_attempts": -1,
    "reconnect_time_wait": 0.5,
    "error_cb": _quiet,
}


@dataclass(frozen=True)
class Options:
    """What a run does (see ``python -m bench.chaos --help``)."""

    seed: int
    duration: float
    out: Path
    rate: float = 100.0
    keys: int = 12
    partitions: int = 3
    members: int = 3
    ack_timeout: float = 10.0
    margin: float = 5.0
    disk_node: int = 2
    disk_size: str = "256m"
    drain_timeout: float = 60.0
    kinds: tuple[str, ...] = FAULT_KINDS

    @property
    def deadline(self) -> float:
        """How long a publish may take to end: the ack timeout plus the margin."""
        return self.ack_timeout + self.margin


def _say(text: str) -> None:
    print(text, flush=True)


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


async def run(options: Options) -> int:
    """One run; returns the exit status (0 passed, 1 a rule broke, 2 the run failed)."""
    out = options.out
    out.mkdir(parents=True, exist_ok=True)
    settings = Settings(disk_node=options.disk_node, members=options.members, kinds=options.kinds)
    steps = make_schedule(options.seed, options.duration, settings)
    _say(
        f"[{_stamp()}] chaos run: seed {options.seed}, {options.duration:.0f} s, "
        f"{len([s for s in steps if s.kind != 'churn'])} faults and "
        f"{len([s for s in steps if s.kind == 'churn'])} member changes planned; "
        f"output in {out}\n{describe(steps)}"
    )
    history_path = out / "history.jsonl"
    for stale in (history_path, out / "cluster-logs.txt", out / "summary.md"):
        stale.unlink(missing_ok=True)
    writer = HistoryWriter(history_path)
    cluster = ContainerCluster(
        3,
        nats_per_node=True,
        data_tmpfs={options.disk_node: options.disk_size},
        log_level="debug",
        start_timeout=180,
    )
    _say(f"[{_stamp()}] starting the cluster ({cluster.namespace})")
    # SIGTERM ends the run as Ctrl-C does: the main task is cancelled and cleans up.
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if main is not None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, main.cancel)
    try:
        await cluster.start()
        _say(f"[{_stamp()}] cluster ready: brokers {cluster.brokers}")
        await _work(cluster, options, steps, writer)
    except BaseException as exc:
        _say(f"[{_stamp()}] the run stopped: {str(exc)[:2000]!r}; removing the cluster")
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(_save_logs, cluster, out)
        await cluster.stop()
        _say(f"[{_stamp()}] cluster {cluster.namespace} removed")
        if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
            raise
        return 2
    writer.close()
    await cluster.stop()
    _say(f"[{_stamp()}] cluster {cluster.namespace} removed")
    return _judge(out, options)


async def _work(
    cluster: ContainerCluster, options: Options, steps: list[Step], writer: HistoryWriter
) -> float:
    """The workload under the schedule, the end of the run and the final read; returns
    when the workload ended (``time.time()``)."""
    stream = "chaos"
    nc = await nats.connect(servers=cluster.nats_urls, **_NATS_OPTIONS)
    try:
        async with Client(cluster.brokers, timeout=10) as client:
            await client.create_stream(
                stream,
                stream,
                replication_factor=3,
                partitions=options.partitions,
                min_isr=2,
            )
            await _full_isr(client, stream, options.partitions, within=60)
            async with Publisher(nc, client=client, ack_timeout=options.ack_timeout) as pub:
                group = GroupLoad(
                    client,
                    writer,
                    stream=stream,
                    group="chaos-group",
                    members=options.members,
                    log=_say,
                )
                load = PublishLoad(
                    pub,
                    writer,
                    stream=stream,
                    partitions=options.partitions,
                    rate=options.rate,
                    keys=options.keys,
                    deadline=options.deadline,
                )
                nemesis = Nemesis(cluster, writer, say=_say, leaders=_leaders(cluster, client))
                ended = await _under_faults(cluster, nemesis, options, steps, writer, group, load)
            await _settle(cluster, nemesis, client, options, stream, group, load.acked_ids)
            await group.stop()
            count = await read_everything(
                client, writer, stream=stream, partitions=options.partitions
            )
            _say(f"[{_stamp()}] final read: {count} messages stored")
    finally:
        await nc.close()
    _keep_logs(cluster, options.out, writer, stream)
    return ended


async def _under_faults(
    cluster: ContainerCluster,
    nemesis: Nemesis,
    options: Options,
    steps: list[Step],
    writer: HistoryWriter,
    group: GroupLoad,
    load: PublishLoad,
) -> float:
    """Publish and read for the run's duration while the schedule runs."""
    await group.start()
    began = time.time()
    writer.meta(
        seed=options.seed,
        duration=options.duration,
        rate=options.rate,
        keys=options.keys,
        partitions=options.partitions,
        members=options.members,
        ack_timeout=options.ack_timeout,
        deadline=options.deadline,
        disk_node=options.disk_node,
        kinds=list(options.kinds),
        namespace=cluster.namespace,
        workload_start=began,
        machine=f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()}, "
        f"Python {platform.python_version()}",
        load_at_start=round(os.getloadavg()[0], 1),
        schedule=[asdict(s) for s in steps],
    )
    nemesis.began = began

    async def churn(step: Step) -> None:
        slot = step.nodes[0]
        _say(f"[{_stamp()}] t+{time.time() - began:7.1f}s member slot {slot} leaves")
        await group.leave(slot)
        await asyncio.sleep(step.hold)
        await group.join(slot)
        _say(f"[{_stamp()}] t+{time.time() - began:7.1f}s member slot {slot} joins again")

    stop = asyncio.Event()
    publishing = asyncio.create_task(load.run(stop))
    watching = asyncio.create_task(nemesis.watch())
    loads: list[float] = []
    progress = asyncio.create_task(_progress(load, group, began, loads))
    try:
        await follow(
            steps,
            began=began,
            until=options.duration - Settings().quiet_tail,
            fault=nemesis.run_step,
            churn=churn,
            say=_say,
        )
        left = began + options.duration - time.time()
        if left > 0:
            await asyncio.sleep(left)
    finally:
        stop.set()
        progress.cancel()
        watching.cancel()
        try:
            await watching
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # the end of the run tries again: say it, go on
            _say(f"[{_stamp()}] the crash watch stopped: {exc!r}")
        await publishing
    ended = time.time()
    loads.append(os.getloadavg()[0])
    writer.meta(load_mean=round(sum(loads) / len(loads), 1), load_max=round(max(loads), 1))
    unended = await load.finish()
    _say(
        f"[{_stamp()}] workload ended after {ended - began:.0f} s: sent {load.sent}, "
        f"acked {load.acked}, {unended} without an end by their deadline"
    )
    return ended


def _leaders(
    cluster: ContainerCluster, client: Client
) -> Callable[[int], Awaitable[tuple[int, ...]]]:
    """The partitions of the stream a node leads, as metadata says (() when unknown)."""

    async def leaders(node: int) -> tuple[int, ...]:
        try:
            meta = await asyncio.wait_for(client.fetch_metadata(["chaos"]), 3)
        except (LiftbridgeError, TimeoutError):
            return ()
        info = meta.streams.get("chaos")
        if info is None:
            return ()
        wanted = cluster.node_ids[node]
        return tuple(p for p, part in sorted(info.partitions.items()) if part.leader == wanted)

    return leaders


async def _progress(load: PublishLoad, group: GroupLoad, began: float, loads: list[float]) -> None:
    """Print the counts every 30 s; sample the machine's load average (1 min)."""
    while True:
        await asyncio.sleep(30)
        loads.append(os.getloadavg()[0])
        _say(
            f"[{_stamp()}] t+{time.time() - began:7.1f}s sent {load.sent}, acked {load.acked}, "
            f"read {group.reads} ({len(group.seen)} distinct), load {loads[-1]:.1f}"
        )


async def _settle(
    cluster: ContainerCluster,
    nemesis: Nemesis,
    client: Client,
    options: Options,
    stream: str,
    group: GroupLoad,
    acked: set[str],
) -> None:
    """Heal everything, start nodes that went down by themselves, wait for a whole
    cluster and ISR, then let the group read what was acked (up to drain_timeout)."""
    await cluster.heal_all()
    await nemesis.recover()
    await cluster.wait_ready(timeout=120)
    await _full_isr(client, stream, options.partitions, within=60)
    deadline = time.monotonic() + options.drain_timeout
    while not acked <= group.seen and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.5)  # the members fill group.seen as they read
    _say(
        f"[{_stamp()}] group caught up: {len(acked & group.seen)} of {len(acked)} acked "
        "messages read"
    )


async def _full_isr(client: Client, stream: str, partitions: int, *, within: float) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            meta = await client.fetch_metadata([stream])
            parts = meta.streams[stream].partitions
            if len(parts) == partitions and all(
                p.leader and len(p.isr) == 3 for p in parts.values()
            ):
                return
        except (LiftbridgeError, KeyError):
            pass
        if time.monotonic() > deadline:
            _say(f"[{_stamp()}] the ISR of {stream} is still not whole after {within:.0f} s")
            return
        await asyncio.sleep(0.5)


def _save_logs(cluster: ContainerCluster, out: Path) -> None:
    """Every node's whole log, beside the history."""
    for i, node in enumerate(cluster.node_ids):
        (out / f"node-{node}.log").write_text(cluster.node_log(i))


def _keep_logs(cluster: ContainerCluster, out: Path, writer: HistoryWriter, stream: str) -> None:
    """Save every node's log and record the truncations they show."""
    for i, node in enumerate(cluster.node_ids):
        text = cluster.node_log(i)
        (out / f"node-{node}.log").write_text(text)
        for truncation in logs.truncations(node, text, stream):
            writer.record(truncation)
    writer.flush()


def _judge(out: Path, options: Options) -> int:
    history = load_history(out / "history.jsonl")
    # The nodes' leader and follower changes: evidence for duplicates two leaders made.
    roles = logs.role_changes_in(out, "chaos")
    verdict = checker.check(history, deadline=options.deadline, roles=roles)
    figures = report.summary(history, verdict)
    (out / "summary.json").write_text(json.dumps(figures, indent=2, default=str) + "\n")
    page = report.markdown(figures)
    (out / "summary.md").write_text(page)
    _say(page)
    _say(f"[{_stamp()}] {'PASS' if verdict.ok else 'FAIL'}: summary in {out / 'summary.md'}")
    return 0 if verdict.ok else 1


def main_sync(options: Options) -> int:
    """Run with asyncio; Ctrl-C cleans up and exits 130."""
    try:
        return asyncio.run(run(options))
    except KeyboardInterrupt:
        print("interrupted: the cluster was removed", file=sys.stderr)
        return 130
    except asyncio.CancelledError:
        print("stopped (SIGTERM): the cluster was removed", file=sys.stderr)
        return 143
