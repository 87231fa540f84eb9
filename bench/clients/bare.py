"""The bare pipeline: pre-encoded envelopes published with nats-py, acks only counted.

This is the ceiling that the server and nats-py allow a Python publisher: no futures,
no correlation map, no per-message encoding inside the timed section. ``raw`` is
nats-py alone (the same bytes to a subject no server listens on).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import deque
from typing import Any

import nats

from bench.measure import HEADER_NAME, HEADER_VALUE, KEY, Meter, Schedule, payload, percentiles
from liftbridge_nats import AckPolicy
from liftbridge_nats._proto import api_pb2
from liftbridge_nats.wire import encode_publish


def _subjects(subject: str, partitions: int, only: list[int] | None = None) -> list[str]:
    # Partition 0 listens on the stream subject, partition N on "<subject>.N".
    return [subject if i == 0 else f"{subject}.{i}" for i in (only or range(partitions))]


def _envelopes(spec: dict[str, Any], inbox: str, count: int, start: int) -> list[bytes]:
    value = payload(spec["size"])
    policy = AckPolicy[spec["ack"]]
    # Correlation ids shaped like a publisher's (random prefix + counter).
    prefix = secrets.token_urlsafe(8)
    key, headers = (KEY, {HEADER_NAME: HEADER_VALUE}) if spec.get("keyed") else (None, None)
    return [
        encode_publish(
            value,
            key=key,
            headers=headers,
            ack_inbox=inbox,
            correlation_id=f"{prefix}.{i}",
            ack_policy=policy,
        )
        for i in range(start, start + count)
    ]


async def _burst(nc: Any, subjects: list[str], envelopes: list[bytes], inbox_sub: Any) -> None:
    publish = nc.publish
    n = len(subjects)
    if n == 1:
        subject = subjects[0]
        for env in envelopes:
            await publish(subject, env)
    else:
        for i, env in enumerate(envelopes):
            await publish(subjects[i % n], env)


async def publish(spec: dict[str, Any]) -> dict[str, Any]:
    """Publish ``count`` pre-encoded envelopes; done when the callback counted every ack."""
    nc = await nats.connect(spec["nats_url"])
    try:
        inbox = nc.new_inbox()
        subjects = _subjects(spec["subject"], spec["partitions"], spec.get("partition_list"))
        loop = asyncio.get_running_loop()
        state = {"got": 0, "want": 0}
        done: asyncio.Future[None] = loop.create_future()

        async def on_ack(_msg: Any) -> None:
            state["got"] += 1
            if state["got"] == state["want"] and not done.done():
                done.set_result(None)

        sub = await nc.subscribe(inbox, cb=on_ack)
        warm = _envelopes(spec, inbox, spec["warmup"], 0)
        timed = _envelopes(spec, inbox, spec["count"], len(warm))
        if warm:
            state["want"] = len(warm)
            await _burst(nc, subjects, warm, sub)
            await asyncio.wait_for(done, spec.get("timeout", 120))
            done = loop.create_future()
        state["want"] = len(warm) + len(timed)
        meter = Meter()
        meter.start()
        await _burst(nc, subjects, timed, sub)
        await asyncio.wait_for(done, spec.get("timeout", 120))
        result = meter.stop(len(timed))
        await sub.unsubscribe()
        return result
    finally:
        await nc.close()


async def raw(spec: dict[str, Any]) -> dict[str, Any]:
    """nats-py alone: the same envelopes to a subject no server listens on, then a flush."""
    nc = await nats.connect(spec["nats_url"])
    try:
        subject = f"bench-raw.{secrets.token_hex(6)}"
        warm = _envelopes(spec, "_INBOX.none", spec["warmup"], 0)
        timed = _envelopes(spec, "_INBOX.none", spec["count"], len(warm))
        await _burst(nc, [subject], warm, None)
        await nc.flush(timeout=60)
        meter = Meter()
        meter.start()
        await _burst(nc, [subject], timed, None)
        await nc.flush(timeout=60)
        return meter.stop(len(timed))
    finally:
        await nc.close()


async def latency(spec: dict[str, Any]) -> dict[str, Any]:
    """Scheduled sends at ``rate`` msg/s; latency from each message's due time to its ack."""
    nc = await nats.connect(spec["nats_url"])
    try:
        inbox = nc.new_inbox()
        rate = float(spec["rate"])
        warm_n = int(rate * spec["warmup_seconds"])
        total = warm_n + int(rate * spec["seconds"])
        envelopes = _envelopes(spec, inbox, total, 0)
        index = {env_cid: i for i, env_cid in enumerate(_cids(envelopes))}
        acked = [0.0] * total
        loop = asyncio.get_running_loop()
        state = {"got": 0}
        done: asyncio.Future[None] = loop.create_future()
        parse = api_pb2.Ack.FromString
        clock = time.perf_counter

        async def on_ack(msg: Any) -> None:
            now = clock()
            i = index.get(parse(msg.data[8:]).correlationId)
            if i is not None and not acked[i]:
                acked[i] = now
                state["got"] += 1
                if state["got"] == total and not done.done():
                    done.set_result(None)

        sub = await nc.subscribe(inbox, cb=on_ack)
        subject = spec["subject"]
        sched = Schedule(rate, total, clock() + 0.05)
        sent = 0
        while sent < total:
            due = sched.due_count(clock())
            while sent < due:
                await nc.publish(subject, envelopes[sent])
                sent += 1
            if sent < total:
                await asyncio.sleep(max(0.0, sched.due(sent) - clock()))
        send_end = clock()
        with contextlib.suppress(TimeoutError):  # missing acks are counted below
            await asyncio.wait_for(done, spec.get("timeout", 60))
        await sub.unsubscribe()
        samples = [acked[i] - sched.due(i) for i in range(warm_n, total) if acked[i]]
        missing = (total - warm_n) - len(samples)
        return {
            "count": total - warm_n,
            "errors": missing,
            "offered_rate": rate,
            "achieved_send_rate": total / (send_end - sched.t0),
            **percentiles(samples),
            # Raw samples (µs) let the runner pool interleaved rounds; it drops them.
            "samples_us": [round(x * 1e6) for x in samples],
        }
    finally:
        await nc.close()


