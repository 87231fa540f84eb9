"""End-to-end latency: paced publishers and readers in separate processes.

Every message carries, in its first 16 bytes, its sequence number and its scheduled
send time (wall-clock ns, big-endian): publisher and reader run on one machine, so the
reader measures from the schedule to its own receipt. Measuring from the schedule, not
from the actual send, keeps a stall of the publisher in the figures.

Publishers (``ours_publish``, ``bare_publish``) send ``total`` messages at ``rate``
msg/s; readers (``ours_subscribe``, ``ours_consumer``, ``bare_read``) create the file
``ready`` once their subscription exists, then read until ``total`` messages arrived or
``deadline`` seconds passed, and return the latencies (µs) of the messages from
``warm`` on. The runner starts the reader, waits for ``ready``, then the publisher.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import struct
import time
from array import array
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats

from bench.measure import Schedule, payload

STAMP = struct.Struct(">qq")
STAMP_SIZE = STAMP.size


class WallSchedule(Schedule):
    """A :class:`Schedule` whose due times are also given as wall-clock ns (the clock a
    reader in another process can compare with)."""

    def __init__(self, rate: float, total: int, t0: float) -> None:
        super().__init__(rate, total, t0)
        # perf_counter paces the sends (monotonic); the wall clock is read once, beside it.
        self._wall0 = time.time_ns() - round((time.perf_counter() - t0) * 1e9)

    def due_ns(self, i: int) -> int:
        """Scheduled send time of message ``i`` in Unix ns."""
        return self._wall0 + round(i / self.rate * 1e9)


async def _paced(sched: Schedule, send: Callable[[int], Awaitable[None]]) -> float:
    """Call ``send(i)`` for every message once it is due; returns the achieved rate."""
    clock = time.perf_counter
    sent = 0
    while sent < sched.total:
        due = sched.due_count(clock())
        while sent < due:
            await send(sent)
            sent += 1
        if sent < sched.total:
            await asyncio.sleep(max(0.0, sched.due(sent) - clock()))
    return sched.total / (clock() - sched.t0)


async def ours_publish(spec: dict[str, Any]) -> dict[str, Any]:
    """Our Publisher's ``publish_async`` at ``rate`` msg/s, then ``flush``."""
    from liftbridge_nats import AckPolicy, Publisher

    # The value is the payload with its first 16 bytes replaced by the stamp.
    tail = payload(spec["size"])[STAMP_SIZE:]
    pack = STAMP.pack
    policy = AckPolicy[spec["ack"]]
    subject = spec["subject"]
    total = spec["total"]
    nc = await nats.connect(spec["nats_url"])
    try:
        async with Publisher(nc, ack_timeout=spec.get("timeout", 60.0)) as pub:
            publish_async = pub.publish_async
            sched = WallSchedule(float(spec["rate"]), total, time.perf_counter() + 0.05)

            async def send(i: int) -> None:
                await publish_async(subject, pack(i, sched.due_ns(i)) + tail, ack_policy=policy)

            rate = await _paced(sched, send)
            await pub.flush()
            return {"achieved_send_rate": rate, "errors": total - pub.stats.acked}
    finally:
        await nc.close()


async def bare_publish(spec: dict[str, Any]) -> dict[str, Any]:
    """Pre-encoded envelopes published with nats-py at ``rate`` msg/s; the due time is
    written into each envelope's value when it is sent (the only per-message work)."""
    from bench.clients.bare import _envelopes

    total = spec["total"]
    nc = await nats.connect(spec["nats_url"])
    try:
        inbox = nc.new_inbox()
        acked = 0
        all_acked = asyncio.Event()

        async def on_ack(_msg: Any) -> None:
            nonlocal acked
            acked += 1
            if acked >= total:
                all_acked.set()

        sub = await nc.subscribe(inbox, cb=on_ack)
        envelopes = [bytearray(e) for e in _envelopes(spec, inbox, total, 0)]
        # Where the value's stamp sits in each envelope: find the template in the first.
        at = bytes(envelopes[0]).find(payload(spec["size"]))
        if at < 0:
            raise RuntimeError("the value was not found in the encoded envelope")
        subject = spec["subject"]
        publish = nc.publish
        sched = WallSchedule(float(spec["rate"]), total, time.perf_counter() + 0.05)

        async def send(i: int) -> None:
            env = envelopes[i]
            env[at : at + STAMP_SIZE] = STAMP.pack(i, sched.due_ns(i))
            await publish(subject, bytes(env))

        rate = await _paced(sched, send)
        with contextlib.suppress(TimeoutError):  # missing acks are counted below
            await asyncio.wait_for(all_acked.wait(), spec.get("timeout", 60.0))
        await sub.unsubscribe()
        return {"achieved_send_rate": rate, "errors": total - acked}
    finally:
        await nc.close()


