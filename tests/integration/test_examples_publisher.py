"""The publisher examples run (against the session cluster) and print what they promise."""

from __future__ import annotations

import re

from _examples import run_example

from liftbridge_nats.testing import LocalCluster


async def test_quickstart_example(liftbridge_cluster: LocalCluster) -> None:
    out = await run_example("quickstart.py", liftbridge_cluster, "--count", "20000")
    assert "published   20000 messages of 100 bytes, ALL acks" in out
    assert "acked       20000 (offsets 0..19999, all distinct: True)" in out
    assert re.search(r"read back   20000 messages in [\d.]+ s", out)
    assert out.rstrip().endswith("OK")


async def test_publish_example(liftbridge_cluster: LocalCluster) -> None:
    lines = (await run_example("publish.py", liftbridge_cluster)).splitlines()
    assert lines[0].startswith("publish       offset=0 stream=orders-")
    assert lines[1:5] == [
        "publish_async [1, 2, 3, 4, 5]",
        "publish_batch  [6, 7]",
        "AckPolicy.NONE None",
        lines[4],
    ]
    by_key = r"by key        {:6s} -> partition {} on orders-\w+{} \(crc32 % 3 = {}\)"
    assert re.fullmatch(by_key.format("a", 0, "", 0), lines[4])
    assert re.fullmatch(by_key.format("user-2", 1, r"\.1", 1), lines[5])
    assert re.fullmatch(by_key.format("user-1", 2, r"\.2", 2), lines[6])
    # Partition 0 holds 10 messages by now, partitions 1 and 2 one each.
    assert lines[7] == (
        "by stream     (partition, offset) [(0, 10), (1, 1), (2, 1), (0, 11), (1, 2), (2, 2)]"
    )
    assert lines[8:] == [
        "no stream     NoRespondersError, retriable = True",
        "stats         acked = 17",
    ]


async def test_occ_example(liftbridge_cluster: LocalCluster) -> None:
    lines = (await run_example("occ.py", liftbridge_cluster)).splitlines()
    assert lines[0] == "opening balance: stored at offset 0 (attempt 1)"
    assert lines[1] == "race for offset 1: 1 winner, 1 refused"
    assert re.fullmatch(r"writer [AB]: stored at offset 2 \(attempt 1\)", lines[2])
    assert lines[3] in (
        "log: ['opening balance', 'writer A', 'writer B']",
        "log: ['opening balance', 'writer B', 'writer A']",
    )
