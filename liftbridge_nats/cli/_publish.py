"""``publish``: send messages onto NATS in the Liftbridge envelope and wait for their acks.

A value comes from the argument, a file or stdin (whole, or one message per line with
``--lines``). ``--count``/``--size`` turn it into a load run: messages are pipelined
(``publish_async``), a progress bar runs on a terminal, and a closing line reports
throughput and ack latency (timed from each call to its ack).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import string
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from liftbridge_nats import Ack, AckPolicy, LiftbridgeError

from ._common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_connection_options,
    header_arg,
    non_negative_int,
    open_client,
    open_nats,
    parse_size,
    positive_float,
    positive_int,
)
from ._output import Console, Progress, latency_summary, throughput_line

if TYPE_CHECKING:
    from liftbridge_nats import Client

_DEFAULT_LOAD_SIZE = 100
LOAD_MAX_INFLIGHT = 1024
# After Ctrl-C, acks already on their way get this long before the run is summed up.
_INTERRUPT_GRACE = 1.0


def add_publish_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``publish`` and the built-in ``bench``."""
    parser.add_argument(
        "--ack-policy",
        choices=[p.name.lower() for p in AckPolicy],
        default="leader",
        help="leader (default): after the leader stored it; all: after every in-sync "
        "replica has it; none: fire and forget",
    )
    parser.add_argument(
        "--ack-timeout",
        type=positive_float,
        metavar="SECONDS",
        help="how long to wait for each ack (default: the Publisher's)",
    )
    parser.add_argument(
        "--max-inflight",
        type=positive_int,
        metavar="N",
        help=f"unacked messages allowed at once (load runs: default {LOAD_MAX_INFLIGHT})",
    )


def register(commands: Any) -> None:
    """Add the ``publish`` command."""
    publish = commands.add_parser(
        "publish",
        help="publish messages to a stream (or a NATS subject) and wait for acks",
        description="Publish to a stream over NATS in the Liftbridge envelope and print "
        "each ack. The value is VALUE, --file, or stdin when it is not a terminal. "
        "Without --partition or --key, messages go round-robin over the partitions. "
        "--count/--size make a load run with a progress bar and a throughput/latency "
        "summary.",
    )
    publish.add_argument("stream", help="stream name (a NATS subject with --subject)")
    publish.add_argument("value", nargs="?", help="the message value (UTF-8)")
    publish.add_argument(
        "--subject",
        action="store_true",
        help="STREAM is a NATS subject: publish there without looking the stream up",
    )
    publish.add_argument(
        "--file", "-F", metavar="PATH", help="read the value from PATH (- = stdin)"
    )
    publish.add_argument(
        "--lines",
        "-l",
        action="store_true",
        help="one message per non-empty input line (default: the whole input is one)",
    )
    publish.add_argument(
        "--key", "-k", help="message key (also picks the partition: CRC-32 of the key)"
    )
    publish.add_argument(
        "--header",
        "-H",
        type=header_arg,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="message header (repeatable)",
    )
    publish.add_argument("--partition", "-p", type=non_negative_int, help="partition id")
    publish.add_argument(
        "--expected-offset",
        type=int,
        metavar="OFFSET",
        help="optimistic concurrency: the offset this message must get (OCC streams)",
    )
    add_publish_options(publish)
    load = publish.add_argument_group("load run")
    load.add_argument("--count", "-n", type=positive_int, metavar="N", help="publish N messages")
    load.add_argument(
        "--size",
        type=parse_size,
        metavar="BYTES",
        help=f"generated value size (default {_DEFAULT_LOAD_SIZE} B with --count)",
    )
    publish.add_argument("--json", action="store_true", help="print each ack as JSON")
    publish.add_argument("--quiet", "-q", action="store_true", help="print nothing on success")
    add_connection_options(publish, nats=True, brokers=True)
    publish.set_defaults(handler=_publish)


def _read_input(args: argparse.Namespace) -> bytes | None:
    if args.value is not None:
        if args.file is not None:
            raise CliError("give VALUE or --file, not both", EXIT_USAGE)
        return str(args.value).encode()
    if args.file == "-":
        return sys.stdin.buffer.read()
    implicit_stdin = args.file is None and args.count is None and args.size is None
    if implicit_stdin and not sys.stdin.isatty():
        # Empty implicit input is almost always a mistake (`</dev/null`, a forgotten
        # pipe), not a wish to store an empty message: `--file -` or VALUE "" does that.
        return sys.stdin.buffer.read() or None
    if args.file is not None:
        with open(args.file, "rb") as fh:
            return fh.read()
    return None


