"""``stream create | delete | list | describe | pause | resume | readonly``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from liftbridge_nats import StreamExistsError
from liftbridge_nats._checks import DEFAULT_MAX_PARTITIONS, check_stream_name

from ._common import (
    EXIT_OK,
    add_connection_options,
    duration_arg,
    non_negative_int,
    open_client,
    parse_size,
    partitions_arg,
    positive_int,
)
from ._output import Console, key_values, table

if TYPE_CHECKING:
    from liftbridge_nats import Client, PartitionInfo, StreamInfo

# Streams the server creates for itself; `stream list` hides them unless --all.
_INTERNAL_PREFIX = "__"


def _size(text: str) -> int:
    return parse_size(text)


def register(commands: Any) -> None:
    """Add the ``stream`` command group."""
    stream = commands.add_parser(
        "stream",
        help="create, delete, list, describe, pause, resume or make streams readonly",
        description="Manage Liftbridge streams over the gRPC API.",
    )
    sub = stream.add_subparsers(dest="stream_command", metavar="ACTION", required=True)

    create = sub.add_parser(
        "create",
        help="create a stream",
        description="Create a stream that stores the messages of a NATS subject. Options "
        "left out take the server's defaults. Sizes accept units (10MB, 1GiB), durations "
        "too (90s, 1h, 7d).",
    )
    create.add_argument("name", help="stream name")
    create.add_argument("--subject", help="NATS subject to store (default: the stream name)")
    create.add_argument("--partitions", "-p", type=positive_int, default=1, help="default 1")
    create.add_argument(
        "--max-partitions",
        type=positive_int,
        default=DEFAULT_MAX_PARTITIONS,
        metavar="N",
        help=f"refuse --partitions above N (default {DEFAULT_MAX_PARTITIONS}): the server "
        "sets up every partition on each replica at once, and a large count keeps it busy "
        "long after the call has timed out",
    )
    create.add_argument(
        "--replication-factor",
        "-r",
        type=int,
        default=1,
        help="replicas (-1: every broker); default 1",
    )
    create.add_argument("--group", help="load-balance group: members share the subject's messages")
    create.add_argument("--retention-max-bytes", type=_size, metavar="SIZE")
    create.add_argument("--retention-max-messages", type=non_negative_int, metavar="N")
    create.add_argument("--retention-max-age", type=duration_arg, metavar="DURATION")
    create.add_argument("--cleaner-interval", type=duration_arg, metavar="DURATION")
    create.add_argument("--segment-max-bytes", type=_size, metavar="SIZE")
    create.add_argument("--segment-max-age", type=duration_arg, metavar="DURATION")
    create.add_argument(
        "--compact",
        action=argparse.BooleanOptionalAction,
        help="log compaction (keep the last message per key)",
    )
    create.add_argument("--compact-max-goroutines", type=positive_int, metavar="N")
    create.add_argument(
        "--auto-pause-time",
        type=duration_arg,
        metavar="DURATION",
        help="pause partitions idle this long (a paused partition drops NATS publishes)",
    )
    create.add_argument(
        "--auto-pause-disable-if-subscribers", action=argparse.BooleanOptionalAction
    )
    create.add_argument(
        "--min-isr", type=positive_int, metavar="N", help="minimum in-sync replicas"
    )
    create.add_argument(
        "--occ",
        "--optimistic-concurrency-control",
        dest="occ",
        action=argparse.BooleanOptionalAction,
        help="optimistic concurrency control (publishers may send an expected offset)",
    )
    create.add_argument(
        "--encryption", action=argparse.BooleanOptionalAction, help="encrypt messages at rest"
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed if the stream already exists"
    )
    add_connection_options(create, nats=False, brokers=True)
    create.set_defaults(handler=_create)

    delete = sub.add_parser("delete", help="delete streams", description="Delete streams.")
    delete.add_argument("names", nargs="+", metavar="NAME")
    add_connection_options(delete, nats=False, brokers=True)
    delete.set_defaults(handler=_delete)

    listing = sub.add_parser("list", help="list streams", description="List the cluster's streams.")
    listing.add_argument("--all", "-a", action="store_true", help="include internal __ streams")
    listing.add_argument("--json", action="store_true", help="one JSON object per stream")
    add_connection_options(listing, nats=False, brokers=True)
    listing.set_defaults(handler=_list)

    describe = sub.add_parser(
        "describe",
        help="show a stream's partitions",
        description="Show a stream's subject and every partition: leader, replicas, ISR, "
        "offsets, paused and readonly state.",
    )
    describe.add_argument("name")
    describe.add_argument("--json", action="store_true", help="print JSON")
    add_connection_options(describe, nats=False, brokers=True)
    describe.set_defaults(handler=_describe)

    pause = sub.add_parser(
        "pause",
        help="pause partitions",
        description="Pause partitions (all by default). A paused partition drops NATS "
        "publishes until a gRPC publish or a subscription with --resume wakes it.",
    )
    pause.add_argument("name")
    pause.add_argument("--partitions", type=partitions_arg, metavar="0,1,...")
    pause.add_argument(
        "--resume-all",
        action="store_true",
        help="when one partition wakes up, resume every paused partition of the stream",
    )
    add_connection_options(pause, nats=False, brokers=True)
    pause.set_defaults(handler=_pause)

    resume = sub.add_parser(
        "resume", help="resume paused partitions", description="Resume paused partitions."
    )
    resume.add_argument("name")
    resume.add_argument("--partitions", type=partitions_arg, metavar="0,1,...")
    add_connection_options(resume, nats=False, brokers=True)
    resume.set_defaults(handler=_resume)

    readonly = sub.add_parser(
        "readonly",
        help="make partitions readonly (or writable with --off)",
        description="Make partitions readonly (all by default): they keep their messages "
        "and take no new ones. --off makes them writable again.",
    )
    readonly.add_argument("name")
    readonly.add_argument("--partitions", type=partitions_arg, metavar="0,1,...")
    readonly.add_argument("--off", action="store_true", help="make the partitions writable again")
    add_connection_options(readonly, nats=False, brokers=True)
    readonly.set_defaults(handler=_readonly)


_CREATE_OPTIONS = (
    "group",
    "retention_max_bytes",
    "retention_max_messages",
    "retention_max_age",
    "cleaner_interval",
    "segment_max_bytes",
    "segment_max_age",
    "compact_max_goroutines",
    "auto_pause_time",
    "auto_pause_disable_if_subscribers",
    "min_isr",
    "encryption",
)


async def _create(args: argparse.Namespace, console: Console) -> int:
    options: dict[str, Any] = {
        name: getattr(args, name) for name in _CREATE_OPTIONS if getattr(args, name) is not None
    }
    if args.compact is not None:
        options["compact_enabled"] = args.compact
    if args.occ is not None:
        options["optimistic_concurrency_control"] = args.occ
    subject = args.subject or args.name
    # Every argument is checked before connecting: a name or option the server cannot
    # store must never reach it.
    from liftbridge_nats._requests import create_stream_request

    create_stream_request(
        subject,
        args.name,
        max_partitions=args.max_partitions,
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        **options,
    )
    async with open_client(args, max_partitions=args.max_partitions) as client:
        try:
            await client.create_stream(
                subject,
                args.name,
                partitions=args.partitions,
                replication_factor=args.replication_factor,
                **options,
            )
        except StreamExistsError:
            if not args.if_not_exists:
                raise
            console.print(f"stream {args.name} already exists")
            return EXIT_OK
    console.print(
        f"created stream {console.style(args.name, 'bold')} on subject {subject} "
        f"({args.partitions} partition{'s' if args.partitions != 1 else ''}, "
        f"replication factor {args.replication_factor})"
    )
    return EXIT_OK


async def _delete(args: argparse.Namespace, console: Console) -> int:
    for name in args.names:
        check_stream_name(name)
    async with open_client(args) as client:
        for name in args.names:
            await client.delete_stream(name)
            console.print(f"deleted stream {name}")
    return EXIT_OK


def _partition_json(p: PartitionInfo, paused: bool) -> dict[str, Any]:
    changed = p.pause_changed.latest_time
    return {
        "id": p.id,
        "leader": p.leader,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "high_watermark": p.high_watermark,
        "newest_offset": p.newest_offset,
        "paused": paused,
        "pause_changed": changed.isoformat() if changed else None,
        "readonly": p.readonly,
    }


def _stream_json(s: StreamInfo, paused: dict[int, bool]) -> dict[str, Any]:
    return {
        "name": s.name,
        "subject": s.subject,
        "created": s.creation_time.isoformat() if s.creation_timestamp else None,
        "partitions": [_partition_json(s.partitions[i], paused[i]) for i in sorted(s.partitions)],
    }


async def _really_paused(client: Client, stream: str, p: PartitionInfo) -> bool:
    """Whether partition ``p`` is paused now, despite the stale flag in the metadata.

    Liftbridge v1.9.0 keeps reporting ``paused`` once a partition was ever paused, but
    updates the pause timestamps on every pause and resume. One change since creation
    can only be the pause; messages received after the latest change mean it runs.
    Otherwise (paused, resumed, perhaps paused again) its leader decides: a paused
    partition is closed, and its leader refuses FetchPartitionMetadata as a non-leader.
    """
    from liftbridge_nats import RpcError

    changes = p.pause_changed
    if not p.paused:
        return False
    if changes.first == changes.latest:
        return True
    if p.messages_received.latest > changes.latest:
        return False
    try:
        await client.fetch_partition_metadata(stream, p.id, timeout=5)
    except RpcError as exc:
        return exc.code == "FAILED_PRECONDITION"
    return False


def _messages(s: StreamInfo) -> int:
    # Offsets start at 0, so newest + 1 messages were written (retention may have removed some).
    return sum(p.newest_offset + 1 for p in s.partitions.values() if p.newest_offset >= 0)


async def _list(args: argparse.Namespace, console: Console) -> int:
    async with open_client(args) as client:
        metadata = await client.fetch_metadata()
        streams = [
            s
            for name, s in sorted(metadata.streams.items())
            if args.all or not name.startswith(_INTERNAL_PREFIX)
        ]
        if args.json:
            for s in streams:
                paused = {
                    pid: await _really_paused(client, s.name, p) for pid, p in s.partitions.items()
                }
                console.json(_stream_json(s, paused))
            return EXIT_OK
    if not streams:
        console.info("no streams")
        return EXIT_OK
    table(
        console,
        ["NAME", "SUBJECT", "PARTITIONS", "MESSAGES", "CREATED"],
        [
            (
                s.name,
                s.subject,
                s.partition_count,
                _messages(s),
                s.creation_time.isoformat(timespec="seconds") if s.creation_timestamp else "",
            )
            for s in streams
        ],
    )
    return EXIT_OK


async def _describe(args: argparse.Namespace, console: Console) -> int:
    async with open_client(args) as client:
        info = await client.stream_info(args.name, refresh=True)
        paused = {
            pid: await _really_paused(client, info.name, p) for pid, p in info.partitions.items()
        }
    if args.json:
        console.json(_stream_json(info, paused))
        return EXIT_OK
    key_values(
        console,
        [
            ("stream", info.name),
            ("subject", info.subject),
            ("created", info.creation_time.isoformat(timespec="seconds")),
            ("partitions", info.partition_count),
        ],
    )
    console.print()
    table(
        console,
        ["PARTITION", "LEADER", "REPLICAS", "ISR", "HW", "NEWEST", "STATE"],
        [
            (
                p.id,
                p.leader or "-",
                ",".join(p.replicas),
                ",".join(p.isr),
                p.high_watermark,
                p.newest_offset,
                _state(p, paused[p.id]),
            )
            for p in (info.partitions[i] for i in sorted(info.partitions))
        ],
    )
    return EXIT_OK


def _state(p: PartitionInfo, paused: bool) -> str:
    """``active``, ``paused``, ``resumed`` (paused once, running again), ``readonly``."""
    if paused:
        words = ["paused"]
    elif p.pause_changed.latest:
        words = ["resumed"]
    else:
        words = []
    if p.readonly:
        words.append("readonly")
    return ",".join(words) or "active"


def _which(partitions: list[int] | None) -> str:
    if not partitions:
        return "all partitions"
    return "partition" + ("s " if len(partitions) > 1 else " ") + ",".join(map(str, partitions))


async def _pause(args: argparse.Namespace, console: Console) -> int:
    async with open_client(args) as client:
        await client.pause_stream(args.name, partitions=args.partitions, resume_all=args.resume_all)
    console.print(f"paused {_which(args.partitions)} of {args.name}")
    return EXIT_OK


async def _resume(args: argparse.Namespace, console: Console) -> int:
    async with open_client(args) as client:
        await client.resume_stream(args.name, partitions=args.partitions)
    console.print(f"resumed {_which(args.partitions)} of {args.name}")
    return EXIT_OK


async def _readonly(args: argparse.Namespace, console: Console) -> int:
    async with open_client(args) as client:
        await client.set_stream_readonly(
            args.name, partitions=args.partitions, readonly=not args.off
        )
    state = "writable" if args.off else "readonly"
    console.print(f"made {_which(args.partitions)} of {args.name} {state}")
    return EXIT_OK
