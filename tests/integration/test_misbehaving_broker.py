"""Nothing a broker sends on Subscribe can hurt the application.

A fake broker (``_fake_broker.py``, a process of its own, so that its memory and CPU
are not counted) answers the control plane properly, through grpcio, and Subscribe
with broken HTTP/2 or gRPC: frames larger than allowed, header blocks that never end
or never fit, a flood that ignores flow control, frames on the wrong stream or of the
wrong length, statuses that are digits only to ``str.isdigit``, windows pushed past
2**31 - 1, a message larger than any the client reads. For each, while a
subscription reads from it:

- the subscription ends with a typed error (an :class:`RpcError`) within
  ``resubscribe_wait`` (or ``timeout``, for a first subscribe) plus a margin, and
  resubscribes no faster than its backoff allows;
- the event loop never stalls for more than 100 ms (a task measures its lag, less
  the time a busy machine kept the process or the loop's thread waiting for a CPU;
  the test run's own heap is left out of garbage collections meanwhile);
- the memory allocated meanwhile stays within the read-ahead bound plus the reader's
  limits (the tracemalloc peak);
- no exception escapes to asyncio's handler or to a logged traceback (a
  ``ValueError`` from a parser would).

Two ways of breaking: the broker breaks a subscription it served a while, then
answers every resubscription broken (no new subscription can open); or it accepts
every subscription and breaks it at once (each opens, none delivers). A flood is
made of valid messages sent too fast: the call that carried it must end, and the
subscription may end too or go on reading, in order, through new calls.

No Liftbridge or NATS server is started, but these are integration tests all the same:
a real client (grpcio channels, the read pool, sockets) against a process on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from _fake_broker import MISBEHAVIOURS, WHOLE_ANSWER
from _waiting import wait_for

from liftbridge_nats import Client, LiftbridgeError, RpcError, StartPosition

pytestmark = pytest.mark.timeout(120)

WAIT = 2.0
"""The client's ``resubscribe_wait``, and its ``timeout`` (which bounds a first subscribe)."""
MARGIN = 3.0
READ_AHEAD = 1024 * 1024
LIMITS = 1024 * 1024
"""Memory the reader may use beyond its read-ahead: a header list (64 KiB), a frame,
one socket read (asyncio reads up to 256 KiB at once), the HPACK table, bookkeeping."""
MAX_LAG = 0.1
MOST_CALLS = 20
"""Subscribe calls a subscription may make within ``WAIT`` while its broker keeps
failing it (its backoff allows far fewer; a loop without one makes thousands)."""

# The flood is told apart: the application stops reading while it comes.
ANSWER_KINDS = sorted(set(MISBEHAVIOURS) - {"flood"})


# ---------------------------------------------------------------------- the broker


@dataclass
class FakeBroker:
    address: str
    events: Path

    def lines(self, stream: str) -> list[list[str]]:
        """What the broker recorded for ``stream``, a list of words per event."""
        if not self.events.exists():
            return []
        # Line by line: the file grows with every test, and what a test allocates
        # counts against the client's memory while it is watched.
        with self.events.open() as lines:
            return [line.split()[1:] for line in lines if line.startswith(stream + " ")]

    def calls(self, stream: str) -> int:
        """Subscribe calls of ``stream`` that got their misbehaviour."""
        return sum(1 for words in self.lines(stream) if words[0].isdecimal())


@pytest.fixture(scope="module")
def fake_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeBroker]:
    events = tmp_path_factory.mktemp("fake-broker") / "events"
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_fake_broker.py")), str(events)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().split()
        assert first[:1] == ["port"], f"the fake broker did not start: {first}"
        yield FakeBroker(f"127.0.0.1:{first[1]}", events)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


# ---------------------------------------------------------------------- measuring


@dataclass
class Seen:
    most_lag: float = 0.0
    most_lag_at: float = 0.0  # seconds after the watch began
    peak: int = 0
    most_gc: float = 0.0  # the longest garbage collection while watched


