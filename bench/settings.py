"""What one run measures: counts, payload sizes, topologies, offered loads."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
# Rounds of the Spark section: more than the publish cases' three, since a round of it
# takes seconds and its rounds swung by up to half (a sink round at 46k rows/s between
# two at 96k).
SPARK_ROUNDS = 5


@dataclass(frozen=True, slots=True)
class Topology:
    """Partitions and replication factor of the streams a publish case writes to."""

    partitions: int
    replication: int

    @property
    def label(self) -> str:
        """Short name used in case ids and tables, e.g. ``p3-rf1``."""
        return f"p{self.partitions}-rf{self.replication}"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a run needs to know; ``full()`` and ``quick()`` are the two presets."""

    quick: bool
    nodes: int
    sizes: tuple[int, ...]
    count: int
    warmup: int
    policies: tuple[str, ...]
    topologies: tuple[Topology, ...]
    # Peers that publish one message at a time (gufo unary, go Publish) are slow; with the
    # same count on every topology they would take most of the run, so they are measured
    # (with the same count) on these topologies only.
    sequential_topologies: tuple[Topology, ...]
    # The services' pattern (burst of publish() calls, tasks looping on publish()) and the
    # key+headers cases run on these topologies, the key+headers ones for these sizes.
    services_topologies: tuple[Topology, ...]
    keyed_sizes: tuple[int, ...]
    latency_rates: tuple[int, ...]
    latency_seconds: float
    latency_warmup_seconds: float
    # Latency runs alternate ours and bare in this many rounds (pooled afterwards), so
    # that both see the same background noise on a shared machine.
    latency_rounds: int
    # Publish and subscribe cases run the clients of one configuration in this many
    # alternating rounds; the round with the median rate is reported (all rates are kept
    # in results.json). One run of a case swings by tens of percent on a shared 2-core
    # machine; the median of alternating rounds compares clients under the same noise.
    rounds: int
    subscribe_count: int
    # Many partitions: read this many messages from each of every partition count here,
    # with a task per partition and with one consumer-group member.
    fanout_partitions: tuple[int, ...]
    fanout_count: int
    memory_count: int
    uvloop: bool
    uvloop_compare: bool
    go: bool
    gufo: bool
    out_dir: Path
    case_filter: tuple[str, ...] = field(default=())
    # The Spark section (bench.spark): the source's read of one partition against the
    # SDK's subscribe (on the subscribe cases' stream), the sink against one
    # Publisher, and a standalone cluster with one worker, then two.
    spark: bool = True
    spark_sink_count: int = 300_000
    spark_scale_count: int = 200_000
    spark_rounds: int = SPARK_ROUNDS
    # End-to-end latency (bench.e2e): offered loads, measured seconds per load and
    # client (after a warm-up at the same rate that is not timed), split into this many
    # alternating rounds and pooled, as the ack-latency cases are: a stall of the shared
    # machine then lands on every client's samples alike, not on one client's only run.
    e2e_rates: tuple[int, ...] = (1_000, 10_000, 50_000)
    e2e_seconds: float = 10.0
    e2e_warmup_seconds: float = 1.0
    e2e_rounds: int = 4
    # The services' patterns and their peers (the bare ceilings, go-liftbridge's
    # goroutines) run apart from the other clients of their configuration, in this many
    # alternating rounds. Their goals are 5% apart from parity, and one round's ratio of
    # a pattern to its ceiling swung from 0.85x to 1.45x on a shared 2-core machine.
    services_rounds: int = 7

    @classmethod
    def full(cls) -> Settings:
        """The reference run behind the committed RESULTS.md (3-node cluster)."""
        single = Topology(1, 1)
        return cls(
            quick=False,
            nodes=3,
            sizes=(100, 1024),
            count=100_000,
            warmup=5_000,
            policies=("LEADER", "ALL"),
            topologies=(single, Topology(3, 1), Topology(1, 3), Topology(3, 3)),
            sequential_topologies=(single,),
            services_topologies=(single,),
            keyed_sizes=(100,),
            latency_rates=(1_000, 10_000),
            latency_seconds=10.0,
            latency_warmup_seconds=0.5,
            latency_rounds=5,
            rounds=3,
            subscribe_count=200_000,
            fanout_partitions=(1, 8, 64, 256),
            fanout_count=20_000,
            memory_count=1_000_000,
            uvloop=False,
            uvloop_compare=True,
            go=True,
            gufo=True,
            out_dir=BENCH_DIR,
        )

    @classmethod
    def quick_preset(cls, out_dir: Path) -> Settings:
        """Small counts on one node: proves every case runs, says nothing about speed."""
        single = Topology(1, 1)
        return cls(
            quick=True,
            nodes=1,
            sizes=(100,),
            count=2_000,
            warmup=200,
            policies=("LEADER",),
            topologies=(single,),
            sequential_topologies=(single,),
            services_topologies=(single,),
            keyed_sizes=(100,),
            latency_rates=(1_000,),
            latency_seconds=1.0,
            latency_warmup_seconds=0.2,
            latency_rounds=1,
            rounds=1,
            subscribe_count=2_000,
            fanout_partitions=(1, 4),
            fanout_count=500,
            memory_count=0,
            uvloop=False,
            uvloop_compare=True,
            go=True,
            gufo=True,
            out_dir=out_dir,
            spark_sink_count=2_000,
            spark_scale_count=2_000,
            spark_rounds=1,
            e2e_seconds=2.0,
            e2e_rounds=1,
            services_rounds=1,
            e2e_rates=(1_000, 10_000),  # 50k msg/s for 2 s would outlast the rest
        )

    def with_(self, **changes: object) -> Settings:
        """A copy with some fields changed (command-line overrides)."""
        return replace(self, **changes)  # type: ignore[arg-type]
