"""A process with a Client at work starts other programs: every child reaches its exec.

gRPC's core restarts its polling thread in a forked child; with ``close_fds`` that thread
can abort the child before the ``exec`` (PySpark starting its JVM met this). The package
turns gRPC's fork handlers off unless the application set ``GRPC_ENABLE_FORK_SUPPORT``.
Without that, 3 to 5 in 100 of these children died (SIGABRT or SIGSEGV) on the test
machine.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Callable

from liftbridge_nats import Client
from liftbridge_nats.testing import LocalCluster

STARTS = 800


def _ignore_interrupts() -> None:
    # What PySpark passes: a ``preexec_fn`` makes CPython fork rather than vfork.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start_programs(count: int) -> list[int]:
    codes = []
    for _ in range(count):
        child = subprocess.Popen(
            ["/bin/true"], stdin=subprocess.PIPE, preexec_fn=_ignore_interrupts
        )
        child.communicate()
        codes.append(child.returncode)
    return codes


async def test_programs_start_while_a_client_calls_the_brokers(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    stream = unique_name("fork")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(stream, stream)
        stop = asyncio.Event()

        async def keep_calling() -> int:
            calls = 0
            while not stop.is_set():
                await client.fetch_metadata([stream])
                calls += 1
            return calls

        caller = asyncio.create_task(keep_calling())
        try:
            codes = await asyncio.to_thread(_start_programs, STARTS)
        finally:
            stop.set()
        calls = await caller
        await client.delete_stream(stream)
    died = [code for code in codes if code != 0]
    assert not died, f"{len(died)} of {STARTS} children died before exec (exit codes {died[:5]})"
    assert calls > 0, "the client made no call while the programs started"
