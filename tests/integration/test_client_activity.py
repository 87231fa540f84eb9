"""The activity stream against a real server: one typed event per operation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from liftbridge_nats import ActivityEvent, ActivityOp, Client, StartPosition, StopPosition
from liftbridge_nats.testing import LocalCluster


async def test_activity_events_for_each_operation(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name, group = unique_name("act"), unique_name("g")
    async with Client(liftbridge_cluster.brokers) as client:
        activity = client.activity(start_position=StartPosition.NEW_ONLY)
        async with activity:
            await client.create_stream(name, name, partitions=2)
            await client.pause_stream(name, partitions=[1], resume_all=True)
            await client.resume_stream(name, partitions=[1])
            await client.set_stream_readonly(name, partitions=[0])
            async with client.consumer(group, [name], consumer_id="m1") as consumer:
                await consumer.wait_for_assignment(timeout=10)
            await client.delete_stream(name)

            mine: list[ActivityEvent] = []
            async with asyncio.timeout(15):
                async for event in activity:
                    if event.stream == name or event.group_id == group:
                        mine.append(event)
                    if event.op is ActivityOp.DELETE_STREAM and event.stream == name:
                        break

    assert [e.op for e in mine] == [
        ActivityOp.CREATE_STREAM,
        ActivityOp.PAUSE_STREAM,
        ActivityOp.RESUME_STREAM,
        ActivityOp.SET_STREAM_READONLY,
        ActivityOp.JOIN_CONSUMER_GROUP,
        ActivityOp.LEAVE_CONSUMER_GROUP,
        ActivityOp.DELETE_STREAM,
    ]
    create, pause, resume, readonly, join, leave, _ = mine
    assert create.partitions == (0, 1)
    assert pause.partitions == (1,) and pause.resume_all
    assert resume.partitions == (1,)
    assert readonly.partitions == (0,) and readonly.readonly
    assert (join.consumer_id, join.streams) == ("m1", (name,))
    assert leave.consumer_id == "m1" and not leave.expired
    assert all(e.timestamp > 0 for e in mine)
    assert [e.offset for e in mine] == sorted(e.offset for e in mine)
    assert len({e.id for e in mine}) == len(mine)


async def test_activity_history_from_earliest(liftbridge_cluster: LocalCluster) -> None:
    async with Client(liftbridge_cluster.brokers) as client:
        events = [e async for e in client.activity(stop_position=StopPosition.LATEST)]
    # The broker records the creation of its own internal streams first.
    assert events[0].op is ActivityOp.CREATE_STREAM
    assert {"__activity", "__cursors"} <= {
        e.stream for e in events if e.op is ActivityOp.CREATE_STREAM
    }
    assert [e.offset for e in events] == list(range(len(events)))
