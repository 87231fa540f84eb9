"""The public AckListener over the memory transport: decoding, junk, a full buffer and
close, in milliseconds. tests/integration/test_ack_listener_server.py proves it on a server."""

from __future__ import annotations

import asyncio
import logging

import pytest

from liftbridge_nats import (
    Ack,
    AckError,
    AckListener,
    AckPolicy,
    ClientClosedError,
    InvalidArgumentError,
    MsgType,
)
from liftbridge_nats._proto import api_pb2
from liftbridge_nats.envelope import encode
from liftbridge_nats.testing import MemoryTransport


def _ack(cid: str, offset: int, *, error: int = 0, crc: bool = False) -> bytes:
    pb = api_pb2.Ack(
        stream="orders",
        partitionSubject="orders",
        msgSubject="orders.2",
        offset=offset,
        correlationId=cid,
        ackPolicy=api_pb2.AckPolicy.ValueType(AckPolicy.ALL.value),
        ackError=api_pb2.Ack.Error.ValueType(error),
    )
    return encode(MsgType.ACK, pb.SerializeToString(), crc=crc)


async def _take(acks: AckListener, n: int) -> list[Ack]:
    out: list[Ack] = []
    async for ack in acks:
        out.append(ack)
        if len(out) == n:
            break
    return out


async def test_acks_are_decoded_in_order_and_junk_is_skipped_and_counted() -> None:
    transport = MemoryTransport()
    async with AckListener(transport) as acks:
        inbox = acks.inbox
        transport.deliver(inbox, _ack("c1", 7))
        transport.deliver(inbox, b"not an envelope")
        transport.deliver(inbox, encode(MsgType.ACK, b"\xff\xff"))  # no protobuf Ack
        transport.deliver(inbox, encode(MsgType.PUBLISH, b""))  # another type
        transport.deliver(inbox, _ack("c2", 8, crc=True))
        transport.deliver(inbox, _ack("c3", 0, error=AckError.TOO_LARGE))
        got = await asyncio.wait_for(_take(acks, 3), 1)
    assert [(a.correlation_id, a.offset) for a in got] == [("c1", 7), ("c2", 8), ("c3", 0)]
    assert type(got[0]) is Ack and got[0] == Ack(
        stream="orders",
        partition=2,
        partition_subject="orders",
        message_subject="orders.2",
        offset=7,
        ack_inbox="",
        correlation_id="c1",
        ack_policy=AckPolicy.ALL,
        reception_timestamp=0,
        commit_timestamp=0,
    )
    assert got[2].error is AckError.TOO_LARGE  # yielded, not raised
    assert (acks.received, acks.malformed, acks.foreign, acks.dropped) == (3, 2, 1, 0)


async def test_a_reader_waits_for_acks_and_close_ends_the_iteration() -> None:
    transport = MemoryTransport()
    acks = await AckListener(transport).start()
    reading = asyncio.ensure_future(_take(acks, 10))
    await asyncio.sleep(0.01)
    assert not reading.done()
    transport.deliver(acks.inbox, _ack("c1", 0))
    transport.deliver(acks.inbox, _ack("c2", 1))
    await acks.close()
    # What arrived before the close is read; then the iteration ends.
    got = await asyncio.wait_for(reading, 1)
    assert [a.correlation_id for a in got] == ["c1", "c2"]
    transport.deliver(acks.inbox, _ack("c3", 2))  # unsubscribed: never seen
    assert acks.closed and acks.received == 2
    with pytest.raises(ClientClosedError):
        await acks.start()


async def test_a_full_buffer_drops_later_acks_counts_and_logs_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = MemoryTransport()
    caplog.set_level(logging.WARNING, logger="liftbridge_nats")
    async with AckListener(transport, max_buffered=2) as acks:
        for i in range(5):
            transport.deliver(acks.inbox, _ack(f"c{i}", i))
        got = await asyncio.wait_for(_take(acks, 2), 1)
        transport.deliver(acks.inbox, _ack("c5", 5))  # room again
        got += await asyncio.wait_for(_take(acks, 1), 1)
    assert [a.offset for a in got] == [0, 1, 5]
    assert acks.received == 6 and acks.dropped == 3
    warnings = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 1 and "max_buffered" in warnings[0]


async def test_misuse_is_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        AckListener(MemoryTransport(), max_buffered=0)
    with pytest.raises(TypeError):
        AckListener(MemoryTransport(), max_buffered=1.5)  # type: ignore[arg-type]
    with pytest.raises(ClientClosedError, match="not started"):
        await anext(aiter(AckListener(MemoryTransport())))
