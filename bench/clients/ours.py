"""liftbridge-nats itself: the NATS-native Publisher and the gRPC Client's subscribe.

Used the way the README tells applications to use it, defaults for every knob but
``ack_timeout`` (see below): ``publish_async`` for throughput (futures resolved by the
ack listener), and the services' pattern, ``await publish()`` from many tasks
(``burst``, ``tasks``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import sys
import time
from typing import Any

import nats

from bench.measure import HEADER_NAME, HEADER_VALUE, KEY, Meter, Schedule, payload, percentiles
from liftbridge_nats import AckError, AckPolicy, StartPosition, StopPosition

# The one knob set away from the Publisher's defaults (5 s): a round slowed down by the
# machine should show as a low rate, not as messages failed by their ack deadline.
# RESULTS.md states these (runner.py records them in results.json).
PUBLISH_ACK_TIMEOUT = 120.0
LATENCY_ACK_TIMEOUT = 60.0


def _subjects(subject: str, partitions: int) -> list[str]:
    from liftbridge_nats import partition_subject

    return [partition_subject(subject, i) for i in range(partitions)]


def _failed(fut: asyncio.Future[Any]) -> bool:
    if fut.cancelled() or fut.exception() is not None:
        return True
    ack = fut.result()
    return ack is not None and ack.error is not AckError.OK


def _key_and_headers(spec: dict[str, Any]) -> tuple[bytes | None, dict[str, bytes] | None]:
    """The key and headers of every publish: a key and one header when ``keyed``.

    They are passed as plain keyword arguments, as applications write them: a call with
    ``**kwargs`` builds a dict per message, a cost of the harness's, not of the SDK's.
    """
    if spec.get("keyed"):
        return KEY, {HEADER_NAME: HEADER_VALUE}
    return None, None


def _struct_value(size: int) -> Any:
    """A msgspec Struct whose JSON encoding is ``size`` bytes (at least its fields')."""
    import msgspec

    class Reading(msgspec.Struct):
        sensor: str
        seq: int
        celsius: float
        note: str

    empty = len(msgspec.json.encode(Reading("sensor-7", 123456, 21.5, "")))
    return Reading("sensor-7", 123456, 21.5, "x" * max(0, size - empty))


def _sdk_meter_provider() -> Any:
    """An OpenTelemetry SDK meter provider whose periodic reader collects every second
    into an exporter that drops the data (what a deployment pays, minus its network)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        MetricsData,
        PeriodicExportingMetricReader,
    )

    class Dropping(MetricExporter):
        def export(
            self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            return None

    reader = PeriodicExportingMetricReader(Dropping(), export_interval_millis=1000)
    return MeterProvider(metric_readers=[reader])


def _sdk_providers() -> tuple[Any, Any]:
    """An OpenTelemetry SDK's tracer provider, its spans through a BatchSpanProcessor
    into an exporter that drops them, and :func:`_sdk_meter_provider`."""
    from collections.abc import Sequence

    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class DropSpans(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(DropSpans()))
    return tracer_provider, _sdk_meter_provider()


async def publish(spec: dict[str, Any]) -> dict[str, Any]:
    """``publish_async`` ``count`` messages, then ``flush`` until every ack is in.

    Futures are not kept: holding hundreds of thousands of them would make the
    garbage collector, not the publisher, the cost being measured. Errors are counted
    from the publisher's own stats (acked vs published).

    Variants (see bench.plan.TELEMETRY_CLIENTS): ``serializer="msgspec"`` publishes one
    msgspec Struct of the same encoded size through ``value_serializer`` (building the
    object is the application's cost, left out); ``telemetry="sdk"`` traces every
    message and reports the metrics to an OpenTelemetry SDK; ``fast_path=False``
    (bench.plan.OURS_PUBLIC_API) sends through nats-py's public API only. The result says
    whether opentelemetry was imported (the worker can block it) and how many messages
    each path carried.
    """
    from liftbridge_nats import Publisher

    value: Any = payload(spec["size"])
    policy = AckPolicy[spec["ack"]]
    subjects = _subjects(spec["subject"], spec["partitions"])
    key, headers = _key_and_headers(spec)
    options: dict[str, Any] = {}
    if spec.get("serializer") == "msgspec":
        from liftbridge_nats.serializers import MsgspecSerializer

        value = _struct_value(spec["size"])
        options["value_serializer"] = MsgspecSerializer()
    if "fast_path" in spec:
        options["fast_path"] = spec["fast_path"]
    providers: tuple[Any, Any] | None = None
    if spec.get("telemetry") == "sdk":
        providers = _sdk_providers()
        options["tracing"], options["metrics"] = providers
    nc = await nats.connect(spec["nats_url"])
    try:
        async with Publisher(
            nc, ack_timeout=spec.get("timeout", PUBLISH_ACK_TIMEOUT), **options
        ) as pub:

            async def run(n: int) -> int:
                before = pub.stats.acked
                publish_async = pub.publish_async
                parts = len(subjects)
                if parts == 1:
                    subject = subjects[0]
                    for _ in range(n):
                        await publish_async(
                            subject, value, key=key, headers=headers, ack_policy=policy
                        )
                else:
                    for i in range(n):
                        await publish_async(
                            subjects[i % parts], value, key=key, headers=headers, ack_policy=policy
                        )
                await pub.flush()
                return n - (pub.stats.acked - before)

            await run(spec["warmup"])
            meter = Meter()
            meter.start()
            errors = await run(spec["count"])
            result = meter.stop(spec["count"], errors)
            result["opentelemetry_imported"] = "opentelemetry" in sys.modules
            # Which path carried the messages (the fast_path=False case must show none
            # on the fast path).
            result["fast_path_sent"] = pub.stats.fast_path_sent
            result["public_api_sent"] = pub.stats.public_api_sent
            return result
    finally:
        await nc.close()
        if providers is not None:
            for provider in providers:
                provider.shutdown()


async def _services(spec: dict[str, Any], run_pattern: Any) -> dict[str, Any]:
    """Shared set-up of the services' pattern: a Publisher, a warm-up, the timed run."""
    from liftbridge_nats import Publisher

    nc = await nats.connect(spec["nats_url"])
    try:
        async with Publisher(nc, ack_timeout=spec.get("timeout", PUBLISH_ACK_TIMEOUT)) as pub:
            await run_pattern(pub, spec["warmup"])
            before = pub.stats
            meter = Meter()
            meter.start()
            await run_pattern(pub, spec["count"])
            after = pub.stats
            errors = spec["count"] - (after.acked - before.acked)
            return meter.stop(
                spec["count"],
                errors,
                public_api_sent=after.public_api_sent - before.public_api_sent,
            )
    finally:
        await nc.close()


async def burst(spec: dict[str, Any]) -> dict[str, Any]:
    """Bursts of ``burst`` (20,000) ``await publish()`` calls started at once and
    gathered, one burst after the other, until ``count`` messages are acked."""
    value = payload(spec["size"])
    policy = AckPolicy[spec["ack"]]
    subject = spec["subject"]
    key, headers = _key_and_headers(spec)
    size = spec.get("burst", 20_000)

    async def run(pub: Any, n: int) -> None:
        publish = pub.publish
        while n > 0:
            k = min(size, n)
            results = await asyncio.gather(
                *(
                    publish(subject, value, key=key, headers=headers, ack_policy=policy)
                    for _ in range(k)
                ),
                return_exceptions=True,
            )
            del results  # errors are counted from the publisher's stats
            n -= k

    return await _services(spec, run)


async def tasks(spec: dict[str, Any]) -> dict[str, Any]:
    """``tasks`` tasks, each looping on ``await publish()``, ``count`` messages in all."""
    value = payload(spec["size"])
    policy = AckPolicy[spec["ack"]]
    subject = spec["subject"]
    key, headers = _key_and_headers(spec)
    workers = spec["tasks"]

    async def run(pub: Any, n: int) -> None:
        publish = pub.publish

        async def loop(m: int) -> None:
            for _ in range(m):
                # try/except, as a service writes it (contextlib.suppress would add an
                # object and two calls per message); errors: from the publisher's stats.
                try:  # noqa: SIM105
                    await publish(subject, value, key=key, headers=headers, ack_policy=policy)
                except Exception:
                    pass

        share, rest = divmod(n, workers)
        await asyncio.gather(*(loop(share + (i < rest)) for i in range(workers)))

    return await _services(spec, run)


async def memory(spec: dict[str, Any]) -> dict[str, Any]:
    """Publish ``count`` messages without keeping their futures: peak memory and CPU."""
    from liftbridge_nats import Publisher

    value = payload(spec["size"])
    policy = AckPolicy[spec["ack"]]
    subject = spec["subject"]
    nc = await nats.connect(spec["nats_url"])
    try:
        async with Publisher(nc, ack_timeout=spec.get("timeout", PUBLISH_ACK_TIMEOUT)) as pub:
            state = {"errors": 0}

            def check(fut: asyncio.Future[Any]) -> None:
                if _failed(fut):
                    state["errors"] += 1

            async def run(n: int) -> None:
                publish_async = pub.publish_async
                for _ in range(n):
                    (await publish_async(subject, value, ack_policy=policy)).add_done_callback(
                        check
                    )
                await pub.flush()

            await run(spec["warmup"])
            meter = Meter()
            meter.start()
            await run(spec["count"])
            return meter.stop(spec["count"], state["errors"])
    finally:
        await nc.close()


async def latency(spec: dict[str, Any]) -> dict[str, Any]:
    """Scheduled sends at ``rate`` msg/s; latency from each message's due time to its ack."""
    from liftbridge_nats import Publisher

    value = payload(spec["size"])
    policy = AckPolicy[spec["ack"]]
    subject = spec["subject"]
    rate = float(spec["rate"])
    warm_n = int(rate * spec["warmup_seconds"])
    total = warm_n + int(rate * spec["seconds"])
    acked = [0.0] * total
    failed = [False] * total
    clock = time.perf_counter
    nc = await nats.connect(spec["nats_url"])
    try:
        async with Publisher(nc, ack_timeout=spec.get("timeout", LATENCY_ACK_TIMEOUT)) as pub:

            def on_done(i: int, fut: asyncio.Future[Any]) -> None:
                acked[i] = clock()
                failed[i] = _failed(fut)

            sched = Schedule(rate, total, clock() + 0.05)
            sent = 0
            publish_async = pub.publish_async
            while sent < total:
                due = sched.due_count(clock())
                while sent < due:
                    fut = await publish_async(subject, value, ack_policy=policy)
                    fut.add_done_callback(functools.partial(on_done, sent))
                    sent += 1
                if sent < total:
                    await asyncio.sleep(max(0.0, sched.due(sent) - clock()))
            send_end = clock()
            await pub.flush()
            for _ in range(100):  # done callbacks run one loop turn after the ack
                if all(acked[warm_n:]):
                    break
                await asyncio.sleep(0.01)
        samples = [
            acked[i] - sched.due(i) for i in range(warm_n, total) if acked[i] and not failed[i]
        ]
        return {
            "count": total - warm_n,
            "errors": (total - warm_n) - len(samples),
            "offered_rate": rate,
            "achieved_send_rate": total / (send_end - sched.t0),
            **percentiles(samples),
            # Raw samples (µs) let the runner pool interleaved rounds; it drops them.
            "samples_us": [round(x * 1e6) for x in samples],
        }
    finally:
        await nc.close()


def _read_metrics(setting: str) -> Any:
    """The Client's ``metrics`` argument for a subscribe case: ``default`` (the global
    provider: the opentelemetry-api with no SDK, here), ``off``, or ``sdk``
    (:func:`_sdk_meter_provider`)."""
    if setting == "off":
        return False
    if setting == "default":
        return True
    return _sdk_meter_provider()


async def subscribe(spec: dict[str, Any]) -> dict[str, Any]:
    """Read ``count`` messages from offset 0 of one partition with ``Client.subscribe``
    (read metrics as ``spec["metrics"]`` says: see :func:`_read_metrics`)."""
    from liftbridge_nats import Client

    count = spec["count"]
    async with Client(
        spec["brokers"], metrics=_read_metrics(spec.get("metrics", "default"))
    ) as client:
        meter = Meter()
        meter.start()
        seen = 0
        async with client.subscribe(
            spec["stream"],
            partition=spec.get("partition", 0),
            start_position=StartPosition.EARLIEST,
            stop_position=StopPosition.OFFSET,
            stop_offset=count - 1,
        ) as subscription:
            async for _msg in subscription:
                seen += 1
                if seen >= count:
                    break
        return meter.stop(seen, count - seen)


def _os_threads() -> int:
    """Threads of this process as the kernel counts them (gRPC's own included)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


async def fanout(spec: dict[str, Any]) -> dict[str, Any]:
    """Read ``count`` messages from each of ``partitions`` partitions: with one task per
    partition (``Client.subscribe``) or one consumer-group member (``mode``)."""
    from liftbridge_nats import Client

    partitions, count, mode = spec["partitions"], spec["count"], spec["mode"]
    total = partitions * count
    peak_threads = _os_threads()
    done = asyncio.Event()

    async def sample_threads() -> None:
        nonlocal peak_threads
        while not done.is_set():
            peak_threads = max(peak_threads, _os_threads())
            await asyncio.sleep(0.05)

    async with Client(spec["brokers"]) as client:
        await client.fetch_metadata([spec["stream"]])
        sampler = asyncio.ensure_future(sample_threads())
        seen = 0
        if mode == "tasks":

            async def read(partition: int) -> int:
                n = 0
                async with client.subscribe(
                    spec["stream"],
                    partition=partition,
                    start_position=StartPosition.EARLIEST,
                    stop_position=StopPosition.OFFSET,
                    stop_offset=count - 1,
                ) as subscription:
                    async for _msg in subscription:
                        n += 1
                return n

            meter = Meter()
            meter.start()
            seen = sum(await asyncio.gather(*(read(p) for p in range(partitions))))
        else:
            # One member alone in its group: nobody to hand partitions over from.
            consumer = client.consumer(
                f"{spec['stream']}-{secrets.token_hex(4)}", [spec["stream"]], handover_wait=0.0
            )
            async with consumer:
                while len(consumer.assignments) < partitions:
                    await consumer.wait_for_assignment(30)
                    await asyncio.sleep(0.01)
                meter = Meter()
                meter.start()
                async for _msg in consumer:
                    seen += 1
                    if seen >= total:
                        break
        result = meter.stop(seen, total - seen)
        done.set()
        await sampler
        result["threads"] = max(peak_threads, _os_threads())
        return result


# ------------------------------------------------------------------ the blocking API
# Plain functions: the worker calls them in its main thread with no event loop running,
# as a script, a Flask view or a Celery task would (liftbridge_nats.sync runs its own).


def sync_publish_async(spec: dict[str, Any]) -> dict[str, Any]:
    """The blocking Publisher's ``publish_async`` from one thread, ``count`` times,
    then waiting on every future it returned."""
    from liftbridge_nats.sync import Publisher

    value = payload(spec["size"])
    policy = AckPolicy[spec["ack"]]
    subject = spec["subject"]
    with Publisher(spec["nats_url"], ack_timeout=spec.get("timeout", PUBLISH_ACK_TIMEOUT)) as pub:

        def run(n: int) -> int:
            publish_async = pub.publish_async
            futures = [publish_async(subject, value, ack_policy=policy) for _ in range(n)]
            return sum(f.exception() is not None for f in futures)

        run(spec["warmup"])
        meter = Meter()
        meter.start()
        errors = run(spec["count"])
        return meter.stop(spec["count"], errors)


def sync_threads(spec: dict[str, Any]) -> dict[str, Any]:
    """``tasks`` threads sharing one blocking Publisher, each looping on ``publish``,
    ``count`` messages in all (go-liftbridge's peer: goroutines looping on Publish)."""
    import threading

    from liftbridge_nats.sync import Publisher

    value = payload(spec["size"])
    policy = AckPolicy[spec["ack"]]
    subject = spec["subject"]
    workers = spec["tasks"]
    if spec.get("one_core"):
        # Before the loop's thread and the workers start: every thread inherits it.
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    with Publisher(spec["nats_url"], ack_timeout=spec.get("timeout", PUBLISH_ACK_TIMEOUT)) as pub:

        def run(n: int) -> int:
            errors = [0] * workers
            share, rest = divmod(n, workers)
            start = threading.Barrier(workers + 1)

            def loop(worker: int, m: int) -> None:
                publish = pub.publish
                start.wait()
                for _ in range(m):
                    try:
                        publish(subject, value, ack_policy=policy)
                    except Exception:
                        errors[worker] += 1

            threads = [
                threading.Thread(target=loop, args=(i, share + (i < rest))) for i in range(workers)
            ]
            for thread in threads:
                thread.start()
            start.wait()
            for thread in threads:
                thread.join()
            return sum(errors)

        run(spec["warmup"])
        meter = Meter()
        meter.start()
        errors = run(spec["count"])
        return meter.stop(spec["count"], errors, threads=workers)


def portal_call(spec: dict[str, Any]) -> dict[str, Any]:
    """What one blocking call through the shared background loop costs: ``count`` calls
    of a coroutine that does nothing, one after the other (no I/O)."""
    from liftbridge_nats.sync._portal import call

    async def nothing() -> None:
        return None

    for _ in range(min(1_000, spec["count"])):
        call(nothing)
    meter = Meter()
    meter.start()
    for _ in range(spec["count"]):
        call(nothing)
    result = meter.stop(spec["count"])
    result["us_per_call"] = result["seconds"] / spec["count"] * 1e6
    return result
