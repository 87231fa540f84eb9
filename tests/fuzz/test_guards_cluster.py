"""Property tests of the input guards against a real 3-node cluster of its own.

Generated stream names that the rules allow are created, written, read and deleted on
every replica (each is one directory on each node); refused names, groups, subjects,
partition counts and durations never reach a server (they fail the same way with no
server at all); a few hundred generated bad calls across the API end as typed errors.
After each test every node is alive and a new replicated stream takes a publish that
reads back. The cluster is this module's own: if a guard let a crashing input through,
only it would go down. The long run is ``python -m tests.fuzz.guards``.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TypedDict

import nats
import pytest
from nats.aio.client import Client as NATS

from liftbridge_nats import (
    AckPolicy,
    Client,
    InvalidArgumentError,
    Publisher,
    StartPosition,
    StopPosition,
)
from liftbridge_nats.cli import main as cli_main
from liftbridge_nats.testing import LocalCluster

from ._guards import (
    Tally,
    allowed_names,
    assert_healthy,
    attempt,
    bad_calls,
    examples,
    refused_groups,
)
from ._guards import refused_names as refused_name_cases

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(600)]

# A port nothing listens on: a call that got past the checks would fail to connect.
_NOWHERE = "127.0.0.1:1"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3) as c:
        yield c


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[Client]:
    async with Client(cluster.brokers, timeout=20) as c:
        yield c


@pytest.fixture
async def nc(cluster: LocalCluster) -> AsyncIterator[NATS]:
    conn = await nats.connect(cluster.nats_url)
    try:
        yield conn
    finally:
        await conn.close()


def _stream_dirs(cluster: LocalCluster, name: str) -> list[Path]:
    return [cluster.data_dir(i) / "streams" / name for i in range(len(cluster.node_ids))]


def _stream_dirs_gone(cluster: LocalCluster, name: str) -> bool:
    return not any(d.exists() for d in _stream_dirs(cluster, name))


async def _until(predicate: Callable[[], bool], within: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


class _CreateOptions(TypedDict, total=False):
    """The create_stream options the refused cases below set."""

    partitions: int
    cleaner_interval: int


# Edge cases always tried, beside the generated ones.
_EDGE_NAMES = ["x" * 255, "é" * 127 + "x", "名" * 85, "🦀" * 63 + "abc", "a.b.c", "a\\b", "-_-"]


async def test_allowed_names_work_on_every_replica(
    cluster: LocalCluster, client: Client, nc: NATS
) -> None:
    names = list(dict.fromkeys(_EDGE_NAMES + examples(allowed_names, 10)))
    async with Publisher(nc, client=client, ack_timeout=20) as pub:
        for name in names:
            subject = f"guards.{uuid.uuid4().hex[:10]}"
            await client.create_stream(subject, name, partitions=2, replication_factor=3)
            ack = await pub.publish_to_stream(
                name, name.encode(), partition=1, ack_policy=AckPolicy.ALL
            )
            assert ack is not None and ack.offset == 0, name
            async with client.subscribe(
                name,
                partition=1,
                start_position=StartPosition.EARLIEST,
                stop_position=StopPosition.LATEST,
            ) as sub:
                assert [m.value async for m in sub] == [name.encode()], name
            # One directory per stream on every node, holding one per partition.
            for directory in _stream_dirs(cluster, name):
                assert sorted(p.name for p in directory.iterdir()) == ["0", "1"], directory
            await client.delete_stream(name)
            await _until(
                functools.partial(_stream_dirs_gone, cluster, name),
                10,
                f"the directories of {name!r} to go",
            )
    await assert_healthy(cluster, client, nc)


async def test_refused_names_never_reach_a_server(
    cluster: LocalCluster, client: Client, nc: NATS, capsys: pytest.CaptureFixture[str]
) -> None:
    names = examples(refused_name_cases, 60)
    groups = examples(refused_groups, 15)
    nowhere = Client([_NOWHERE], timeout=2)  # never connected: nothing can be sent
    try:
        for rule, name, words in names:
            for target in (nowhere, client):
                with pytest.raises(InvalidArgumentError) as info:
                    await target.create_stream(f"s-{uuid.uuid4().hex[:8]}", name)
                assert words in str(info.value), (rule, name, str(info.value))
                with pytest.raises(InvalidArgumentError):
                    await target.delete_stream(name)
        for rule, group, words in groups:
            for target in (nowhere, client):
                with pytest.raises(InvalidArgumentError) as info:
                    await target.create_stream("s", "s", group=group)
                assert words in str(info.value), (rule, group, str(info.value))
        refused_options: list[tuple[str, _CreateOptions]] = [
            ("s", {"partitions": 257}),
            ("s", {"partitions": 20_000}),
            ("wild.>", {"partitions": 2}),
            ("s" * 4000, {}),
            ("s", {"cleaner_interval": 10**13}),
        ]
        for subject, options in refused_options:
            for target in (nowhere, client):
                with pytest.raises(InvalidArgumentError):
                    await target.create_stream(subject, "s", **options)
        # The command line checks before it connects.
        for rule, name, words in names[:10]:
            if "\0" in name or rule == "lone surrogate":
                continue  # argv cannot carry these
            # "--" ends the options: a generated name may start with a dash.
            argv = ["stream", "create", "--subject", "s", "--brokers", _NOWHERE, "--", name]
            code = await asyncio.to_thread(cli_main, argv)  # it runs its own event loop
            err = capsys.readouterr().err
            assert code == 1 and words in err, (rule, name, err)
    finally:
        await nowhere.close()
    listed = set((await client.fetch_metadata()).streams)
    assert not listed & {name for _, name, _ in names}
    await assert_healthy(cluster, client, nc)


async def test_generated_bad_calls_end_as_typed_errors(
    cluster: LocalCluster, client: Client, nc: NATS
) -> None:
    calls = examples(bad_calls, 400)
    tally = Tally()
    async with Publisher(nc, client=client, ack_timeout=5) as pub:
        for i, call in enumerate(calls):
            await attempt(call, client, pub, tally)
            if i % 100 == 99:
                dead = [n for j, n in enumerate(cluster.node_ids) if not cluster.is_running(j)]
                assert not dead, f"after {i + 1} calls nodes died: {dead}"
    assert not tally.findings, "\n".join(tally.findings[:20])
    assert tally.inputs == len(calls) and tally.refused > len(calls) // 2
    await assert_healthy(cluster, client, nc)
