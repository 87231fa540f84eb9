"""The blocking API against a real server: threads sharing a publisher, reading back,
a consumer group rebalancing, and the ways a process can end (no close, Ctrl-C)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from _examples import run_example

from liftbridge_nats import (
    Ack,
    LiftbridgeError,
    StartPosition,
    StreamPartition,
)
from liftbridge_nats.sync import Client, Consumer, EventLoopRunningError, Publisher

THREADS, PER_THREAD = 8, 5_000


def _until(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_threads_share_one_publisher_and_read_back(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    stream = unique_name("sync")
    with Client(liftbridge_cluster.brokers) as client:
        client.create_stream(stream, stream)
        with Publisher(liftbridge_cluster.nats_url) as pub:

            def work(thread: int) -> list[Ack | None]:
                acks: list[Ack | None] = []
                # The first messages one at a time, blocking; the rest pipelined.
                for i in range(100):
                    acks.append(pub.publish(stream, b"%d-%d" % (thread, i)))
                for start in range(100, PER_THREAD, 1_000):
                    futures = [
                        pub.publish_async(stream, b"%d-%d" % (thread, i))
                        for i in range(start, min(start + 1_000, PER_THREAD))
                    ]
                    acks.extend(f.result() for f in futures)
                return acks

            with ThreadPoolExecutor(THREADS) as pool:
                per_thread = list(pool.map(work, range(THREADS)))
            stats = pub.stats

        total = THREADS * PER_THREAD
        offsets = [ack.offset for acks in per_thread for ack in acks if ack is not None]
        assert sorted(offsets) == list(range(total))  # each acked once, none lost
        # One thread's messages reach the loop in the order it published them.
        for acks in per_thread:
            mine = [ack.offset for ack in acks if ack is not None]
            assert mine == sorted(mine)
        assert (stats.acked, stats.pending, stats.timed_out) == (total, 0, 0)

        with client.subscribe(
            stream, start_position=StartPosition.EARLIEST, stop_offset=total - 1
        ) as sub:
            values = Counter(msg.value for msg in sub)
            assert sub.last_offset == total - 1
        expected = {b"%d-%d" % (t, i) for t in range(THREADS) for i in range(PER_THREAD)}
        assert set(values) == expected
        assert set(values.values()) == {1}


def test_blocking_call_in_a_running_loop_fails_at_once(liftbridge_cluster: Any) -> None:
    with (
        Client(liftbridge_cluster.brokers) as client,
        Publisher(liftbridge_cluster.nats_url) as pub,
    ):

        async def inside() -> list[tuple[str, float]]:
            seen = []
            for call in (client.fetch_metadata, lambda: pub.publish("any", b"x")):
                started = time.monotonic()
                with pytest.raises(EventLoopRunningError) as info:
                    call()
                seen.append((str(info.value), time.monotonic() - started))
            return seen

        (metadata, took_metadata), (publish, took_publish) = asyncio.run(inside())
    assert took_metadata < 1.0 and took_publish < 1.0
    assert "await liftbridge_nats.Client.fetch_metadata(...)" in metadata
    assert "Publisher.publish" in publish
    assert issubclass(EventLoopRunningError, LiftbridgeError)
    assert issubclass(EventLoopRunningError, RuntimeError)


def _script(cluster: Any, body: str) -> list[str]:
    prelude = f"""
        import signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from liftbridge_nats.sync import Client, Publisher
        BROKERS, NATS = {cluster.brokers!r}, {cluster.nats_url!r}
    """
    code = textwrap.dedent(prelude) + textwrap.dedent(body)
    return [sys.executable, "-W", "error", "-c", code]


def test_process_exits_without_close_and_sends_what_it_queued(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    stream = unique_name("exit")
    body = f"""
        client = Client(BROKERS)
        client.create_stream({stream!r}, {stream!r})
        pub = Publisher(NATS, client=client)
        print(pub.publish({stream!r}, b"one").offset, flush=True)
        futures = [pub.publish_async({stream!r}, b"more") for _ in range(100)]
        print("leaving", flush=True)
    """
    started = time.monotonic()
    done = subprocess.run(
        _script(liftbridge_cluster, body), capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "leaving"]
    assert time.monotonic() - started < 20
    # The messages still queued at exit were sent and acked in the exit's grace.
    with Client(liftbridge_cluster.brokers) as client:
        info = client.fetch_partition_metadata(stream, 0)
    assert info.newest_offset == 100


def test_ctrl_c_during_a_blocking_publish_ends_the_process(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    # No stream records this subject and no-responders reports are off: the ack never
    # comes, and the publish would block for its whole minute.
    body = f"""
        pub = Publisher(NATS, ack_timeout=60, no_responders=False)
        print("publishing", flush=True)
        pub.publish({unique_name("nobody")!r}, b"lost")
    """
    proc = subprocess.Popen(
        _script(liftbridge_cluster, body),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "publishing"
        time.sleep(0.5)  # in the blocking publish by now
        proc.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        _, err = proc.communicate(timeout=20)
        took = time.monotonic() - interrupted
    finally:
        proc.kill()
    assert "KeyboardInterrupt" in err
    assert proc.returncode != 0
    # Far below the publish's 60 s: the exit gives messages in flight 1 s, then closes.
    assert took < 10, f"exit took {took:.1f} s after Ctrl-C"


def test_consumer_group_rebalances_between_two_blocking_members(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    stream, group, partitions = unique_name("grp"), unique_name("g"), 4
    everything = {StreamPartition(stream, p) for p in range(partitions)}
    delivered: Counter[tuple[int, int]] = Counter()

    def publish_round(client: Client) -> None:
        for i in range(10 * partitions):
            client.publish_to_stream(stream, b"m%d" % i, partition=i % partitions)

    def read(members: list[Consumer], count: int) -> None:
        target = sum(delivered.values()) + count
        deadline = time.monotonic() + 15

        def take() -> bool:
            for member in members:
                for messages in member.getmany(timeout=0.1).values():
                    for msg in messages:
                        delivered[(msg.partition, msg.offset)] += 1
            return sum(delivered.values()) >= target or time.monotonic() > deadline

        _until(take, f"{count} messages")

    with Client(liftbridge_cluster.brokers) as client:
        client.create_stream(stream, stream, partitions=partitions)

        def member(label: str) -> Consumer:
            return client.consumer(
                group,
                stream,
                consumer_id=label,
                assignment_interval=0.3,
                auto_checkpoint_interval=0.5,
                start_position=StartPosition.EARLIEST,
            )

        with member("a") as a:
            assert a.wait_for_assignment(10)
            _until(lambda: a.assignment() == everything, "a to hold every partition")
            publish_round(client)
            read([a], 40)

            a.checkpoint()
            with member("b") as b:
                _until(
                    lambda: (
                        a.assignments | b.assignments == everything
                        and not a.assignments & b.assignments
                        and bool(a.assignments)
                        and bool(b.assignments)
                    ),
                    "a and b to split the partitions",
                )
                publish_round(client)
                read([a, b], 40)
                b.checkpoint()
                a.close()  # checkpoints and leaves: b takes everything
                _until(lambda: b.assignments == everything, "b to take a's partitions")
                publish_round(client)
                for msg in b:  # the blocking iteration, one message per hop
                    delivered[(msg.partition, msg.offset)] += 1
                    if sum(delivered.values()) >= 120:
                        break

    assert sorted(delivered) == [(p, o) for p in range(partitions) for o in range(30)]
    assert set(delivered.values()) == {1}  # each message delivered once


async def test_sync_publish_example(liftbridge_cluster: Any) -> None:
    out = await run_example("sync_publish.py", liftbridge_cluster, "--threads", "4")
    lines = out.splitlines()
    assert lines[0].startswith("publish        offset=0 stream=")
    assert lines[1] == "publish_async  [1, 2, 3, 4, 5]"
    assert lines[2] == "4 threads      400 messages acked, offsets all distinct: True"
    assert lines[3] == "read back      406 messages"
    assert lines[-1] == "OK"
