"""The read side's telemetry against real servers: deserializers on subscriptions and
consumers, read metrics through the OpenTelemetry SDK's in-memory reader, trace
context on consumed messages, and the logs of a partition leader's fail-over."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio
import msgspec
import pytest
from _publisher_helpers import read_all
from _waiting import wait_for
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from liftbridge_nats import (
    AckPolicy,
    Client,
    Consumer,
    DeserializationError,
    LiftbridgeError,
    Message,
    StartPosition,
    StreamPartition,
)
from liftbridge_nats._proto import api_pb2
from liftbridge_nats.serializers import MsgspecDeserializer, StringDeserializer
from liftbridge_nats.testing import LocalCluster
from liftbridge_nats.tracing import consumer_span, inject_context


class Order(msgspec.Struct):
    id: int
    item: str


def order(i: int) -> bytes:
    return msgspec.json.encode(Order(i, f"item-{i}"))


async def test_a_refused_value_is_raised_mid_stream_and_the_subscription_goes_on(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("deser")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        for i in range(5):
            await client.publish_to_stream(
                name, b"not an order" if i == 2 else order(i), key=b"k%d" % i
            )
        sub = client.subscribe(
            name,
            start_position=StartPosition.EARLIEST,
            stop_offset=4,
            value_deserializer=MsgspecDeserializer(Order),
            key_deserializer=StringDeserializer(),
        )
        seen: list[Any] = []
        async with sub:
            while not sub.closed:  # the README's loop
                try:
                    async for msg in sub:
                        seen.append((msg.offset, msg.value, msg.key))
                except DeserializationError as exc:
                    seen.append(exc)
                    assert sub.last_offset == 2  # the position moved past it
        error = seen[2]
        assert isinstance(error, DeserializationError)
        assert (error.stream, error.partition, error.offset, error.what) == (name, 0, 2, "value")
        assert error.raw_message is not None and error.raw_message.value == b"not an order"
        assert error.raw_message.key == b"k2"  # undecoded: the stored bytes
        assert f"offset 2 of stream {name!r}, partition 0" in str(error)
        assert seen[:2] + seen[3:] == [(i, Order(i, f"item-{i}"), f"k{i}") for i in (0, 1, 3, 4)]
        assert sub.closed and sub.last_offset == 4

        # A refused message at the stop offset ends the iteration after it.
        last = client.subscribe(
            name, start_offset=1, stop_offset=2, value_deserializer=MsgspecDeserializer(Order)
        )
        async with last:
            assert (await anext(last)).value == Order(1, "item-1")
            with pytest.raises(DeserializationError):
                await anext(last)
            with pytest.raises(StopAsyncIteration):
                await anext(last)


async def test_a_consumer_delivers_a_refused_value_as_an_error_and_commits_past_it(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("cdeser")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=2)
        for i in range(4):  # partition 0: 0, 1 (bad), 2, 3; partition 1: 0, 1, 2, 3
            await client.publish_to_stream(name, b"{oops" if i == 1 else order(i), partition=0)
            await client.publish_to_stream(name, order(10 + i), partition=1)
        p0, p1 = StreamPartition(name, 0), StreamPartition(name, 1)

        # getmany: the messages before the refused one come first, then the error;
        # the position is past it and a commit stores it as delivered.
        batching: Consumer[Order] = client.consumer(
            unique_name("g"),
            [name],
            auto_checkpoint_interval=None,
            assignment_interval=0.3,
            value_deserializer=MsgspecDeserializer(Order),
        )
        events: list[tuple[int, int] | str] = []
        async with batching:
            await batching.wait_for_assignment(10)
            deadline = time.monotonic() + 20
            while sum(1 for e in events if e != "error") < 7:
                assert time.monotonic() < deadline, events
                try:
                    got = await batching.getmany(timeout=1.0, max_records=3)
                except DeserializationError as exc:
                    assert (exc.stream, exc.partition, exc.offset) == (name, 0, 1)
                    events.append("error")
                    assert await batching.position(p0) == 2
                    continue
                for tp, messages in got.items():
                    assert all(isinstance(m.value, Order) for m in messages)
                    events.extend((tp.partition, m.offset) for m in messages)
            on_p0 = [e for e in events if e == "error" or e[0] == 0]
            assert on_p0 == [(0, 0), "error", (0, 2), (0, 3)]
            assert [e for e in events if e != "error" and e[0] == 1] == [(1, o) for o in range(4)]
            await batching.commit()
            assert await batching.committed(p0) == 4 and await batching.committed(p1) == 4

        # async for: the same order, and the iteration goes on after the error.
        iterating: Consumer[Order] = client.consumer(
            unique_name("g"),
            [name],
            assignment_interval=0.3,
            value_deserializer=MsgspecDeserializer(Order),
        )
        seen: list[int | str] = []
        async with iterating, asyncio.timeout(20):
            while len(seen) < 4:
                try:
                    msg = await anext(iterating)
                except DeserializationError as exc:
                    seen.append(f"error at {exc.offset}")
                    assert iterating.positions[(name, 0)] == 1
                    continue
                if msg.partition == 0:
                    seen.append(msg.offset)
        assert seen == [0, "error at 1", 2, 3]


async def sizes_as_sent(broker: str, stream: str, partition: int) -> list[int]:
    """The size of each stored message of a partition as the broker sends it, read by
    grpcio alone (an independent reader), undecoded: re-encoding a message need not
    give its original size (Go leaves out a map entry's empty value, Python does not)."""
    request = api_pb2.SubscribeRequest(
        stream=stream,
        partition=partition,
        startPosition=api_pb2.StartPosition.EARLIEST,
        stopPosition=api_pb2.StopPosition.STOP_LATEST,
    )
    sizes = []
    async with grpc.aio.insecure_channel(broker) as channel:
        try:
            subscribe = channel.unary_stream(
                "/proto.API/Subscribe",
                request_serializer=api_pb2.SubscribeRequest.SerializeToString,
                response_deserializer=len,
            )
            async for size in subscribe(request):
                sizes.append(size)
        except grpc.aio.AioRpcError as exc:
            # How the broker ends a stream at its stop position.
            assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, exc
    assert sizes[0] == 0  # the empty message that says the subscription is set up
    return sizes[1:]


def read_points(reader: InMemoryMetricReader, metric: str) -> dict[tuple[str, ...], int]:
    """Values of one counter by (stream, partition[, group])."""
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[tuple[str, ...], int] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name != metric:
                    continue
                for point in m.data.data_points:
                    assert isinstance(point, NumberDataPoint)
                    attrs = dict(point.attributes or {})
                    assert attrs["messaging.system"] == "liftbridge"
                    key: tuple[str, ...] = (
                        str(attrs["messaging.destination.name"]),
                        str(attrs["messaging.destination.partition.id"]),
                    )
                    if "messaging.consumer.group.name" in attrs:
                        key += (str(attrs["messaging.consumer.group.name"]),)
                    points[key] = int(point.value)
    return points


async def test_read_metrics_count_messages_and_bytes_per_partition(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name, group = unique_name("rmetrics"), unique_name("g")
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    sizes = {0: [10, 200, 3000, 1, 7], 1: [64, 65, 66]}
    async with Client(liftbridge_cluster.brokers, metrics=provider) as client:
        await client.create_stream(name, name, partitions=2)
        for partition, values in sizes.items():
            for size in values:
                await client.publish_to_stream(
                    name, b"v" * size, partition=partition, key=b"key", headers={"h": b"x" * 50}
                )
        for partition, values in sizes.items():
            assert len(await read_all(client, name, partition)) == len(values)
        # Bytes as the broker sent them: value, key, headers and the rest of each record.
        sent = {p: await sizes_as_sent(liftbridge_cluster.brokers[0], name, p) for p in sizes}
        assert [len(v) for v in sent.values()] == [len(v) for v in sizes.values()]
        assert all(s > v for p in sizes for s, v in zip(sent[p], sizes[p], strict=True))
        counted: dict[tuple[str, ...], int] = {(name, str(p)): len(v) for p, v in sizes.items()}
        volume: dict[tuple[str, ...], int] = {(name, str(p)): sum(v) for p, v in sent.items()}
        assert read_points(reader, "messaging.client.consumed.messages") == counted
        assert read_points(reader, "liftbridge.client.consumed.bytes") == volume

        # A consumer's reads are counted apart, under its group.
        async with client.consumer(group, [name], assignment_interval=0.3) as consumer:
            got = 0
            async with asyncio.timeout(20):
                while got < 8:
                    got += sum(map(len, (await consumer.getmany(timeout=1.0)).values()))
        grouped = read_points(reader, "messaging.client.consumed.messages")
        assert grouped == {**counted, **{(*key, group): n for key, n in counted.items()}}
        grouped_bytes = read_points(reader, "liftbridge.client.consumed.bytes")
        assert grouped_bytes == {**volume, **{(*key, group): n for key, n in volume.items()}}

    # Reading again adds to the same counters (cumulative per process and provider).
    async with Client(liftbridge_cluster.brokers, metrics=provider) as client:
        sub = client.subscribe(name, partition=1, start_offset=2, stop_offset=2)
        async with sub:
            assert [m.offset async for m in sub] == [2]
    assert read_points(reader, "messaging.client.consumed.messages")[(name, "1")] == 4
    assert read_points(reader, "liftbridge.client.consumed.bytes")[(name, "1")] == (
        sum(sent[1]) + sent[1][2]
    )

    # metrics=False counts nothing.
    async with Client(liftbridge_cluster.brokers, metrics=False) as client:
        sub = client.subscribe(name, start_position=StartPosition.EARLIEST, stop_offset=0)
        async with sub:
            assert len([m async for m in sub]) == 1
    assert read_points(reader, "messaging.client.consumed.messages")[(name, "0")] == 5
    with pytest.raises(TypeError, match="metrics must be"):
        Client(liftbridge_cluster.brokers, metrics="yes")  # type: ignore[arg-type]


async def test_consumed_messages_carry_the_producers_trace_context(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("rtrace")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=2)
        requests = []
        for i in range(4):
            with provider.get_tracer("shop").start_as_current_span(f"checkout {i}") as request:
                headers = inject_context({"app": b"shop"})
                await client.publish_to_stream(name, b"%d" % i, partition=i % 2, headers=headers)
            requests.append(request.get_span_context())
        async with client.consumer(unique_name("g"), [name], assignment_interval=0.3) as consumer:
            batches: dict[StreamPartition, list[Message]] = {}
            async with asyncio.timeout(20):
                while sum(map(len, batches.values())) < 4:
                    for tp, messages in (await consumer.getmany(timeout=1.0)).items():
                        batches.setdefault(tp, []).extend(messages)
            for messages in batches.values():
                for msg in messages:
                    ctx = msg.trace_context
                    assert ctx is not None
                    remote = trace.get_current_span(ctx).get_span_context()
                    sent = requests[int(msg.value)]
                    assert (remote.trace_id, remote.span_id) == (sent.trace_id, sent.span_id)
                    assert remote.is_remote
                # One CONSUMER span per batch, linked to every producer in it.
                with consumer_span(messages, tracer_provider=provider, group=consumer.group_id):
                    pass
    spans = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert len(spans) == 2
    for span in spans:
        attributes = dict(span.attributes or {})
        partition = int(str(attributes["messaging.destination.partition.id"]))
        linked = {(link.context.trace_id, link.context.span_id) for link in span.links}
        assert linked == {(r.trace_id, r.span_id) for r in requests[partition::2]}
        assert attributes["messaging.batch.message_count"] == 2
        assert attributes["messaging.consumer.group.name"] == consumer.group_id


async def test_a_rebalance_is_logged(
    liftbridge_cluster: LocalCluster,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    name, group = unique_name("logreb"), unique_name("g")
    caplog.set_level(logging.INFO, logger="liftbridge_nats.groups")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=2)
        first = client.consumer(group, [name], assignment_interval=0.3)
        async with first:
            await wait_for(lambda: len(first.assignments) == 2, "both partitions")
            second = client.consumer(group, [name], assignment_interval=0.3)
            async with second:
                await wait_for(
                    lambda: len(first.assignments) == len(second.assignments) == 1,
                    "a partition each",
                )
                (moved,) = second.assignments
    lines = [r.getMessage() for r in caplog.records if r.name == "liftbridge_nats.groups"]

    def assigned(member: Consumer, partitions: str) -> bool:
        return any(
            line.startswith(f"group {group!r} member {member.consumer_id}, epoch ")
            and line.endswith(f": assigned {partitions}")
            for line in lines
        )

    assert assigned(first, f"{name}/0, {name}/1"), lines
    assert assigned(second, f"{name}/{moved.partition}"), lines
    assert f"group {group!r} member {first.consumer_id}: revoked {name}/{moved.partition}" in lines
    # Closing hands back what each member held.
    assert f"group {group!r} member {second.consumer_id}: revoked {name}/{moved.partition}" in lines


@pytest.mark.cluster
@pytest.mark.slow
async def test_a_leader_fail_over_is_logged(
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
    liftbridge_cluster_factory: Callable[..., Any],
) -> None:
    name, group = unique_name("logfo"), unique_name("g")
    caplog.set_level(logging.DEBUG, logger="liftbridge_nats")
    async with (
        liftbridge_cluster_factory(3) as cluster,
        Client(cluster.brokers, timeout=20) as client,
    ):
        await client.create_stream(name, name, replication_factor=3)
        for i in range(20):
            await client.publish_to_stream(name, b"%d" % i, ack_policy=AckPolicy.ALL, timeout=20)
        leader = (await client.fetch_partition_metadata(name, 0)).leader
        consumer = client.consumer(group, [name], assignment_interval=0.3)
        sub = client.subscribe(name, start_position=StartPosition.EARLIEST)
        async with sub, consumer, asyncio.timeout(90):
            await consumer.wait_for_assignment(10)
            assert [(await anext(sub)).offset for _ in range(20)] == list(range(20))
            await cluster.kill_node(cluster.node_ids.index(leader))
            offset = -1
            while offset < 0:
                try:
                    ack = await client.publish_to_stream(name, b"after", timeout=2.0)
                    offset = -1 if ack is None else ack.offset
                except LiftbridgeError:
                    await asyncio.sleep(0.2)
            assert (await anext(sub)).offset == offset  # read from the new leader
            await wait_for(lambda: sub.resubscribes >= 1, "the subscription to resubscribe")

    def lines(logger: str, level: int) -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == level]

    subscription = "liftbridge_nats.subscription"
    assert any(
        f"stream {name!r} partition 0: the stream from broker" in line and "broke after" in line
        for line in lines(subscription, logging.INFO)
    ), caplog.text
    assert any(
        f"stream {name!r} partition 0: subscribed again to broker" in line
        and "after offset 19" in line
        for line in lines(subscription, logging.INFO)
    ), caplog.text
    assert any(
        "lost the connection to broker" in line for line in lines(subscription, logging.WARNING)
    ), caplog.text
    assert any(
        "partition leaders moved:" in line and f"{name}/0 {leader} -> " in line
        for line in lines("liftbridge_nats.client", logging.INFO)
    ), caplog.text
    assert any(
        f"group {group!r} member {consumer.consumer_id}, epoch" in line
        and f"assigned {name}/0" in line
        for line in lines("liftbridge_nats.groups", logging.INFO)
    ), caplog.text