def _cids(envelopes: list[bytes]) -> list[str]:
    from liftbridge_nats.wire import decode_publish

    return [decode_publish(env).correlation_id for env in envelopes]


async def subscribe_sync(spec: dict[str, Any]) -> dict[str, Any]:
    """The ceiling of a thread per subscription: the generated synchronous stub, on a
    channel with the SingleThreadedUnaryStream option, iterated by a thread that only
    counts (the SDK read this way before it read HTTP/2 on the event loop)."""
    import grpc

    from liftbridge_nats._proto import api_pb2_grpc

    count = spec["count"]
    request = api_pb2.SubscribeRequest(
        stream=spec["stream"],
        partition=spec.get("partition", 0),
        startPosition=api_pb2.StartPosition.EARLIEST,
    )
    channel = grpc.insecure_channel(spec["leader"], options=[("SingleThreadedUnaryStream", 1)])

    def read() -> int:
        call = api_pb2_grpc.APIStub(channel).Subscribe(request)
        seen = -1  # the server first sends an empty message
        for _msg in call:
            seen += 1
            if seen >= count:
                break
        call.cancel()
        return seen

    try:
        meter = Meter()
        meter.start()
        seen = await asyncio.to_thread(read)
        return meter.stop(seen, count - seen)
    finally:
        channel.close()


async def subscribe(spec: dict[str, Any]) -> dict[str, Any]:
    """The read ceiling: the generated grpc.aio stub alone, no SDK on top.

    Liftbridge streams one gRPC message per stored message, so grpc.aio's per-message
    cost bounds every Python reader built on it.
    """
    import grpc.aio

    from liftbridge_nats._proto import api_pb2_grpc

    count = spec["count"]
    request = api_pb2.SubscribeRequest(
        stream=spec["stream"],
        partition=spec.get("partition", 0),
        startPosition=api_pb2.StartPosition.EARLIEST,
    )
    async with grpc.aio.insecure_channel(spec["leader"]) as channel:
        meter = Meter()
        meter.start()
        call = api_pb2_grpc.APIStub(channel).Subscribe(request)
        seen = -1  # the server first sends an empty message: the subscription is set up
        async for _msg in call:
            seen += 1
            if seen >= count:
                break
        call.cancel()
        return meter.stop(seen, count - seen)


async def _awaited(spec: dict[str, Any], run_pattern: Any) -> dict[str, Any]:
    """Shared set-up of the bare ceilings of the services' patterns: pre-encoded
    envelopes, one plain future per message, resolved in arrival order by the ack
    subscription (one partition acks in publishing order), no parsing or matching."""
    nc = await nats.connect(spec["nats_url"])
    try:
        inbox = nc.new_inbox()
        waiting: deque[asyncio.Future[None]] = deque()
        popleft = waiting.popleft

        async def on_ack(_msg: Any) -> None:
            future = popleft()
            if not future.done():
                future.set_result(None)

        sub = await nc.subscribe(inbox, cb=on_ack)
        warm = _envelopes(spec, inbox, spec["warmup"], 0)
        timed = _envelopes(spec, inbox, spec["count"], len(warm))
        subject = spec["subject"]
        await run_pattern(nc, subject, warm, waiting)
        meter = Meter()
        meter.start()
        await run_pattern(nc, subject, timed, waiting)
        result = meter.stop(len(timed))
        await sub.unsubscribe()
        return result
    finally:
        await nc.close()


async def burst(spec: dict[str, Any]) -> dict[str, Any]:
    """The ceiling of ``ours burst 20k``: bursts of pre-encoded envelopes, a plain
    future each, gathered."""
    size = spec.get("burst", 20_000)

    async def run(
        nc: Any, subject: str, envelopes: list[bytes], waiting: deque[asyncio.Future[None]]
    ) -> None:
        loop = asyncio.get_running_loop()
        publish = nc.publish
        for start in range(0, len(envelopes), size):
            futures = []
            for env in envelopes[start : start + size]:
                future = loop.create_future()
                waiting.append(future)
                futures.append(future)
                await publish(subject, env)
            await asyncio.gather(*futures)

    return await _awaited(spec, run)


async def tasks(spec: dict[str, Any]) -> dict[str, Any]:
    """The ceiling of ``ours 100 tasks / 1000 tasks``: that many tasks, each looping
    on publishing a pre-encoded envelope and awaiting a plain future."""
    workers = spec["tasks"]

    async def run(
        nc: Any, subject: str, envelopes: list[bytes], waiting: deque[asyncio.Future[None]]
    ) -> None:
        loop = asyncio.get_running_loop()
        publish = nc.publish
        append = waiting.append

        async def worker(mine: list[bytes]) -> None:
            for env in mine:
                future = loop.create_future()
                append(future)
                await publish(subject, env)
                await future

        await asyncio.gather(*(worker(envelopes[i::workers]) for i in range(workers)))

    return await _awaited(spec, run)
