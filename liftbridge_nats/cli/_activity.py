"""``activity``: follow the cluster's activity stream (stream and group operations)."""

from __future__ import annotations

import argparse
from typing import Any

from liftbridge_nats import StartPosition, StopPosition
from liftbridge_nats._messages import ns_to_datetime

from ._common import EXIT_OK, add_connection_options, non_negative_int, open_client
from ._output import Console


def register(commands: Any) -> None:
    """Add the ``activity`` command."""
    activity = commands.add_parser(
        "activity",
        help="follow the activity stream (creates, deletes, pauses, group joins ...)",
        description="Print the cluster's activity events, from the oldest by default, and "
        "keep following (--no-follow stops at the newest). The brokers must run with "
        "activity.stream.enabled: true (the dev cluster does).",
    )
    activity.add_argument("--new-only", action="store_true", help="only events from now on")
    activity.add_argument(
        "--follow",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep reading new events (default); --no-follow stops at the newest",
    )
    activity.add_argument(
        "--max-messages", "-m", type=non_negative_int, metavar="N", help="stop after N events"
    )
    activity.add_argument("--json", action="store_true", help="one JSON object per event")
    add_connection_options(activity, nats=False, brokers=True)
    activity.set_defaults(handler=_activity)


def _describe(event: Any) -> str:
    """The event's details as ``name=value`` words (only the fields its operation sets)."""
    words = []
    if event.stream:
        words.append(f"stream={event.stream}")
    if event.partitions:
        words.append("partitions=" + ",".join(map(str, event.partitions)))
    if event.op.name == "PAUSE_STREAM":
        words.append(f"resume_all={str(event.resume_all).lower()}")
    if event.op.name == "SET_STREAM_READONLY":
        words.append(f"readonly={str(event.readonly).lower()}")
    if event.group_id:
        words.append(f"group={event.group_id}")
    if event.consumer_id:
        words.append(f"consumer={event.consumer_id}")
    if event.streams:
        words.append("streams=" + ",".join(event.streams))
    if event.op.name == "LEAVE_CONSUMER_GROUP":
        words.append(f"expired={str(event.expired).lower()}")
    return " ".join(words)


async def _activity(args: argparse.Namespace, console: Console) -> int:
    if args.max_messages == 0:
        return EXIT_OK
    start = StartPosition.NEW_ONLY if args.new_only else StartPosition.EARLIEST
    follow = args.follow or args.new_only
    stop = StopPosition.ON_CANCEL if follow else StopPosition.LATEST
    seen = 0
    async with (
        open_client(args) as client,
        client.activity(start_position=start, stop_position=stop) as events,
    ):
        async for event in events:
            when = ns_to_datetime(event.timestamp).isoformat(timespec="milliseconds")
            if args.json:
                console.json(
                    {
                        "offset": event.offset,
                        "id": event.id,
                        "op": event.op.name,
                        "time": when,
                        "stream": event.stream or None,
                        "partitions": list(event.partitions),
                        "resume_all": event.resume_all,
                        "readonly": event.readonly,
                        "group_id": event.group_id or None,
                        "consumer_id": event.consumer_id or None,
                        "streams": list(event.streams),
                        "expired": event.expired,
                    }
                )
            else:
                console.print(
                    f"{console.style(str(event.offset), 'cyan')} "
                    f"{console.style(when, 'dim')} "
                    f"{console.style(event.op.name, 'bold')} {_describe(event)}"
                )
            seen += 1
            if args.max_messages is not None and seen >= args.max_messages:
                break
    return EXIT_OK
