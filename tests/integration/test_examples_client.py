"""The client examples run against the session cluster and print what they promise."""

from __future__ import annotations

from typing import Any

import pytest
from _examples import EXAMPLES, run_example


async def test_subscribe_example(liftbridge_cluster: Any) -> None:
    out = await run_example("subscribe.py", liftbridge_cluster)
    lines = out.splitlines()
    assert lines[:5] == [f"live offset={i} value=hello-{i}" for i in range(5)]
    assert lines[5:] == [
        "all [0, 1, 2, 3, 4]",
        "range [1, 2, 3]",
        "latest ['hello-4']",
        "last minute 5",
    ]


async def test_consumer_group_example(liftbridge_cluster: Any) -> None:
    out = await run_example("consumer_group.py", liftbridge_cluster)
    lines = out.splitlines()
    owned = sorted(int(p) for line in lines[:2] for p in line.split("[")[1].rstrip("]").split(", "))
    assert owned == [0, 1, 2, 3]
    assert lines[2] == "consumed 20 unique 20 {'alice': 10, 'bob': 10}"
    assert lines[3] == "committed positions [4, 4, 4, 4]"


async def test_cursors_example(liftbridge_cluster: Any) -> None:
    out = await run_example("cursors.py", liftbridge_cluster)
    assert out.splitlines() == [
        "first run read [0, 1, 2, 3]",
        "cursor at 3",
        "second run read [4, 5, 6, 7, 8, 9]",
        "cursor at 9",
    ]


async def test_group_manual_commit_example(liftbridge_cluster: Any) -> None:
    out = await run_example("group_manual_commit.py", liftbridge_cluster)
    assert out.splitlines() == [
        "processed 20",
        "committed (next offset to read) [10, 10]",
        "lag [0, 0]",
        "lag while stopped [2, 1]",
        "second run processed 3",
        "totals per partition [132, 121]",
    ]


async def test_rebalance_listener_example(liftbridge_cluster: Any) -> None:
    out = await run_example("rebalance_listener.py", liftbridge_cluster)
    assert out.splitlines() == [
        "alice counted 40 orders",
        "bob took 2 partitions; alice flushed them first",
        "store while both run [10, 10]",
        "store after alice closed [10, 10, 10, 10]",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "subscribe.py",
        "consumer_group.py",
        "cursors.py",
        "group_manual_commit.py",
        "rebalance_listener.py",
    ],
)
def test_examples_are_short(name: str) -> None:
    assert len((EXAMPLES / name).read_text().splitlines()) < 110