class Tally:
    """What a reader saw: arrivals, and the latency of each timed one."""

    def __init__(self, total: int, warm: int) -> None:
        self.total = total
        self.warm = warm
        self.arrived = 0
        # An array, not a list: a list of 500,000 ints is 500,000 objects that every
        # full collection of the reader's garbage collector visits, which lengthens the
        # pauses this case measures.
        self.samples_us = array("q")
        self._cpu = time.process_time()
        self._wall = time.perf_counter()

    def see(self, value: bytes, now_ns: int) -> bool:
        """Count one message received at ``now_ns``; True once all have arrived."""
        seq, due_ns = STAMP.unpack_from(value)
        if seq >= self.warm:
            self.samples_us.append((now_ns - due_ns) // 1000)
        self.arrived += 1
        return self.arrived >= self.total

    def result(self) -> dict[str, Any]:
        cpu = time.process_time() - self._cpu
        return {
            "count": self.arrived,
            "errors": self.total - self.arrived,
            "seconds": time.perf_counter() - self._wall,
            "cpu_seconds": cpu,
            "cpu_us_per_msg": cpu / self.arrived * 1e6 if self.arrived else 0.0,
            "samples_us": self.samples_us.tolist(),
        }


def _ready(spec: dict[str, Any]) -> None:
    Path(spec["ready"]).write_text("ready\n")


async def ours_subscribe(spec: dict[str, Any]) -> dict[str, Any]:
    """``Client.subscribe`` from the start of partition 0, ``async for`` over it."""
    from liftbridge_nats import Client, StartPosition

    tally = Tally(spec["total"], spec["warm"])
    clock = time.time_ns
    async with (
        Client(spec["brokers"]) as client,
        client.subscribe(spec["stream"], start_position=StartPosition.EARLIEST) as subscription,
    ):
        _ready(spec)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(spec["deadline"]):
                async for msg in subscription:
                    if tally.see(msg.value, clock()):
                        break
    return tally.result()


async def ours_consumer(spec: dict[str, Any]) -> dict[str, Any]:
    """One consumer-group member (``Client.consumer``) alone in a new group, ``async for``
    over it; ready once it holds the stream's partition."""
    from liftbridge_nats import Client, StartPosition

    tally = Tally(spec["total"], spec["warm"])
    clock = time.time_ns
    async with Client(spec["brokers"]) as client:
        # Alone in its group: nobody to hand the partition over from.
        consumer = client.consumer(
            f"{spec['stream']}-{secrets.token_hex(4)}",
            [spec["stream"]],
            start_position=StartPosition.EARLIEST,
            handover_wait=0.0,
        )
        async with consumer:
            await consumer.wait_for_assignment(30)
            _ready(spec)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(spec["deadline"]):
                    async for msg in consumer:
                        if tally.see(msg.value, clock()):
                            break
    return tally.result()


async def bare_read(spec: dict[str, Any]) -> dict[str, Any]:
    """The generated grpc.aio stub alone on the partition leader (the subscribe
    section's bare reader): ready when the server's first, empty message arrives."""
    import grpc.aio

    from liftbridge_nats._proto import api_pb2, api_pb2_grpc

    tally = Tally(spec["total"], spec["warm"])
    clock = time.time_ns
    request = api_pb2.SubscribeRequest(
        stream=spec["stream"], partition=0, startPosition=api_pb2.StartPosition.EARLIEST
    )
    async with grpc.aio.insecure_channel(spec["leader"]) as channel:
        call = api_pb2_grpc.APIStub(channel).Subscribe(request)
        opened = False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(spec["deadline"] + 30):
                async for msg in call:
                    if not opened:  # the server's empty message: the subscription exists
                        opened = True
                        _ready(spec)
                        continue
                    if tally.see(msg.value, clock()):
                        break
        call.cancel()
    return tally.result()
