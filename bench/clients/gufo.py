"""gufo-liftbridge (the asyncio gRPC peer from PyPI): unary publish, publish_bulk, subscribe.

Runs in its own worker process, like every client measured. Nothing from
liftbridge_nats is imported here, so the figures are gufo-liftbridge's alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gufo.liftbridge.api_pb2 import PublishRequest
from gufo.liftbridge.client import LiftbridgeClient
from gufo.liftbridge.types import AckPolicy, StartPosition

from bench.measure import Meter, payload


async def unary(spec: dict[str, Any]) -> dict[str, Any]:
    """``publish()`` one message at a time (each call waits for its ack over gRPC)."""
    value = payload(spec["size"])
    policy = AckPolicy[spec["ack"]]
    stream, parts = spec["stream"], spec["partitions"]
    async with LiftbridgeClient(spec["brokers"]) as client:

        async def run(start: int, n: int) -> None:
            for i in range(start, start + n):
                await client.publish(value, stream=stream, partition=i % parts, ack_policy=policy)

        await run(0, spec["warmup"])
        meter = Meter()
        meter.start()
        await run(spec["warmup"], spec["count"])
        return meter.stop(spec["count"])


async def bulk(spec: dict[str, Any]) -> dict[str, Any]:
    """``publish_bulk()``: one PublishAsync gRPC stream, acks streamed back."""
    value = payload(spec["size"])
    policy = AckPolicy[spec["ack"]]
    stream, parts = spec["stream"], spec["partitions"]
    async with LiftbridgeClient(spec["brokers"]) as client:

        def requests(start: int, n: int) -> Iterator[PublishRequest]:
            # Built lazily, inside the timed section, as an application would.
            for i in range(start, start + n):
                yield client.get_publish_request(
                    value,
                    stream=stream,
                    partition=i % parts,
                    ack_policy=policy,
                    correlation_id=str(i),
                )

        async def run(start: int, n: int) -> tuple[int, int]:
            acks = errors = 0
            async for response in client.publish_bulk(requests(start, n)):
                acks += 1
                if response.HasField("asyncError"):
                    errors += 1
                if acks == n:
                    break
            return acks, errors

        await run(0, spec["warmup"])
        meter = Meter()
        meter.start()
        acks, errors = await run(spec["warmup"], spec["count"])
        return meter.stop(acks, errors + spec["count"] - acks)


async def subscribe(spec: dict[str, Any]) -> dict[str, Any]:
    """Read ``count`` messages from the start of one partition."""
    count = spec["count"]
    async with LiftbridgeClient(spec["brokers"]) as client:
        meter = Meter()
        meter.start()
        seen = 0
        subscription = client.subscribe(
            spec["stream"],
            partition=spec.get("partition", 0),
            start_position=StartPosition.EARLIEST,
        )
        async for _msg in subscription:
            seen += 1
            if seen >= count:
                break
        result = meter.stop(seen, count - seen)
        # subscribe() is declared to return an AsyncIterable; it is an async generator,
        # closed here so that its gRPC stream ends now, not when it is collected.
        await subscription.aclose()  # type: ignore[attr-defined]
        return result
