"""Shared pieces of the fault suite: outcome bookkeeping and stream read-back.

Every fault test publishes messages whose values are unique (``b"<tag>-<n>"``), injects
a fault into real servers (its own cluster from ``liftbridge_cluster_factory``: local
processes, or containers under ``LIFTBRIDGE_NATS_BACKEND=containers``; never the shared
session clusters), then checks the promises a durable log makes:

* every publish ended: with an ack, or with a ``LiftbridgeError`` (nothing else, and
  nothing left pending);
* every acked message is in the stream exactly once, at the offset its ack gave
  (``lost`` counts acked messages missing from the stream and must be 0);
* the publisher works again after the fault.

Each test records its figures with the ``fault_report`` fixture; they are printed in
the terminal summary (``FAULT <test>: sent=... acked=... raised=... lost=...``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import nats

from liftbridge_nats import Ack, Client, LiftbridgeError, Message, StartPosition, StopPosition

# Client options for fault tests: reconnect forever, quickly.
NATS_OPTIONS: dict[str, Any] = {
    "connect_timeout": 3,
    "max_reconnect_attempts": -1,
    "reconnect_time_wait": 0.25,
}

# The ContainerCluster network of tests that keep nats-py clients connected across a NATS
# kill. Through a published port, docker-proxy accepts a client's reconnect attempt while
# the NATS container is going or coming back and then drops it, and nats-py (2.x) leaves
# the transport of such an attempt unclosed (a ResourceWarning per attempt). With host
# networking a stopped NATS refuses connections at once, as a nats-server process does.
NATS_FAULT_NETWORK = "host"

# Short replica timeouts for 3-node clusters (with the server's defaults a fail-over
# takes 15 s and the first ALL acks on a new stream up to 10 s). The harness sets these for multi-node
# clusters already; they are spelled out here so the fault tests do not depend on it.
REPLICA_TIMEOUTS: dict[str, Any] = {
    "clustering.replica.max.idle.wait": "500ms",
    "clustering.replica.max.leader.timeout": "3s",
    "clustering.replica.max.lag.time": "5s",
}


async def connect_nats(url: str, **extra: Any) -> Any:
    """A nats-py client with the fault suite's reconnect options."""
    return await nats.connect(url, **{**NATS_OPTIONS, **extra})


@dataclass
class Outcomes:
    """What became of every publish of a fault test."""

    sent: int = 0
    acks: dict[bytes, Ack] = field(default_factory=dict)
    raised: Counter[str] = field(default_factory=Counter)
    unexpected: list[BaseException] = field(default_factory=list)

    @property
    def acked(self) -> int:
        """Publishes that returned an ack."""
        return len(self.acks)

    @property
    def raised_total(self) -> int:
        """Publishes that raised a LiftbridgeError."""
        return sum(self.raised.values())

    def add(self, value: bytes, result: Any) -> None:
        """Record the result of the publish of ``value`` (an Ack or an exception)."""
        self.sent += 1
        if isinstance(result, Ack):
            assert value not in self.acks, f"{value!r} was published twice by the test"
            self.acks[value] = result
        elif isinstance(result, LiftbridgeError):
            self.raised[type(result).__name__] += 1
        else:
            self.unexpected.append(result)

    def check_ended(self) -> None:
        """Every publish ended with an ack or a LiftbridgeError."""
        assert not self.unexpected, f"publishes raised non-SDK errors: {self.unexpected[:5]!r}"
        assert self.acked + self.raised_total == self.sent

    def check_stream(self, messages: Sequence[Message]) -> StreamCheck:
        """Compare the acks with what the stream holds; return the counts."""
        where: dict[bytes, list[int]] = {}
        for message in messages:
            where.setdefault(message.value, []).append(message.offset)
        lost = [v for v in self.acks if v not in where]
        duplicated_acked = [v for v in self.acks if len(where.get(v, ())) > 1]
        wrong_offset = [
            v for v, ack in self.acks.items() if v in where and ack.offset not in where[v]
        ]
        offsets = [m.offset for m in messages]
        return StreamCheck(
            stored=len(messages),
            lost=len(lost),
            lost_offsets=sorted(self.acks[v].offset for v in lost),
            duplicated_acked=len(duplicated_acked),
            duplicated_any=sum(1 for offs in where.values() if len(offs) > 1),
            wrong_offset=len(wrong_offset),
            contiguous=offsets == list(range(offsets[0], offsets[0] + len(offsets)))
            if offsets
            else True,
            examples=(lost + duplicated_acked + wrong_offset)[:5],
        )

    def summary(self) -> str:
        """``sent=.. acked=.. raised=..(by type)`` for the report."""
        kinds = ", ".join(f"{k}={n}" for k, n in sorted(self.raised.items()))
        return f"sent={self.sent} acked={self.acked} raised={self.raised_total}" + (
            f" ({kinds})" if kinds else ""
        )


@dataclass(frozen=True)
class StreamCheck:
    """The read-back of a stream against the acks."""

    stored: int
    lost: int
    lost_offsets: list[int]
    """The offsets the acks of the lost messages gave."""
    duplicated_acked: int
    duplicated_any: int
    wrong_offset: int
    contiguous: bool
    examples: list[bytes]

    def assert_consistent(self) -> None:
        """No acked message stored twice or at another offset than acked; no gap."""
        assert self.duplicated_acked == 0, f"acked and stored twice: {self.examples!r}"
        assert self.wrong_offset == 0, f"stored at another offset than acked: {self.examples!r}"
        assert self.contiguous, "the stream's offsets have a gap"

    def assert_ok(self) -> None:
        """No acked message lost, duplicated or at another offset than acked; no gap."""
        self.assert_consistent()
        assert self.lost == 0, (
            f"acked but not stored: {self.examples!r} at offsets {self.lost_offsets[:10]}"
        )


async def gather_outcomes(
    values: Sequence[bytes], futures: Sequence[asyncio.Future[Any]], outcomes: Outcomes
) -> None:
    """Wait for every future and record its result against its value."""
    results = await asyncio.gather(*futures, return_exceptions=True)
    for value, result in zip(values, results, strict=True):
        outcomes.add(value, result)


async def read_stream(client: Client, stream: str, partition: int = 0) -> list[Message]:
    """Every message of a partition, oldest first (EARLIEST to LATEST)."""
    out: list[Message] = []
    async with client.subscribe(
        stream,
        partition=partition,
        start_position=StartPosition.EARLIEST,
        stop_position=StopPosition.LATEST,
    ) as sub:
        async for message in sub:
            out.append(message)
    return out


async def wait_until(
    predicate: Callable[[], Any], *, within: float, interval: float = 0.1, what: str
) -> None:
    """Poll ``predicate`` (sync or async) until it is truthy; fail after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(interval)
