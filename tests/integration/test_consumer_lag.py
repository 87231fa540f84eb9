"""Consumer lag from the API against a real node: committed positions set as a group
commits them, partitions empty, partly read and fully read."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from liftbridge_nats import (
    Client,
    InvalidArgumentError,
    NoSuchStreamError,
    PartitionLag,
    consumer_lag,
    group_cursor_id,
    partition_lag,
)
from liftbridge_nats.testing import LocalCluster


def test_partition_lag() -> None:
    assert partition_lag(newest=-1, committed=-1) == 0  # empty, nothing committed
    assert partition_lag(newest=9, committed=-1) == 10  # never committed: all of it
    assert partition_lag(newest=9, committed=6) == 3
    assert partition_lag(newest=9, committed=9) == 0
    assert partition_lag(newest=3, committed=9) == 0  # a position ahead is no debt


async def test_consumer_lag_per_partition(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    a, b, group = unique_name("laga"), unique_name("lagb"), unique_name("g")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(a, a, partitions=3)
        await client.create_stream(b, b)
        for i in range(5):
            await client.publish_to_stream(a, b"x%d" % i, partition=0)
        for i in range(2):
            await client.publish_to_stream(a, b"y%d" % i, partition=1)
        await client.set_cursor(group_cursor_id(group), a, 0, 1)
        await client.set_cursor(group_cursor_id(group), a, 1, 1)
        rows = await consumer_lag(client, group, [a, b])
        assert rows == [
            PartitionLag(group, a, 0, committed=1, newest=4, lag=3),
            PartitionLag(group, a, 1, committed=1, newest=1, lag=0),
            PartitionLag(group, a, 2, committed=-1, newest=-1, lag=0),
            PartitionLag(group, b, 0, committed=-1, newest=-1, lag=0),
        ]
        assert await consumer_lag(client, group, b) == rows[3:]
        with pytest.raises(NoSuchStreamError):
            await consumer_lag(client, group, [unique_name("missing")])
        with pytest.raises(InvalidArgumentError):
            await consumer_lag(client, "", [a])
        with pytest.raises(TypeError):
            await consumer_lag(client, group, [a, 7])  # type: ignore[list-item]