class Starvation:
    """When the whole process was kept from running (a busy machine), seen by a plain
    thread that sleeps 5 ms at a time and records each oversleep.

    The loop's own ticker cannot tell a loop held up by the SDK from a process the OS
    left waiting. This thread can: while the loop computes, the interpreter hands it
    the GIL every switch interval (5 ms), and while the loop blocks on I/O it runs
    freely; only when the OS runs neither does it oversleep as long as the loop.
    """

    TICK = 0.005

    def __init__(self) -> None:
        self.gaps: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="starvation", daemon=True)

    def __enter__(self) -> Starvation:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            before = time.monotonic()
            time.sleep(self.TICK)
            after = time.monotonic()
            if after - before > 2 * self.TICK:
                self.gaps.append((before + self.TICK, after))

    def within(self, start: float, end: float) -> float:
        """Seconds of ``[start, end]`` (monotonic time) the process was kept waiting."""
        return sum(
            max(0.0, min(end, gap_end) - max(start, gap_start))
            for gap_start, gap_end in list(self.gaps)
        )


@contextlib.asynccontextmanager
async def watching() -> AsyncIterator[Seen]:
    """Measure the event loop's longest stall and the memory allocated at the peak
    (above what was allocated on entry) while the block runs.

    A stall is the loop's lag behind a 5 ms sleep, less the time the OS kept the whole
    process waiting meanwhile (see :class:`Starvation`) or the loop's thread alone
    (runnable, waiting for a CPU), but never less than the CPU time the loop's thread
    spent in that lag: code that holds the loop is counted on a busy machine as on an
    idle one. The heap the test run held on entry is frozen (left out of garbage
    collections).
    """
    seen = Seen()
    loop = asyncio.get_running_loop()
    assert type(loop).time is asyncio.BaseEventLoop.time  # loop time is time.monotonic

    start = loop.time()

    # Lags worth a second look: (from, to, lag, the loop thread's CPU time and its wait
    # for a CPU meanwhile). They are judged once the watch ends, when the starvation
    # thread has recorded its gaps (after a pause of the whole process, either thread
    # may run first).
    lags: list[tuple[float, float, float, float, float]] = []
    # The seconds this thread (the loop's) has waited, runnable, for a CPU the OS gave
    # to others: a loop kept off the CPU alone, while the starvation thread ran. (Opened
    # below, where it is closed whatever happens; -1 off Linux.)
    schedstat = -1

    def waited_for_cpu() -> float:
        return int(os.pread(schedstat, 64, 0).split()[1]) / 1e9 if schedstat >= 0 else 0.0

    async def tick() -> None:
        while True:
            before, cpu_before, waited_before = loop.time(), time.thread_time(), waited_for_cpu()
            await asyncio.sleep(0.005)
            after = loop.time()
            if after - before - 0.005 > 0.01:
                lags.append(
                    (
                        before,
                        after,
                        after - before - 0.005,
                        time.thread_time() - cpu_before,
                        waited_for_cpu() - waited_before,
                    )
                )

    collecting: list[float] = []

    def timed_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting.append(time.perf_counter())
        elif collecting:
            seen.most_gc = max(seen.most_gc, time.perf_counter() - collecting.pop())

    # The test run's own heap (what the earlier tests left, beside what collection
    # loaded, frozen already: see conftest) is not the client's, yet a full collection
    # walks it on whichever thread allocates. Frozen, it is left out; what is allocated
    # while watched, the client's garbage included, is still collected on the clock.
    # (It stays frozen: unfreezing would take the conftest's freeze back too.)
    gc.collect()
    gc.freeze()
    gc.callbacks.append(timed_collection)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    try:
        with contextlib.suppress(OSError):  # not Linux: only the starvation thread tells
            schedstat = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        with Starvation() as starved:
            ticker = asyncio.ensure_future(tick())
            try:
                yield seen
            finally:
                ticker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ticker
                seen.peak = tracemalloc.get_traced_memory()[1] - base
                tracemalloc.stop()
    finally:
        gc.callbacks.remove(timed_collection)
        if schedstat >= 0:
            os.close(schedstat)
    for before, after, lag, cpu, off_cpu in lags:
        held = max(cpu, lag - max(off_cpu, starved.within(before, after)))
        if held > seen.most_lag:
            seen.most_lag, seen.most_lag_at = held, before - start