def _values(args: argparse.Namespace) -> tuple[list[bytes], int]:
    """The distinct values to send, and how many messages in all."""
    data = _read_input(args)
    if args.size is not None and data is not None:
        raise CliError(
            "--size generates values; do not give VALUE, --file or stdin too", EXIT_USAGE
        )
    if data is None:
        if args.count is None and args.size is None:
            raise CliError(
                "nothing to publish: give VALUE, --file PATH, pipe data on stdin, or --count N",
                EXIT_USAGE,
            )
        size = args.size if args.size is not None else _DEFAULT_LOAD_SIZE
        alphabet = (string.ascii_letters + string.digits).encode()
        values = [bytes(alphabet[i % len(alphabet)] for i in range(size))]
    elif args.lines:
        values = [line for line in data.splitlines() if line]
        if not values:
            raise CliError("the input has no lines to publish", EXIT_USAGE)
    else:
        values = [data]
    total = len(values) * (args.count or 1) if args.lines else (args.count or 1)
    return values, total


@dataclass
class _Run:
    """Bookkeeping of a publish run; kept up to date as messages go and acks come, so
    that a run stopped half-way still reports what happened."""

    total: int = 0
    started: float = field(default_factory=time.perf_counter)
    elapsed: float = 0.0
    sent: int = 0
    acked: int = 0
    failed: int = 0
    nbytes: int = 0
    latencies: list[float] = field(default_factory=list)
    first_error: BaseException | None = None
    stopped: str | None = None
    """Why the run ended before sending everything (Ctrl-C, a lost connection)."""
    interrupted: bool = False
    unanswered: int = 0
    """Messages sent that had neither an ack nor an error when the run was summed up."""
    counting: bool = True

    def settled(self, fut: asyncio.Future[Any], sent_at: float) -> None:
        """Count one message's outcome (a done-callback of its future)."""
        if not self.counting or fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = exc
        else:
            self.acked += 1
            self.latencies.append(time.perf_counter() - sent_at)

    def freeze(self) -> None:
        """Sum up now: what has no answer yet stays unanswered (not failed)."""
        self.counting = False
        self.unanswered = max(0, self.sent - self.acked - self.failed)
        self.elapsed = time.perf_counter() - self.started

    def summary(self) -> str:
        """``sent 1,200 of 5,000: 1,000 acked, 50 failed, 150 without an answer``."""
        text = f"sent {self.sent:,} of {self.total:,}: {self.acked:,} acked, {self.failed:,} failed"
        if self.unanswered:
            text += f", {self.unanswered:,} without an answer (they may or may not be stored)"
        return text


async def _target(
    args: argparse.Namespace, client: Client | None
) -> Callable[[int, bytes | None], tuple[str, int]]:
    """A function (message number, key) -> (NATS subject, partition)."""
    from liftbridge_nats import KeyPartitioner, partition_subject

    if client is None:
        base = args.stream
        fixed = args.partition or 0
        return lambda _i, _key: (partition_subject(base, fixed), fixed)
    info = await client.stream_info(args.stream)
    count = info.partition_count
    if args.partition is not None:
        if args.partition >= count:
            raise CliError(
                f"stream {args.stream} has {count} partition(s); --partition must be < {count}"
            )
        subject = partition_subject(info.subject, args.partition)
        return lambda _i, _key: (subject, args.partition)
    if args.key is not None:
        # The SDK's key partitioner: CRC-32 of the key modulo the count, as in Go.
        p = KeyPartitioner().partition(args.stream, args.key.encode(), b"", count)
        subject = partition_subject(info.subject, p)
        return lambda _i, _key: (subject, p)
    subjects = [partition_subject(info.subject, p) for p in range(count)]
    return lambda i, _key: (subjects[i % count], i % count)


def _ack_json(ack: Ack) -> dict[str, Any]:
    return {
        "stream": ack.stream,
        "partition": ack.partition,
        "subject": ack.message_subject,
        "offset": ack.offset,
        "correlation_id": ack.correlation_id,
        "ack_policy": ack.ack_policy.name.lower(),
    }


async def publish_run(
    console: Console,
    nc: Any,
    client: Client | None,
    args: argparse.Namespace,
    values: list[bytes],
    total: int,
    *,
    load: bool,
) -> _Run:
    """Publish ``total`` messages cycling over ``values``; return the run's bookkeeping.

    Without ``load`` the messages go one at a time (acks printed in input order; a stream
    target goes through ``publish_to_stream``, which resumes a paused partition); with
    ``load`` they are pipelined through ``publish_async`` and only counted.
    """
    from liftbridge_nats import Publisher

    options: dict[str, Any] = {}
    if args.ack_timeout is not None:
        options["ack_timeout"] = args.ack_timeout
    if args.max_inflight is not None:
        options["max_inflight"] = args.max_inflight
    elif load:
        # A window this size keeps a 2-core server busy; a far larger one only queues
        # messages until their ack deadlines pass when the server falls behind.
        options["max_inflight"] = LOAD_MAX_INFLIGHT
    route = await _target(args, client)
    run = _Run(total=total)
    async with Publisher(nc, client=client, **options) as pub:
        try:
            if load:
                await _pipelined(console, pub, args, route, values, run)
            else:
                await _one_by_one(console, pub, args, route, values, run)
        except asyncio.CancelledError:
            # Ctrl-C: stop sending, give acks on their way a moment, then sum up (a
            # second Ctrl-C ends the process at once).
            run.stopped, run.interrupted = "interrupted", True
            with contextlib.suppress(LiftbridgeError):
                await pub.flush(timeout=_INTERRUPT_GRACE)
            run.freeze()
            await pub.close(timeout=0)
    if run.counting:
        run.freeze()
    return run


