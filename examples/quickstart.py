"""Quickstart: publish 100,000 messages with ALL acks over NATS, read them back over gRPC.

    python examples/quickstart.py                  # starts a throw-away local cluster
    python examples/quickstart.py --brokers 127.0.0.1:9292 --nats nats://127.0.0.1:4222
    python examples/quickstart.py --count 10000

What happens: a stream is created through the gRPC control plane; a Publisher sends the
messages straight onto the stream's NATS subject (pipelined, acks matched by correlation
id on one NATS inbox); the stream is then read back through gRPC and checked.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

import nats
from _example_cli import run_example

from liftbridge_nats import AckPolicy, Client, Publisher, StartPosition, StopPosition


class ProgressBar:
    """A plain text progress bar on stderr (redrawn at most 10 times a second)."""

    def __init__(self, label: str, total: int, width: int = 30) -> None:
        self.label, self.total, self.width = label, total, width
        self.started = time.perf_counter()
        self._last = 0.0

    def update(self, done: int, *, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        filled = self.width * done // max(self.total, 1)
        rate = done / max(now - self.started, 1e-9)
        bar = "#" * filled + "-" * (self.width - filled)
        sys.stderr.write(f"\r{self.label:8s} [{bar}] {done:>7}/{self.total} {rate:>9,.0f} msg/s")
        sys.stderr.flush()

    def close(self) -> None:
        self.update(self.total, force=True)
        sys.stderr.write("\n")


async def main(brokers: list[str], nats_url: str, count: int) -> None:
    stream = f"quickstart-{uuid.uuid4().hex[:6]}"
    value = b"x" * 100
    nc = await nats.connect(nats_url)
    try:
        async with Client(brokers) as client:
            await client.create_stream(stream, stream)  # subject and name alike

            async with Publisher(nc) as pub:
                bar = ProgressBar("publish", count)
                started = time.perf_counter()
                futures = []
                for i in range(count):
                    futures.append(await pub.publish_async(stream, value, ack_policy=AckPolicy.ALL))
                    if i % 1024 == 0:
                        bar.update(i + 1 - pub.pending)  # acked so far
                acks = [await f for f in futures]
                publish_seconds = time.perf_counter() - started
                bar.close()
            assert all(ack is not None for ack in acks)
            offsets = [ack.offset for ack in acks if ack is not None]

            bar = ProgressBar("read", count)
            started = time.perf_counter()
            read = 0
            sub = client.subscribe(
                stream, start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
            )
            async with sub:
                async for msg in sub:
                    if msg.value != value or msg.offset != read:
                        raise SystemExit(f"unexpected message at offset {msg.offset}")
                    read += 1
                    if read % 1024 == 0:
                        bar.update(read)
            read_seconds = time.perf_counter() - started
            bar.close()
            await client.delete_stream(stream)
    finally:
        await nc.close()

    print(f"stream      {stream}")
    print(f"published   {count} messages of {len(value)} bytes, ALL acks")
    print(
        f"acked       {len(offsets)} (offsets {offsets[0]}..{offsets[-1]}, all distinct: "
        f"{len(set(offsets)) == len(offsets)})"
    )
    print(f"publish     {publish_seconds:.2f} s = {count / publish_seconds:,.0f} msg/s")
    print(f"read back   {read} messages in {read_seconds:.2f} s = {read / read_seconds:,.0f} msg/s")
    print("OK" if read == count == len(offsets) else "MISMATCH")


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=int, default=100_000, help="messages to publish")


if __name__ == "__main__":
    run_example(main, __doc__, _arguments)