def client(fake: FakeBroker) -> Client:
    return Client(
        [fake.address],
        timeout=WAIT,
        resubscribe_wait=WAIT,
        read_ahead_bytes=READ_AHEAD,
        metrics=False,
    )


def stream_name(kind: str, when: str) -> str:
    return f"{kind}-{when}-{uuid.uuid4().hex[:8]}"


@dataclass
class Outcome:
    offsets: list[int]  # the first hundred offsets read
    count: int  # messages read
    in_order: bool  # offsets 0, 1, 2... with no gap and none twice
    error: BaseException | None
    ended: bool  # False: still reading at the deadline
    began: float  # when the misbehaviour started, after the watch began
    took: float  # from the misbehaviour's start to the end of the iteration
    resubscribes: int
    seen: Seen
    calls: int = 0  # Subscribe calls the broker answered


async def read_until_it_ends(
    client: Client,
    name: str,
    *,
    healthy: int,
    within: float,
    pause: Callable[[], Awaitable[None]] | None = None,
) -> Outcome:
    """Subscribe to ``name`` from the start and read: the first ``healthy`` messages
    come before the misbehaviour, whose clock starts after them; reading stops when
    the iteration ends or ``within`` seconds later. ``pause``: awaited after those
    messages, the application reading nothing meanwhile (the clock starts after it)."""
    loop = asyncio.get_running_loop()
    # (A flood delivers tens of thousands of messages: what is kept of them stays small,
    # its memory counts against the client's.)
    offsets: list[int] = []
    count = 0
    in_order = True
    error: BaseException | None = None
    ended = True
    sub = client.subscribe(name, start_position=StartPosition.EARLIEST)
    async with watching() as seen:
        watched = began = loop.time()
        try:
            async with asyncio.timeout(within) as timer:
                async for message in sub:
                    in_order = in_order and message.offset == count
                    count += 1
                    if len(offsets) < 100:
                        offsets.append(message.offset)
                    if count == healthy:
                        if pause is not None:
                            timer.reschedule(None)
                            await pause()
                        began = loop.time()
                        timer.reschedule(began + within)
                    # An application does something with each message and yields to
                    # the loop; one that does not makes a stall of its own, draining
                    # a full read-ahead, which is not the client's.
                    await asyncio.sleep(0)
        except LiftbridgeError as exc:
            error = exc
        except TimeoutError:
            ended = False
        took = loop.time() - began
        await sub.aclose()
    return Outcome(
        offsets, count, in_order, error, ended, began - watched, took, sub.resubscribes, seen
    )


def broken_bounds(outcome: Outcome, caplog: pytest.LogCaptureFixture) -> list[str]:
    """The promises about the application's health that ``outcome`` broke."""
    seen = outcome.seen
    broken = []
    if seen.most_lag > MAX_LAG:
        broken.append(
            f"the event loop stalled for {seen.most_lag * 1000:.0f} ms, "
            f"{seen.most_lag_at - outcome.began:+.2f} s from the misbehaviour's start "
            f"(the longest garbage collection meanwhile: {seen.most_gc * 1000:.0f} ms)"
        )
    if seen.peak > READ_AHEAD + LIMITS:
        broken.append(f"{seen.peak / 2**20:.1f} MiB were allocated at the peak")
    # An exception from a parser reaches asyncio's handler, or a catch-all that logs
    # it with its traceback: either way not one of the typed endings.
    escaped = [
        r
        for r in caplog.records
        if r.levelno >= logging.ERROR and (r.name == "asyncio" or r.exc_info is not None)
    ]
    if escaped:
        broken.append(f"an exception escaped, logged by {escaped[0].name}: {escaped[0].message}")
    return broken


def check(outcome: Outcome, limit: float, caplog: pytest.LogCaptureFixture) -> None:
    """Every promise at once, so that a failure tells all that went wrong."""
    broken = broken_bounds(outcome, caplog)
    if not outcome.ended:
        broken.insert(0, f"the subscription was still open {outcome.took:.1f} s on")
    elif outcome.error is None:
        broken.insert(0, f"the iteration ended without an error after {outcome.took:.1f} s")
    elif not isinstance(outcome.error, RpcError):
        broken.insert(0, f"the subscription ended with {outcome.error!r}, not an RpcError")
    elif outcome.took > limit:
        broken.insert(0, f"it ended after {outcome.took:.1f} s, not within {limit} s")
    if outcome.calls > MOST_CALLS:
        broken.append(f"it subscribed {outcome.calls} times in {outcome.took:.1f} s")
    assert not broken, "; ".join(broken)


