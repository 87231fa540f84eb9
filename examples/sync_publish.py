"""Publishing and reading without asyncio: the blocking API, from plain threads.

python examples/sync_publish.py                  # starts a throw-away local cluster
python examples/sync_publish.py --brokers 127.0.0.1:9292 --nats nats://127.0.0.1:4222

No event loop appears here: liftbridge_nats.sync runs the SDK on one background loop
of its own, and every call blocks until done, as in a Flask view or a Celery task.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from liftbridge_nats import StopPosition
from liftbridge_nats.sync import Client, Publisher


def main(brokers: list[str], nats_url: str, threads: int) -> None:
    stream = f"sync-{uuid.uuid4().hex[:6]}"
    with Client(brokers) as client:
        client.create_stream(stream, stream)
        with Publisher(nats_url, client=client) as pub:
            # One message: the call returns once the partition leader acked it.
            ack = pub.publish(stream, b"first", key=b"order-1")
            assert ack is not None
            print(f"publish        offset={ack.offset} stream={ack.stream}")

            # Pipelined: futures now (concurrent.futures.Future), acks later.
            futures = [pub.publish_async(stream, b"n%d" % i) for i in range(5)]
            print("publish_async ", [f.result().offset for f in futures])  # type: ignore[union-attr]

            # Many threads share one publisher; each call blocks its own thread only.
            def work(worker: int) -> list[int]:
                acks = [pub.publish(stream, b"w%d-%d" % (worker, i)) for i in range(100)]
                return [a.offset for a in acks if a is not None]

            with ThreadPoolExecutor(threads) as pool:
                offsets = [o for batch in pool.map(work, range(threads)) for o in batch]
            distinct = len(set(offsets)) == len(offsets)
            print(
                f"{threads} threads      {len(offsets)} messages acked, offsets all distinct: {distinct}"
            )

        # Reading: a subscription is a plain iterator (and a context manager).
        with client.subscribe(stream, start_offset=0, stop_position=StopPosition.LATEST) as sub:
            count = sum(1 for _ in sub)
        print(f"read back      {count} messages")
    print("OK")


@contextlib.contextmanager
def cluster(brokers: str | None, nats_url: str | None) -> Iterator[tuple[list[str], str]]:
    """The cluster given on the command line, or a local one started for the run."""
    if brokers and nats_url:
        yield brokers.split(","), nats_url
        return
    from liftbridge_nats.testing import LocalCluster

    print("starting a local NATS + Liftbridge cluster ...", file=sys.stderr)
    with LocalCluster(1) as local:
        yield local.brokers, local.nats_url


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--brokers", help="comma-separated host:port of Liftbridge brokers")
    parser.add_argument("--nats", help="NATS URL of the cluster, e.g. nats://127.0.0.1:4222")
    parser.add_argument("--threads", type=int, default=8, help="publishing threads")
    args = parser.parse_args()
    with cluster(args.brokers, args.nats) as (found_brokers, found_nats):
        main(found_brokers, found_nats, args.threads)
