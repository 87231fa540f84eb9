"""``cursor get | set`` and ``group describe``: stored read positions and consumer groups."""

from __future__ import annotations

import argparse
from typing import Any

from liftbridge_nats import NoSuchStreamError, consumer_lag, group_cursor_id

from ._common import (
    EXIT_ERROR,
    EXIT_OK,
    add_connection_options,
    add_partition_choice,
    non_negative_int,
    open_client,
    selected_partitions,
)
from ._output import Console, key_values, table


def register(commands: Any) -> None:
    """Add the ``cursor`` and ``group`` command groups."""
    cursor = commands.add_parser(
        "cursor",
        help="read or store a cursor (a named read position per stream partition)",
        description="Cursors are named offsets stored by the cluster (in its __cursors "
        "stream), one per cursor id, stream and partition.",
    )
    sub = cursor.add_subparsers(dest="cursor_command", metavar="ACTION", required=True)
    get = sub.add_parser(
        "get",
        help="print a cursor's offset (-1: none stored)",
        description="Print the offset stored for a cursor (-1 when none is stored).",
    )
    get.add_argument("cursor_id")
    get.add_argument("stream")
    add_partition_choice(get)
    get.add_argument("--json", action="store_true", help="print JSON")
    add_connection_options(get, nats=False, brokers=True)
    get.set_defaults(handler=_get)

    put = sub.add_parser(
        "set", help="store a cursor's offset", description="Store an offset for a cursor."
    )
    put.add_argument("cursor_id")
    put.add_argument("stream")
    put.add_argument("offset", type=int)
    put.add_argument("--partition", "-p", type=non_negative_int, default=0, help="default 0")
    add_connection_options(put, nats=False, brokers=True)
    put.set_defaults(handler=_set)

    group = commands.add_parser(
        "group",
        help="inspect consumer groups",
        description="Inspect consumer groups.",
    )
    gsub = group.add_subparsers(dest="group_command", metavar="ACTION", required=True)
    describe = gsub.add_parser(
        "describe",
        help="show a group's coordinator, epoch and committed offsets",
        description="Show the broker coordinating a consumer group and its epoch; with "
        "--stream, also the offset the group committed on each partition and its lag "
        "behind the newest message. A group's committed positions are ordinary cursors "
        f"named {group_cursor_id('<group id>')}: `liftbridge-nats cursor get "
        f"{group_cursor_id('GROUP')} STREAM` reads one, `cursor set` moves it.",
    )
    describe.add_argument("group_id")
    describe.add_argument(
        "--stream", "-s", action="append", default=[], metavar="NAME", help="repeatable"
    )
    describe.add_argument("--json", action="store_true", help="print JSON")
    add_connection_options(describe, nats=False, brokers=True)
    describe.set_defaults(handler=_describe)


async def _get(args: argparse.Namespace, console: Console) -> int:
    async with open_client(args) as client:
        partitions = await selected_partitions(client, args.stream, args.partition)
        offsets = [
            (p, await client.fetch_cursor(args.cursor_id, args.stream, p)) for p in partitions
        ]
    if args.json:
        for partition, offset in offsets:
            console.json(
                {
                    "cursor_id": args.cursor_id,
                    "stream": args.stream,
                    "partition": partition,
                    "offset": offset,
                }
            )
    elif args.partition == [0] or (len(offsets) == 1 and args.partition is not None):
        console.print(str(offsets[0][1]))  # one partition asked for: the offset alone
    else:
        table(console, ["PARTITION", "OFFSET"], offsets)
    return EXIT_OK


async def _set(args: argparse.Namespace, console: Console) -> int:
    async with open_client(args) as client:
        await client.set_cursor(args.cursor_id, args.stream, args.partition, args.offset)
    console.print(f"cursor {args.cursor_id} on {args.stream}/{args.partition} set to {args.offset}")
    return EXIT_OK


async def _describe(args: argparse.Namespace, console: Console) -> int:
    async with open_client(args) as client:
        metadata = await client.fetch_metadata(groups=[args.group_id])
        info = metadata.groups.get(args.group_id)
        try:
            lags = await consumer_lag(client, args.group_id, args.stream)
        except NoSuchStreamError as exc:
            console.error(str(exc))
            return EXIT_ERROR
    rows: list[dict[str, Any]] = [
        {
            "stream": row.stream,
            "partition": row.partition,
            "committed": row.committed,
            "newest": row.newest,
            "lag": row.lag,
        }
        for row in lags
    ]
    if args.json:
        console.json(
            {
                "group_id": args.group_id,
                "cursor_id": group_cursor_id(args.group_id),
                "known": info is not None,
                "coordinator": info.coordinator if info else None,
                "epoch": info.epoch if info else None,
                "partitions": rows,
            }
        )
        return EXIT_OK
    if info is None:
        console.print(f"group {args.group_id}: no members (unknown to the cluster)")
    else:
        key_values(
            console,
            [("group", info.id), ("coordinator", info.coordinator), ("epoch", info.epoch)],
        )
    console.info(
        f"committed positions are the cursors {group_cursor_id(args.group_id)} "
        f"(`liftbridge-nats cursor get {group_cursor_id(args.group_id)} STREAM "
        "--partition all`)" + ("" if rows else "; add --stream NAME to show them with their lag")
    )
    if rows:
        console.print()
        table(
            console,
            ["STREAM", "PARTITION", "COMMITTED", "NEWEST", "LAG"],
            [(r["stream"], r["partition"], r["committed"], r["newest"], r["lag"]) for r in rows],
        )
    return EXIT_OK