async def read_from(fake: FakeBroker, kind: str, when: str, *, healthy: int = 3) -> Outcome:
    """Read a stream the fake broker answers with ``kind`` (``when``: see _fake_broker),
    for ``WAIT + MARGIN`` seconds at most after the misbehaviour (plus a grace that
    tells "late" apart from "never")."""
    name = stream_name(kind, when)
    async with client(fake) as c:
        await c.create_stream(name, name)
        outcome = await read_until_it_ends(c, name, healthy=healthy, within=WAIT + MARGIN + 5)
    outcome.calls = fake.calls(name)
    assert outcome.calls >= 1, "the broker never misbehaved"
    return outcome


# ---------------------------------------------------------------------- the tests


@pytest.mark.parametrize("kind", ANSWER_KINDS)
async def test_a_broker_breaking_subscribe_ends_the_subscription_with_an_error(
    kind: str, fake_broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    healthy = 0 if kind in WHOLE_ANSWER else 3
    outcome = await read_from(fake_broker, kind, "answer", healthy=healthy)
    check(outcome, WAIT + MARGIN, caplog)
    assert outcome.offsets == list(range(healthy))


@pytest.mark.parametrize("kind", ["settings_on_stream", "grpc_status_superscript", "unavailable"])
async def test_a_broker_breaking_every_stream_after_accepting_it_is_given_up(
    kind: str, fake_broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker that accepts every subscription (the handshake comes) and breaks it at
    once: resubscribing makes no progress, so the subscription must not go on for
    ever, nor resubscribe in a tight loop."""
    outcome = await read_from(fake_broker, kind, "every")
    check(outcome, WAIT + MARGIN, caplog)
    assert outcome.offsets == [0, 1, 2]


@pytest.mark.slow
async def test_a_flood_ignoring_flow_control_costs_no_memory_and_no_stall(
    fake_broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """64 MiB of messages sent, every call, while the application reads nothing: the
    reader holds its read-ahead at most and the event loop runs on. The call that
    flooded ends; once the application reads again, the subscription either ends
    with an error or goes on through new calls, its messages in order and none twice
    (the messages are valid: it is the broker's pace that is wrong)."""
    name = stream_name("flood", "every")

    def flooded() -> bool:
        # The first call sent its 64 MiB, or its connection was dropped.
        return any(w[0] in ("closed", "flooded") for w in fake_broker.lines(name))

    async def until_flooded() -> None:
        await wait_for(flooded, "the flood to end", within=60)

    async with client(fake_broker) as c:
        await c.create_stream(name, name)
        outcome = await read_until_it_ends(
            c, name, healthy=3, within=WAIT + MARGIN, pause=until_flooded
        )
    broken = broken_bounds(outcome, caplog)
    if outcome.ended and not isinstance(outcome.error, RpcError):
        broken.insert(0, f"the subscription ended with {outcome.error!r}, not an RpcError")
    if not outcome.ended and outcome.resubscribes == 0:
        broken.insert(0, "the call that flooded never ended")
    assert not broken, "; ".join(broken)
    assert outcome.in_order and outcome.count >= 3


async def test_the_fake_broker_serves_a_healthy_subscription_first(
    fake_broker: FakeBroker,
) -> None:
    """The harness itself: metadata through grpcio, then the first three messages read
    in order before any misbehaviour."""
    name = stream_name("unavailable", "answer")
    started = time.monotonic()
    async with client(fake_broker) as c:
        await c.create_stream(name, name)
        assert name in (await c.fetch_metadata()).streams
        async with c.subscribe(name, start_position=StartPosition.EARLIEST) as sub:
            assert [(await anext(sub)).offset for _ in range(3)] == [0, 1, 2]
    assert time.monotonic() - started < 10
    assert fake_broker.lines(name)[0][:3] == ["1", "3", "opened"]
