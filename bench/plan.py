"""The list of cases one run measures, in the order it measures them.

Publish cases are grouped by configuration (ack policy, topology, size) with every
client of that configuration run back to back, so that all clients of one row see the
same machine conditions.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.settings import Settings, Topology

# Clients of the publish section, in table order.
OURS = "ours"
# The services' pattern: `await publish()` from many tasks (same Publisher, defaults).
OURS_BURST = "ours burst 20k"
OURS_TASKS_100 = "ours 100 tasks"
OURS_TASKS_1000 = "ours 1000 tasks"
SERVICES = (OURS_BURST, OURS_TASKS_100, OURS_TASKS_1000)
# The bare ceiling of each of those patterns: the same shape with no SDK (pre-encoded
# envelopes, a plain future per message resolved by the ack subscription).
BARE_BURST = "bare burst 20k"
BARE_TASKS_100 = "bare 100 tasks"
BARE_TASKS_1000 = "bare 1000 tasks"
SERVICE_CEILINGS = (BARE_BURST, BARE_TASKS_100, BARE_TASKS_1000)
CEILING_OF = dict(zip(SERVICES, SERVICE_CEILINGS, strict=True))
# go-liftbridge in the same pattern: goroutines looping on its blocking Publish. Only the
# 100-task pattern has a Go peer: go-liftbridge v2.3.0's Publish calls SendMsg on one
# gRPC stream from every goroutine, which grpc-go does not support, and it stalls (the
# sends wait for flow-control quota that never returns) once the calls in flight hold
# more than about 64 KiB: 1,000 goroutines with 100 B values, or 100 with 1 KiB, which
# the run reports as the peer's failure.
GO_TASKS_100 = "go Publish, 100 goroutines"
GO_PEER_OF = {OURS_TASKS_100: GO_TASKS_100}
# The clients that run in the services' rounds (``Settings.services_rounds``).
SERVICES_GROUP = frozenset((*SERVICES, *SERVICE_CEILINGS, *GO_PEER_OF.values()))
# What telemetry and serializers cost, beside "ours" (which runs with opentelemetry-api
# installed and no SDK configured): the same publishes with opentelemetry not importable,
# with an OpenTelemetry SDK taking every span and the metrics, and with msgspec Structs
# of the same encoded size through value_serializer. Measured on the first size, LEADER,
# the first topology.
OURS_NO_OTEL = "ours, no opentelemetry"
OURS_TRACED = "ours, traced (OTel SDK)"
OURS_MSGSPEC = "ours, msgspec Struct"
TELEMETRY_CLIENTS = (OURS_NO_OTEL, OURS_TRACED, OURS_MSGSPEC)
BARE = "bare"
RAW = "raw nats-py"
GUFO_UNARY = "gufo publish"
GUFO_BULK = "gufo publish_bulk"
GO_ASYNC = "go PublishAsync"
GO_SYNC = "go Publish"
OURS_UVLOOP = "ours+uvloop"
BARE_UVLOOP = "bare+uvloop"
GUFO_SUB = "gufo subscribe"
GO_SUB = "go Subscribe"
GRPC_SUB = "raw grpc.aio"
GRPC_SYNC_SUB = "raw grpc sync thread"
# Our subscribe with its read metrics off, and reporting to an OpenTelemetry SDK ("ours"
# itself runs with opentelemetry-api installed and no SDK configured).
OURS_METRICS_OFF = "ours, metrics off"
OURS_OTEL_SDK = "ours + OTel SDK"
SUB_METRICS_CLIENTS = (OURS_METRICS_OFF, OURS_OTEL_SDK)
FANOUT_TASKS = "ours, a task per partition"
FANOUT_CONSUMER = "ours, one consumer"
GO_FANOUT = "go, a goroutine per partition"
FANOUT_CLIENTS = (FANOUT_TASKS, FANOUT_CONSUMER)

# The blocking API (liftbridge_nats.sync): publish_async from one thread, then waiting
# on its futures, beside ours (the async publish_async); 16 threads looping on the
# blocking publish, beside go-liftbridge's blocking Publish from 16 goroutines; and what
# one call through the background loop costs (no I/O). The 16 threads also run with
# their process held to one core (the guide's advice for many threads: a thread's
# hand-over to the loop then stays on one core; the servers keep both). Measured on the
# first size, LEADER, the first topology.
SYNC_PUBLISH_ASYNC = "sync publish_async"
SYNC_THREADS_16 = "sync publish, 16 threads"
SYNC_THREADS_16_ONE_CORE = "sync publish, 16 threads, one core"
GO_TASKS_16 = "go Publish, 16 goroutines"
SYNC_CLIENTS = (SYNC_PUBLISH_ASYNC, SYNC_THREADS_16, SYNC_THREADS_16_ONE_CORE)
SYNC_PEER_OF = {
    SYNC_PUBLISH_ASYNC: OURS,
    SYNC_THREADS_16: GO_TASKS_16,
    SYNC_THREADS_16_ONE_CORE: GO_TASKS_16,
}
PORTAL_CALL = "sync portal call"
# Calls timed by the portal case (at most; fewer when the run's count is smaller).
PORTAL_CALLS = 20_000

# Our Publisher with fast_path=False: the nats-py public API only, what users of a
# nats-py release outside the tested range get. Measured where the telemetry variants
# are (first size, LEADER, first topology).
OURS_PUBLIC_API = "ours, fast_path=False"

# End-to-end latency (section "e2e"): from each message's scheduled send time to its
# arrival at a reader in another process. Ours: our Publisher's publish_async, read with
# Client.subscribe or by a consumer-group member; go-liftbridge: PublishAsync and
# Subscribe (the Go peer's e2e modes); bare: pre-encoded envelopes on nats-py, read
# with the generated grpc.aio stub.
E2E_OURS_SUB = "ours subscribe"
E2E_OURS_CONSUMER = "ours consumer"
E2E_GO = "go-liftbridge"
E2E_BARE = BARE
E2E_OURS = (E2E_OURS_SUB, E2E_OURS_CONSUMER)

GUFO_CLIENTS = (GUFO_UNARY, GUFO_BULK, GUFO_SUB)
GO_CLIENTS = (GO_ASYNC, GO_SYNC, GO_TASKS_100, GO_TASKS_16, GO_SUB, GO_FANOUT)
SEQUENTIAL_CLIENTS = (GUFO_UNARY, GO_SYNC)


SINGLE = Topology(1, 1)


@dataclass(frozen=True, slots=True)
class Case:
    """One measurement: a client doing one thing under one configuration."""

    section: str  # publish | latency | e2e | subscribe | fanout | memory | spark | portal
    client: str
    size: int
    count: int
    ack: str = "LEADER"
    topology: Topology = SINGLE
    rate: int = 0
    keyed: bool = False
    """Every message carries a key and one header."""

    @property
    def id(self) -> str:
        """Stable identifier, the key of the case in results.json."""
        parts = [self.section, self.client.replace(" ", "_"), f"{self.size}B"]
        if self.section in ("publish", "memory"):
            parts += [self.ack, self.topology.label]
            if self.keyed:
                parts.append("key+headers")
        if self.section in ("latency", "e2e"):
            parts += [self.ack, f"{self.rate}mps"]
        if self.section == "fanout":
            parts.append(f"p{self.topology.partitions}")
        return "/".join(parts)

    @property
    def config(self) -> str:
        """The configuration the case belongs to (shared by the clients it compares)."""
        if self.section in ("latency", "e2e"):
            return f"{self.ack} {self.rate} msg/s {self.size} B"
        if self.section in ("subscribe", "spark"):
            return f"{self.size} B"
        if self.section == "fanout":
            return f"{self.topology.partitions} partitions"
        return f"{self.ack} {self.topology.label} {self.size} B" + (" kh" if self.keyed else "")


def publish_clients(
    settings: Settings, topology: Topology, keyed: bool = False, telemetry: bool = False
) -> list[str]:
    """Clients measured on one publish configuration (``telemetry``: with the
    telemetry and serializer variants of ours, and the blocking API's cases)."""
    clients = [OURS, BARE]
    if telemetry:
        clients += list(TELEMETRY_CLIENTS)
        clients += list(SYNC_CLIENTS) + ([GO_TASKS_16] if settings.go else [])
        clients.append(OURS_PUBLIC_API)
    if topology in settings.services_topologies:
        clients += list(SERVICES) + list(SERVICE_CEILINGS)
        if settings.go:
            clients += list(GO_PEER_OF.values())
    if keyed:
        return clients + ([GO_ASYNC] if settings.go else [])
    if settings.gufo:
        clients.append(GUFO_BULK)
        if topology in settings.sequential_topologies:
            clients.append(GUFO_UNARY)
    if settings.go:
        clients.append(GO_ASYNC)
        if topology in settings.sequential_topologies:
            clients.append(GO_SYNC)
    if settings.uvloop_compare and topology == settings.topologies[0]:
        clients += [OURS_UVLOOP, BARE_UVLOOP]
    return clients


def round_order(cases: list[Case], round_index: int) -> list[Case]:
    """The clients of one configuration in the order of a round: as listed in even
    rounds, reversed in odd ones (A B C, then C B A), so none always runs first."""
    return cases if round_index % 2 == 0 else cases[::-1]


def round_partners(case: Case, cases: list[Case], settings: Settings) -> tuple[list[Case], int]:
    """The cases that run in rounds with ``case`` (a publish, subscribe or fan-out case)
    and how many rounds: its section and configuration, the services' group apart from
    the other clients, the group in ``settings.services_rounds`` rounds and the others in
    ``settings.rounds``."""
    services = case.client in SERVICES_GROUP
    partners = [
        c
        for c in cases
        if c.section == case.section
        and c.config == case.config
        and (c.client in SERVICES_GROUP) == services
    ]
    return partners, settings.services_rounds if services else settings.rounds


def build(settings: Settings) -> list[Case]:
    """Every case of a run, in execution order."""
    cases: list[Case] = []
    for size in settings.sizes:
        cases.append(Case("publish", RAW, size, settings.count, ack="NONE"))
    for size in settings.sizes:
        for topology in settings.topologies:
            if topology.replication > settings.nodes:
                continue
            for ack in settings.policies:
                telemetry = (size, topology, ack) == (
                    settings.sizes[0],
                    settings.topologies[0],
                    "LEADER",
                )
                for client in publish_clients(settings, topology, telemetry=telemetry):
                    cases.append(
                        Case("publish", client, size, settings.count, ack=ack, topology=topology)
                    )
    # The same with a key and one header on every message (services' messages).
    for size in settings.keyed_sizes:
        for topology in settings.services_topologies:
            for ack in settings.policies:
                for client in publish_clients(settings, topology, keyed=True):
                    cases.append(
                        Case(
                            "publish",
                            client,
                            size,
                            settings.count,
                            ack=ack,
                            topology=topology,
                            keyed=True,
                        )
                    )
    cases.append(Case("portal", PORTAL_CALL, settings.sizes[0], min(settings.count, PORTAL_CALLS)))
    for size in settings.sizes:
        for rate in settings.latency_rates:
            count = int(rate * settings.latency_seconds)
            for client in (OURS, BARE):
                cases.append(Case("latency", client, size, count, rate=rate))
    for rate in settings.e2e_rates:
        for client in (*E2E_OURS, *((E2E_GO,) if settings.go else ()), E2E_BARE):
            count = int(rate * settings.e2e_seconds)
            cases.append(Case("e2e", client, settings.sizes[0], count, rate=rate))
    for size in settings.sizes:
        clients = [OURS, *SUB_METRICS_CLIENTS, GRPC_SUB, GRPC_SYNC_SUB]
        if settings.gufo:
            clients.append(GUFO_SUB)
        if settings.go:
            clients.append(GO_SUB)
        for client in clients:
            cases.append(Case("subscribe", client, size, settings.subscribe_count))
    for partitions in settings.fanout_partitions:
        for client in (*FANOUT_CLIENTS, *((GO_FANOUT,) if settings.go else ())):
            cases.append(
                Case(
                    "fanout",
                    client,
                    settings.sizes[0],
                    settings.fanout_count,
                    topology=Topology(partitions, 1),
                )
            )
    if settings.memory_count:
        size = settings.sizes[0]
        cases.append(Case("memory", OURS, size, settings.memory_count))
        if settings.go:
            cases.append(Case("memory", GO_ASYNC, size, settings.memory_count))
    if settings.spark:
        from bench import spark

        size = settings.sizes[0]
        counts = {
            spark.READ: settings.subscribe_count,
            spark.READ_PEER: settings.subscribe_count,
            spark.SINK: settings.spark_sink_count,
            spark.SINK_PEER: settings.spark_sink_count,
            spark.SINK_PAIR: settings.spark_sink_count,
        }
        for client in spark.CLIENTS:
            count = counts.get(client, settings.spark_scale_count)
            cases.append(Case("spark", client, size, count))
    if settings.case_filter:
        cases = [c for c in cases if any(f in c.id for f in settings.case_filter)]
    return cases
