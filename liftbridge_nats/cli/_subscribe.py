"""``subscribe`` and ``tail``: read a stream partition (or all of them) to stdout.

``subscribe`` reads from the oldest message (or ``--offset``/``--since``/``--new-only``/
``--latest``) up to the newest one and exits, or keeps following with ``--follow``;
``tail`` prints the last N messages the same way. Several partitions are read
concurrently and printed as they arrive.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from liftbridge_nats import Message, StartPosition, StopPosition

from ._common import (
    EXIT_OK,
    add_connection_options,
    add_partition_choice,
    non_negative_int,
    open_client,
    parse_time,
    selected_partitions,
)
from ._output import FORMATS, Console, print_message

if TYPE_CHECKING:
    from liftbridge_nats import Client


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stream")
    add_partition_choice(parser)
    parser.add_argument(
        "--follow", "-f", action="store_true", help="keep reading new messages until Ctrl-C"
    )
    parser.add_argument(
        "--output",
        "-o",
        choices=FORMATS,
        default="text",
        help="text (offset, time, key, headers, value; default), raw (values only), "
        "json (one object per line), hex (hex dump)",
    )
    parser.add_argument(
        "--max-messages", "-m", type=non_negative_int, metavar="N", help="stop after N messages"
    )
    parser.add_argument(
        "--read-isr-replica",
        action="store_true",
        help="read from any in-sync replica instead of the leader",
    )
    parser.add_argument(
        "--resume", action="store_true", help="resume the partition if it is paused"
    )
    add_connection_options(parser, nats=False, brokers=True)


def register(commands: Any) -> None:
    """Add the ``subscribe`` and ``tail`` commands."""
    sub = commands.add_parser(
        "subscribe",
        help="read messages from a stream",
        description="Read a stream partition from a start position to a stop position. "
        "By default: from the oldest message to the newest, then exit; --follow keeps "
        "reading. Times are ISO 8601 (2026-01-31T12:00:00Z) or a duration ago (10m).",
    )
    _add_common(sub)
    start = sub.add_argument_group("start position (default: the oldest message)")
    where = start.add_mutually_exclusive_group()
    where.add_argument("--offset", type=non_negative_int, metavar="N", help="start at offset N")
    where.add_argument("--since", type=parse_time, metavar="TIME", help="start at a time")
    where.add_argument(
        "--new-only", action="store_true", help="only messages published from now on (implies -f)"
    )
    where.add_argument("--latest", action="store_true", help="start at the newest message")
    stop = sub.add_argument_group("stop position (default: the newest message, unless -f)")
    until = stop.add_mutually_exclusive_group()
    until.add_argument(
        "--to-offset", type=non_negative_int, metavar="N", help="stop after offset N"
    )
    until.add_argument("--until", type=parse_time, metavar="TIME", help="stop at a time")
    sub.set_defaults(handler=_subscribe)

    tail = commands.add_parser(
        "tail",
        help="print the last messages of a stream",
        description="Print the last N messages of a stream partition (of each one, with "
        "--partition all or a list); -f keeps following.",
    )
    tail.add_argument(
        "--lines", "-n", type=non_negative_int, default=10, metavar="N", help="default 10"
    )
    _add_common(tail)
    tail.set_defaults(handler=_tail)


def _stop_options(args: argparse.Namespace) -> dict[str, Any]:
    if getattr(args, "to_offset", None) is not None:
        return {"stop_offset": args.to_offset}
    if getattr(args, "until", None) is not None:
        return {"stop_time": args.until}
    if args.follow or getattr(args, "new_only", False):
        return {"stop_position": StopPosition.ON_CANCEL}
    return {"stop_position": StopPosition.LATEST}


def _start_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.offset is not None:
        return {"start_offset": args.offset}
    if args.since is not None:
        return {"start_time": args.since}
    if args.new_only:
        return {"start_position": StartPosition.NEW_ONLY}
    if args.latest:
        return {"start_position": StartPosition.LATEST}
    return {"start_position": StartPosition.EARLIEST}


async def _merged(
    client: Client, args: argparse.Namespace, starts: dict[int, dict[str, Any]]
) -> AsyncIterator[Message]:
    """Messages of every partition in ``starts`` as they arrive, one subscription each."""
    queue: asyncio.Queue[Message | BaseException | None] = asyncio.Queue(maxsize=1000)
    common = {
        "read_isr_replica": args.read_isr_replica,
        "resume": args.resume,
        **_stop_options(args),
    }

    async def pump(partition: int, start: dict[str, Any]) -> None:
        try:
            async with client.subscribe(
                args.stream, partition=partition, **start, **common
            ) as subscription:
                async for msg in subscription:
                    await queue.put(msg)
        except Exception as exc:
            await queue.put(exc)
        else:
            await queue.put(None)

    tasks = [asyncio.create_task(pump(p, start)) for p, start in starts.items()]
    running = len(tasks)
    try:
        while running:
            item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _print_all(
    console: Console, args: argparse.Namespace, messages: AsyncIterator[Message]
) -> None:
    limit = args.max_messages
    if limit == 0:
        return
    seen = 0
    async for msg in messages:
        print_message(console, msg, args.output)
        seen += 1
        if limit is not None and seen >= limit:
            break


async def _subscribe(args: argparse.Namespace, console: Console) -> int:
    async with open_client(args) as client:
        partitions = await selected_partitions(client, args.stream, args.partition)
        start = _start_options(args)
        messages = _merged(client, args, {p: start for p in partitions})
        try:
            await _print_all(console, args, messages)
        finally:
            await messages.aclose()  # type: ignore[attr-defined]
    return EXIT_OK


async def _tail(args: argparse.Namespace, console: Console) -> int:
    async with open_client(args) as client:
        starts: dict[int, dict[str, Any]] = {}
        for partition in await selected_partitions(client, args.stream, args.partition):
            info = await client.fetch_partition_metadata(args.stream, partition)
            newest = info.newest_offset
            if newest >= 0 and args.lines > 0:
                starts[partition] = {"start_offset": max(0, newest - args.lines + 1)}
            elif args.follow:
                # Nothing to show from the past: start with what comes next.
                starts[partition] = {"start_position": StartPosition.NEW_ONLY}
        if not starts:
            return EXIT_OK
        messages = _merged(client, args, starts)
        try:
            await _print_all(console, args, messages)
        finally:
            await messages.aclose()  # type: ignore[attr-defined]
    return EXIT_OK