def _message_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "key": args.key.encode() if getattr(args, "key", None) is not None else None,
        "headers": dict(getattr(args, "header", []) or []) or None,
        "ack_policy": AckPolicy[args.ack_policy.upper()],
        "expected_offset": getattr(args, "expected_offset", None),
    }


async def _one_by_one(
    console: Console,
    pub: Any,
    args: argparse.Namespace,
    route: Callable[[int, bytes | None], tuple[str, int]],
    values: list[bytes],
    run: _Run,
) -> None:
    options = _message_options(args)
    for i in range(run.total):
        value = values[i % len(values)]
        subject, partition = route(i, options["key"])
        sent_at = time.perf_counter()
        run.sent += 1
        try:
            if args.subject:
                ack = await pub.publish(subject, value, **options)
            else:
                ack = await pub.publish_to_stream(
                    args.stream, value, partition=partition, **options
                )
        except LiftbridgeError as exc:
            run.failed += 1
            if run.total == 1:
                raise
            run.first_error = exc
            run.stopped = str(exc) or type(exc).__name__
            return
        run.latencies.append(time.perf_counter() - sent_at)
        run.acked += 1
        run.nbytes += len(value)
        if ack is None or args.quiet:
            continue
        if args.json:
            console.json(_ack_json(ack))
        else:
            console.print(
                f"{ack.stream}/{ack.partition} offset {console.style(str(ack.offset), 'bold')}"
            )


async def _pipelined(
    console: Console,
    pub: Any,
    args: argparse.Namespace,
    route: Callable[[int, bytes | None], tuple[str, int]],
    values: list[bytes],
    run: _Run,
) -> None:
    options = _message_options(args)
    progress = Progress(console, run.total, "publish ")

    def done(fut: asyncio.Future[Ack | None], sent_at: float) -> None:
        run.settled(fut, sent_at)
        progress.advance()

    pending: list[asyncio.Future[Ack | None]] = []
    run.started = time.perf_counter()
    try:
        for i in range(run.total):
            value = values[i % len(values)]
            subject, _ = route(i, options["key"])
            sent_at = time.perf_counter()
            try:
                fut = await pub.publish_async(subject, value, **options)
            except LiftbridgeError as exc:
                # This message was refused (NATS gone, publisher closed): stop sending
                # and let the messages already sent settle.
                run.stopped = str(exc) or type(exc).__name__
                break
            fut.add_done_callback(functools.partial(done, sent_at=sent_at))
            pending.append(fut)
            run.sent += 1
            run.nbytes += len(value)
            if len(pending) >= 10_000:
                pending = [f for f in pending if not f.done()]
        if pending:
            await asyncio.wait(pending)
        await asyncio.sleep(0)  # let the last done-callbacks run
        run.freeze()
    finally:
        progress.close()
    if options["ack_policy"] is AckPolicy.NONE:
        run.latencies.clear()


async def _publish(args: argparse.Namespace, console: Console) -> int:
    values, total = _values(args)
    load = args.count is not None
    async with open_nats(args) as nc:
        if args.subject:
            run = await publish_run(console, nc, None, args, values, total, load=load)
        else:
            async with open_client(args) as client:
                run = await publish_run(console, nc, client, args, values, total, load=load)
    if load and not args.quiet and run.sent:
        latency = latency_summary(run.latencies) if run.latencies else None
        console.print(throughput_line(run.sent, run.nbytes, run.elapsed, latency))
    if run.interrupted:
        console.info(f"interrupted: {run.summary()}")
        return EXIT_INTERRUPTED
    if run.stopped is not None:
        console.error(f"stopped: {run.stopped.rstrip('.')}. {run.summary()}")
        return EXIT_ERROR
    if run.first_error is not None:
        prefix = f"{run.summary()}; first error: " if run.sent > 1 else ""
        if isinstance(run.first_error, LiftbridgeError):
            console.error(prefix + (str(run.first_error) or type(run.first_error).__name__))
            return EXIT_ERROR
        raise run.first_error
    return EXIT_OK
