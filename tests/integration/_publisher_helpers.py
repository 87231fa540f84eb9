"""Helpers of the publisher's integration tests: read partitions back through gRPC, and
watch what reaches nats-py's socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from liftbridge_nats import Ack, Client, Message, StartPosition, StopPosition, partition_subject
from liftbridge_nats.testing import LocalCluster


async def read_all(client: Client, stream: str, partition: int = 0) -> list[Message]:
    """Every retained message of a partition, oldest first (empty when there are none)."""
    sub = client.subscribe(
        stream,
        partition=partition,
        start_position=StartPosition.EARLIEST,
        stop_position=StopPosition.LATEST,
    )
    async with sub:
        return [msg async for msg in sub]


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 15.0) -> None:
    """Poll ``check`` until it holds; fail with a clear message otherwise."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        await asyncio.sleep(0.1)


async def nats_subscribers(cluster: LocalCluster, subject: str) -> int:
    """How many NATS subscriptions a message on ``subject`` reaches now, from the NATS
    server's monitoring endpoint.

    A partition paused over gRPC drops its NATS subscription a moment after the call
    returns; until NATS has processed that, a message to it vanishes without an ack
    instead of getting "no responders".
    """
    query = urllib.parse.urlencode({"subs": 1, "test": subject})

    def fetch() -> int:
        with urllib.request.urlopen(f"{cluster.nats_monitor_url}/subsz?{query}", timeout=5) as r:
            return int(json.load(r)["total"])

    return await asyncio.to_thread(fetch)


async def wait_paused(
    client: Client, cluster: LocalCluster, stream: str, partition: int = 0, within: float = 20.0
) -> None:
    """Wait until ``partition`` of ``stream`` is paused: the metadata says so, and its
    NATS subscription is gone.

    The metadata reports a pause a moment before the partition drops its subscription;
    a message sent in between is lost without an ack instead of getting "no responders".
    """
    subject = partition_subject((await client.stream_info(stream)).subject, partition)

    async def paused() -> bool:
        info = await client.stream_info(stream, refresh=True)
        return info.partitions[partition].paused and (await nats_subscribers(cluster, subject) == 0)

    await eventually(paused, within=within)


def acked(results: Iterable[Ack | None]) -> list[Ack]:
    """The acks of publishes that asked for one (none may be missing)."""
    out = []
    for ack in results:
        assert ack is not None, "a publish that asked for an ack returned None"
        out.append(ack)
    return out


def user_headers(msg: Message) -> dict[str, bytes]:
    """The headers a publisher set: Liftbridge adds "subject" and "reply" itself."""
    return {k: v for k, v in msg.headers.items() if k not in ("subject", "reply")}


@contextlib.contextmanager
def socket_writes(nc: Any) -> Iterator[list[int]]:
    """Record each hand-over to ``nc``'s transport (how many buffers) while the block runs.

    nats-py's flusher is a task: in a block that does not await it cannot run, so what is
    recorded there the publish calls handed to the socket themselves.
    """
    transport: Any = nc._transport
    handed: list[int] = []
    writelines = transport.writelines

    def handing(data: list[bytes]) -> None:
        handed.append(len(data))
        writelines(data)

    transport.writelines = handing
    try:
        yield handed
    finally:
        del transport.writelines
