"""One read task's chunks over the in-memory read transport: no broker, no Spark session.

The task's subscription hands over parsed protobufs that go straight into the chunk's
columns; these tests hold that to what a task guarantees: every offset of the range in
order, once, gaps reported as ``failOnDataLoss`` says, nothing past the range's end.
The same against a broker and Spark is in test_spark_read.py and test_spark_data_loss.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from liftbridge_nats import StartPosition, StopPosition
from liftbridge_nats._memread import NOT_LEADER, READONLY_END, MemoryReads
from liftbridge_nats._proto import api_pb2
from liftbridge_nats._subscription import Subscription, subscription_options
from liftbridge_nats.spark._dataloss import DataLossError
from liftbridge_nats.spark._options import parse_read_options
from liftbridge_nats.spark._partition_reader import PartitionReader
from liftbridge_nats.spark._planning import OffsetRange

pytestmark = pytest.mark.timeout(30)


def store(reads: MemoryReads, offsets: Sequence[int], pad: int = 0) -> None:
    """A partition holding messages at ``offsets`` only (as after compaction)."""
    for offset in offsets:
        value = b"v%d." % offset + b"p" * pad
        reads.append("s", value, headers={"subject": b"s", "h": b"%d" % offset})
    bodies = reads._part("s", 0).bodies
    for i, offset in enumerate(offsets):
        pb = api_pb2.Message.FromString(bodies[i])
        pb.offset = offset
        bodies[i] = pb.SerializeToString()


async def read(
    reads: MemoryReads, first: int, until: int, size: int, *, fail: bool = False
) -> tuple[PartitionReader, list[list[int]]]:
    """Every chunk of ``[first, until)``, as a task reads them (its offsets)."""
    options = {"brokers": "localhost:9292", "stream": "s", "failOnDataLoss": str(fail).lower()}
    opts = parse_read_options(options, streaming=False)
    rng = OffsetRange(stream="s", partition=0, from_offset=first, until_offset=until)
    reader = PartitionReader(opts, rng)
    sub: Subscription[bytes, bytes] = Subscription(
        reads,
        subscription_options(
            "s",
            start_position=StartPosition.OFFSET,
            start_offset=first,
            stop_position=StopPosition.OFFSET,
            stop_offset=until - 1,
        ),
        transport=reads,
    )
    await sub.start()
    reader._sub = sub
    chunks = []
    async with asyncio.timeout(10):
        while not reader.done:
            chunk = await reader.chunk(size)
            assert len(chunk) <= size
            assert chunk.header_keys == ["h"] * len(chunk)  # the server's own are left out
            assert [v.split(b".")[0] for v in chunk.values] == [b"v%d" % o for o in chunk.offsets]
            chunks.append(chunk.offsets)
    await reader.close()
    return reader, chunks


@pytest.mark.parametrize("size", [1, 4, 5, 1000])
async def test_a_range_in_chunks(size: int) -> None:
    reads = MemoryReads()
    store(reads, range(30))
    reader, chunks = await read(reads, 2, 22, size)
    assert [o for chunk in chunks for o in chunk] == list(range(2, 22))
    assert all(len(chunk) == size for chunk in chunks[:-1])
    assert reader.skipped == 0


async def test_a_resubscription_inside_the_range_loses_and_repeats_nothing() -> None:
    reads = MemoryReads(max_bytes=1)  # the smallest window: a few messages read ahead
    store(reads, range(40), pad=4000)
    opts = parse_read_options({"brokers": "localhost:9292", "stream": "s"}, streaming=False)
    reader = PartitionReader(
        opts, OffsetRange(stream="s", partition=0, from_offset=0, until_offset=40)
    )
    sub: Subscription[bytes, bytes] = Subscription(
        reads,
        subscription_options(
            "s",
            start_position=StartPosition.OFFSET,
            start_offset=0,
            stop_position=StopPosition.OFFSET,
            stop_offset=39,
        ),
        transport=reads,
    )
    await sub.start()
    reader._sub = sub
    got: list[int] = []
    async with asyncio.timeout(10):
        got += (await reader.chunk(10)).offsets
        # The new leader serves from the beginning: the replayed offsets are dropped.
        reads.end_calls("s", NOT_LEADER)
        original = reads._range
        reads._range = lambda part, req: (0, 39, None)  # type: ignore[method-assign]
        try:
            while not reader.done:
                got += (await reader.chunk(10)).offsets
        finally:
            reads._range = original  # type: ignore[method-assign]
    assert got == list(range(40))
    assert len(reads.calls) == 2
    await reader.close()


async def test_gaps_inside_the_range_are_skipped() -> None:
    reads = MemoryReads()
    store(reads, [0, 1, 2, 5, 6, 9, 10, 11])
    reader, chunks = await read(reads, 0, 10, 2)
    assert [o for chunk in chunks for o in chunk] == [0, 1, 2, 5, 6, 9]
    assert reader.skipped == 4


async def test_a_gap_fails_the_read_by_default() -> None:
    reads = MemoryReads()
    store(reads, [0, 1, 2, 5, 6, 9])
    with pytest.raises(DataLossError, match="offsets 3 to 4"):
        await read(reads, 0, 10, 100, fail=True)


async def test_an_offset_past_the_range_ends_it() -> None:
    reads = MemoryReads()
    store(reads, [0, 1, 2, 12, 13])
    reader, chunks = await read(reads, 0, 10, 100)
    assert [o for chunk in chunks for o in chunk] == [0, 1, 2]
    assert reader.skipped == 7


async def test_a_stream_ending_early_leaves_a_gap_to_the_end() -> None:
    reads = MemoryReads()
    store(reads, range(5))
    task = asyncio.ensure_future(read(reads, 0, 10, 3))
    await asyncio.sleep(0.2)  # the call delivers what is stored, then waits for more
    assert reads.open_calls("s") == 1 and not task.done()
    reads.end_calls("s", READONLY_END)
    reader, chunks = await task
    assert [o for chunk in chunks for o in chunk] == [0, 1, 2, 3, 4]
    assert reader.skipped == 5
