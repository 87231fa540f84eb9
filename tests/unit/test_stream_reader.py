"""The read path without a broker: our HTTP/2 client (liftbridge_nats._h2) and a call's
buffer (liftbridge_nats._stream_reader) against an independent HTTP/2 server, the h2
package, connected in memory.

The server side follows the gRPC conventions a broker does (response headers, one
length-prefixed message per DATA frame unless larger, trailers with grpc-status) and
h2 enforces flow control on what it sends, so the read-ahead bounds are checked as
the server sees them. The broker-backed behaviour is in tests/integration.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import FrozenInstanceError
from typing import Any, cast
from urllib.parse import quote

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest

from liftbridge_nats import DeserializationError, Message, RpcError
from liftbridge_nats._h2 import H2Connection
from liftbridge_nats._metrics import ReadCell
from liftbridge_nats._proto import api_pb2
from liftbridge_nats._stream_reader import (
    OPENED,
    CallHandle,
    CallStatusError,
    Delivery,
    Item,
    StreamEnd,
    StreamReader,
)
from liftbridge_nats.serializers import JsonDeserializer, StringDeserializer
from liftbridge_nats.wire import message_from_proto

pytestmark = pytest.mark.timeout(60)

PATH = "/proto.API/Subscribe"
Decoded = Message[Any, Any]


def grpc_message(body: bytes, *, compressed: bool = False) -> bytes:
    return bytes([int(compressed)]) + len(body).to_bytes(4, "big") + body


def pb(offset: int, value: bytes = b"v", key: bytes = b"") -> bytes:
    return api_pb2.Message(
        stream="s", partition=2, offset=offset, value=value, key=key, subject="s.2", timestamp=1
    ).SerializeToString()


HANDSHAKE = b""  # the broker's empty Message


class Server:
    """gRPC over the h2 package's server side, queueing what flow control holds back."""

    def __init__(self) -> None:
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.h2.initiate_connection()
        self.requests: dict[int, tuple[dict[str, str], bytearray]] = {}
        self.resets: dict[int, int] = {}
        self.queued: dict[int, list[tuple[bytes, int | None]]] = {}
        self.trailers_after: dict[int, list[tuple[str, str]]] = {}
        self.sent: dict[int, int] = {}  # message bytes (prefix included) sent per call
        self.pings_acked = 0

    def receive(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                headers = {str(k): str(v) for k, v in event.headers or []}
                self.requests[event.stream_id] = (headers, bytearray())
            elif isinstance(event, h2.events.DataReceived):
                self.requests[event.stream_id][1].extend(event.data or b"")
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self.resets[event.stream_id] = event.error_code
                self.queued.pop(event.stream_id, None)
            elif isinstance(event, h2.events.WindowUpdated):
                for stream_id in list(self.queued):
                    self.flush(stream_id)
            elif isinstance(event, h2.events.PingAckReceived):
                self.pings_acked += 1

    def respond(self, stream_id: int) -> None:
        self.h2.send_headers(stream_id, [(":status", "200"), ("content-type", "application/grpc")])

    def send(self, stream_id: int, *bodies: bytes, pad: int | None = None) -> None:
        queue = self.queued.setdefault(stream_id, [])
        queue.extend((grpc_message(b), pad) for b in bodies)
        self.flush(stream_id)

    def send_raw(self, stream_id: int, data: bytes) -> None:
        self.queued.setdefault(stream_id, []).append((data, None))
        self.flush(stream_id)

    def finish(self, stream_id: int, status: int = 0, message: str = "") -> None:
        trailers = [("grpc-status", str(status))]
        if message:
            trailers.append(("grpc-message", quote(message)))
        self.trailers_after[stream_id] = trailers
        self.flush(stream_id)

    def flush(self, stream_id: int) -> None:
        """Send queued messages as far as the window allows, one DATA frame per message
        (several for a message above the frame size), like the broker does."""
        queue = self.queued.get(stream_id, [])
        while queue:
            data, pad = queue[0]
            room = self.h2.local_flow_control_window(stream_id) - (pad or 0) - (1 if pad else 0)
            if room <= 0:
                return
            step = min(len(data), room, self.h2.max_outbound_frame_size - (pad or 0) - 1)
            self.h2.send_data(stream_id, data[:step], pad_length=pad)
            self.sent[stream_id] = self.sent.get(stream_id, 0) + step
            if step == len(data):
                queue.pop(0)
            else:
                queue[0] = (data[step:], pad)
        trailers = self.trailers_after.pop(stream_id, None)
        if trailers is not None:
            self.h2.send_headers(stream_id, trailers, end_stream=True)


class Pair:
    """Our client connection and the server, bytes carried between them in memory."""

    def __init__(self, **options: Any) -> None:
        self.client = H2Connection("broker:9292", **options)
        self.server = Server()
        self.client.initiate()
        self.pump()

    def pump(self) -> None:
        for _ in range(1000):
            outgoing = bytes(self.client.outbox)
            self.client.outbox.clear()
            if outgoing:
                self.server.receive(outgoing)
            incoming = self.server.h2.data_to_send()
            if incoming:
                self.client.receive(incoming)
            if not outgoing and not incoming and not self.client.outbox:
                return
        raise AssertionError("the connection never settled")

    def call(
        self, request: bytes = b"req", delivery: Delivery | None = None, **limits: int
    ) -> tuple[StreamReader, int]:
        reader = StreamReader(delivery=delivery, **limits)
        stream_id = self.client.start_call(PATH, request, reader, window=reader.window)
        reader.attach(Handle(self, stream_id))
        self.pump()
        return reader, stream_id


class Handle(CallHandle):
    """Grants and cancellation go out with the next pump, as a socket write would."""

    def __init__(self, pair: Pair, stream_id: int) -> None:
        self.pair = pair
        self.stream_id = stream_id

    def grant(self, increment: int) -> None:
        self.pair.client.grant(self.stream_id, increment)
        asyncio.get_running_loop().call_soon(self.pair.pump)

    def cancel(self) -> None:
        self.pair.client.cancel(self.stream_id)
        asyncio.get_running_loop().call_soon(self.pair.pump)


async def take(reader: StreamReader, within: float = 5.0) -> Item:
    return await asyncio.wait_for(reader.next_item(), within)


async def offsets(reader: StreamReader, n: int) -> list[int]:
    return [cast(Message, await take(reader)).offset for _ in range(n)]


async def opened(
    pair: Pair, delivery: Delivery | None = None, **limits: int
) -> tuple[StreamReader, int]:
    reader, stream_id = pair.call(b"req", delivery, **limits)
    pair.server.respond(stream_id)
    pair.server.send(stream_id, HANDSHAKE)
    pair.pump()
    assert await take(reader) is OPENED
    return reader, stream_id


# ---------------------------------------------------------------------- conversion


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"stream": "s", "partition": 3, "offset": 2**62, "value": b"x" * 100},
        {"key": b"k", "value": b"", "timestamp": 1_700_000_000_123_456_789},
        {"subject": "ünïcode.subject", "replySubject": "_INBOX.x", "key": b"\x00"},
        {"headers": {"a": b"1", "b": b"", "ç": b"\xff" * 3}, "offset": 7},
        {"ackInbox": "in", "correlationId": "c", "ackPolicy": api_pb2.ALL, "value": b"v"},
    ],
)
def test_message_from_proto_equals_the_dataclass_constructor(fields: dict[str, Any]) -> None:
    message = api_pb2.Message(**fields)
    parsed = api_pb2.Message.FromString(message.SerializeToString())
    fast = message_from_proto(parsed)
    reference = Message(
        stream=parsed.stream,
        partition=parsed.partition,
        offset=parsed.offset,
        value=parsed.value,
        key=parsed.key or None,
        timestamp=parsed.timestamp,
        subject=parsed.subject,
        reply_subject=parsed.replySubject,
        headers=dict(parsed.headers),
    )
    assert type(fast) is Message
    assert fast == reference
    assert repr(fast) == repr(reference)
    assert type(fast.headers) is dict


def test_message_from_proto_is_frozen() -> None:
    msg = message_from_proto(api_pb2.Message.FromString(pb(1)))
    with pytest.raises(FrozenInstanceError):
        msg.offset = 2  # type: ignore[misc]


# ---------------------------------------------------------------------- one call


async def test_the_request_is_a_grpc_call() -> None:
    pair = Pair()
    request = api_pb2.SubscribeRequest(stream="orders", partition=3).SerializeToString()
    _, stream_id = pair.call(request)
    headers, body = pair.server.requests[stream_id]
    assert headers[":method"] == "POST"
    assert headers[":path"] == PATH
    assert headers[":scheme"] == "http"
    assert headers[":authority"] == "broker:9292"
    assert headers["content-type"] == "application/grpc"
    assert headers["te"] == "trailers"
    assert bytes(body) == grpc_message(request)


async def test_opened_messages_then_end_in_order() -> None:
    pair = Pair()
    reader, stream_id = pair.call()
    pair.server.respond(stream_id)
    pair.server.send(stream_id, HANDSHAKE, *(pb(i, b"%d" % i) for i in range(300)))
    pair.server.finish(stream_id)
    pair.pump()
    assert await take(reader) is OPENED
    got = [cast(Message, await take(reader)) for _ in range(300)]
    assert [m.offset for m in got] == list(range(300))
    assert got[42].value == b"42" and got[42].stream == "s" and got[42].partition == 2
    end = await take(reader)
    assert isinstance(end, StreamEnd) and end.error is None and not end.cancelled
    assert reader.finished


async def test_skip_through_drops_replayed_offsets() -> None:
    pair = Pair()
    reader, stream_id = pair.call(skip_through=5)
    pair.server.respond(stream_id)
    pair.server.send(stream_id, HANDSHAKE, *(pb(i) for i in range(3, 9)))
    pair.server.finish(stream_id)
    pair.pump()
    assert await take(reader) is OPENED
    assert await offsets(reader, 3) == [6, 7, 8]
    assert isinstance(await take(reader), StreamEnd)


async def test_an_error_status_arrives_after_the_messages_before_it() -> None:
    pair = Pair()
    reader, stream_id = await opened(pair)
    pair.server.send(stream_id, pb(0), pb(1))
    pair.server.finish(stream_id, 14, "broker went away: 100% gone")
    pair.pump()
    assert await offsets(reader, 2) == [0, 1]
    end = await take(reader)
    assert isinstance(end, StreamEnd) and isinstance(end.error, CallStatusError)
    assert end.error.code() is grpc.StatusCode.UNAVAILABLE
    assert end.error.details() == "broker went away: 100% gone"


async def test_a_refusal_without_messages_is_one_header_block() -> None:
    pair = Pair()
    reader, stream_id = pair.call()
    pair.server.h2.send_headers(
        stream_id,
        [
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", "9"),
            ("grpc-message", "Server not partition leader"),
        ],
        end_stream=True,
    )
    pair.pump()
    end = await take(reader)
    assert isinstance(end, StreamEnd) and isinstance(end.error, CallStatusError)
    assert end.error.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert end.error.details() == "Server not partition leader"


@pytest.mark.parametrize(
    ("http_status", "code"),
    [("503", grpc.StatusCode.UNAVAILABLE), ("404", grpc.StatusCode.UNIMPLEMENTED)],
)
async def test_an_http_error_reads_as_a_grpc_status(
    http_status: str, code: grpc.StatusCode
) -> None:
    pair = Pair()
    reader, stream_id = pair.call()
    pair.server.h2.send_headers(stream_id, [(":status", http_status)], end_stream=True)
    pair.pump()
    end = await take(reader)
    assert isinstance(end, StreamEnd) and isinstance(end.error, CallStatusError)
    assert end.error.code() is code


@pytest.mark.parametrize(
    ("reset", "code"),
    [
        (h2.errors.ErrorCodes.REFUSED_STREAM, grpc.StatusCode.UNAVAILABLE),
        (h2.errors.ErrorCodes.CANCEL, grpc.StatusCode.CANCELLED),
        (h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, grpc.StatusCode.UNAVAILABLE),
        (h2.errors.ErrorCodes.INTERNAL_ERROR, grpc.StatusCode.INTERNAL),
    ],
)
async def test_a_reset_by_the_server_ends_the_call(
    reset: h2.errors.ErrorCodes, code: grpc.StatusCode
) -> None:
    pair = Pair()
    reader, stream_id = await opened(pair)
    pair.server.send(stream_id, pb(0))
    pair.server.h2.reset_stream(stream_id, reset)
    pair.pump()
    assert await offsets(reader, 1) == [0]
    end = await take(reader)
    assert isinstance(end, StreamEnd) and isinstance(end.error, CallStatusError)
    assert end.error.code() is code


async def test_cancel_resets_the_stream_and_the_connection_goes_on() -> None:
    pair = Pair()
    first, first_id = await opened(pair)
    waiting = asyncio.ensure_future(first.next_item())
    await asyncio.sleep(0)
    first.cancel()
    end = await asyncio.wait_for(waiting, 5)
    assert isinstance(end, StreamEnd) and end.cancelled
    await asyncio.sleep(0)  # the reset goes out with the next pump
    assert pair.server.resets == {first_id: h2.errors.ErrorCodes.CANCEL}
    first.cancel()  # idempotent
    second, second_id = await opened(pair)
    pair.server.send(second_id, pb(7))
    pair.pump()
    assert await offsets(second, 1) == [7]
    assert pair.client.open_calls == 1


async def test_goaway_ends_the_calls_the_server_never_saw() -> None:
    pair = Pair()
    kept, kept_id = await opened(pair)
    dropped, _ = pair.call()
    # A GOAWAY frame (h2 would stop sending after its own): 8 bytes, stream 0.
    goaway = (8).to_bytes(3, "big") + b"\x07\x00" + bytes(4)
    pair.client.receive(goaway + kept_id.to_bytes(4, "big") + bytes(4))
    assert not pair.client.can_start
    end = await take(dropped)
    assert isinstance(end, StreamEnd) and isinstance(end.error, CallStatusError)
    assert end.error.code() is grpc.StatusCode.UNAVAILABLE
    pair.server.send(kept_id, pb(0))
    pair.server.finish(kept_id)
    pair.pump()
    assert await offsets(kept, 1) == [0]
    end = await take(kept)
    assert isinstance(end, StreamEnd) and end.error is None


async def test_a_lost_connection_ends_every_call_as_unavailable() -> None:
    pair = Pair()
    readers = [(await opened(pair))[0] for _ in range(3)]
    pair.client.connection_lost("Socket closed")
    for reader in readers:
        end = await take(reader)
        assert isinstance(end, StreamEnd) and isinstance(end.error, CallStatusError)
        assert end.error.code() is grpc.StatusCode.UNAVAILABLE


async def test_pings_and_settings_are_answered() -> None:
    pair = Pair()
    pair.server.h2.ping(b"12345678")
    pair.server.h2.update_settings({h2.settings.SettingCodes.MAX_FRAME_SIZE: 32768})
    pair.pump()
    assert pair.server.pings_acked == 1
    assert pair.client.can_start


async def test_padding_and_continuation_frames() -> None:
    pair = Pair()
    reader, stream_id = await opened(pair)
    pair.server.send(stream_id, *(pb(i, b"p" * 50) for i in range(200)), pad=40)
    # Trailers larger than one frame arrive in HEADERS + CONTINUATION frames.
    pair.server.finish(stream_id, 13, "x" * 40_000)
    pair.pump()
    assert await offsets(reader, 200) == list(range(200))
    end = await take(reader)
    assert isinstance(end, StreamEnd) and isinstance(end.error, CallStatusError)
    assert end.error.details() == "x" * 40_000


async def test_messages_larger_than_frames_and_windows() -> None:
    pair = Pair()
    reader, stream_id = await opened(pair, max_bytes=64 * 1024)
    sizes = [300_000, 10, 70_000, 1, 200_000]
    pair.server.send(stream_id, *(pb(i, b"z" * n) for i, n in enumerate(sizes)))
    pair.pump()
    for i, size in enumerate(sizes):
        msg = cast(Message, await take(reader))
        assert (msg.offset, len(msg.value)) == (i, size)


async def test_a_compressed_message_ends_the_call_with_an_error() -> None:
    pair = Pair()
    reader, stream_id = await opened(pair)
    pair.server.send_raw(stream_id, grpc_message(pb(0), compressed=True))
    pair.pump()
    end = await take(reader)
    assert isinstance(end, StreamEnd) and isinstance(end.error, RpcError)
    assert "compressed" in str(end.error)
    await asyncio.sleep(0)
    assert stream_id in pair.server.resets


# ---------------------------------------------------------------------- read-ahead


async def read_slowly(
    pair: Pair, reader: StreamReader, stream_id: int, bodies: list[bytes], first: int, last: int
) -> tuple[int, int]:
    """Take messages ``first`` to ``last - 1`` one by one, letting the connection run
    between takes. Returns the most bytes and the most messages the server had sent
    beyond what was taken (what the client held or had in flight)."""
    sizes = [len(grpc_message(body)) for body in bodies]
    taken = len(grpc_message(HANDSHAKE)) + sum(sizes[:first])
    most_bytes = most_messages = 0
    for i in range(first, last):
        pair.pump()
        await asyncio.sleep(0)  # let a grant go out
        pair.pump()
        ahead = pair.server.sent[stream_id] - taken
        most_bytes = max(most_bytes, ahead)
        held, n = 0, i
        while n < len(sizes) and held + sizes[n] <= ahead:
            held += sizes[n]
            n += 1
        most_messages = max(most_messages, n - i)
        assert cast(Message, await take(reader)).offset == i
        taken += sizes[i]
    return most_bytes, most_messages


async def test_read_ahead_is_bounded_in_bytes() -> None:
    pair = Pair()
    max_bytes = 64 * 1024
    reader, stream_id = await opened(pair, max_bytes=max_bytes)
    bodies = [pb(i, b"b" * 1000) for i in range(1000)]
    pair.server.send(stream_id, *bodies)
    most_bytes, _ = await read_slowly(pair, reader, stream_id, bodies, 0, 1000)
    assert max_bytes // 2 < most_bytes <= max_bytes


async def test_read_ahead_is_bounded_in_messages() -> None:
    pair = Pair()
    reader, stream_id = await opened(pair, max_messages=50)
    bodies = [pb(i, b"m" * 1000) for i in range(2000)]
    pair.server.send(stream_id, *bodies)
    # The first window (64 KiB) comes before any size is known; after it the window
    # holds about 50 messages of the size seen.
    await read_slowly(pair, reader, stream_id, bodies, 0, 200)
    _, most_messages = await read_slowly(pair, reader, stream_id, bodies, 200, 2000)
    assert 25 < most_messages <= 50


async def read_within_the_bound(
    pair: Pair, reader: StreamReader, stream_id: int, bodies: list[bytes], max_bytes: int
) -> list[int]:
    """Take every message one by one, letting the connection run between takes, and
    check the read-ahead bound each time: what the server sent that was not taken is
    at most max(max_bytes, the largest of those messages), and so is what the reader
    lets it send. Returns, for each message, what the server had sent beyond the
    messages taken before it."""
    costs = [len(grpc_message(body)) for body in bodies]
    starts = [sum(costs[:i]) for i in range(len(costs) + 1)]
    handshake = len(grpc_message(HANDSHAKE))
    aheads = []
    for i in range(len(bodies)):
        pair.pump()
        await asyncio.sleep(0)  # let a grant go out
        pair.pump()
        sent = pair.server.sent[stream_id] - handshake
        ahead = sent - starts[i]
        held = [costs[j] for j in range(i, len(costs)) if starts[j] < sent]
        bound = max([max_bytes, *held])
        assert ahead <= bound, f"message {i}: {ahead} bytes read ahead, above {bound}"
        assert reader.read_ahead_limit <= bound, f"message {i}: window {reader.window}"
        aheads.append(ahead)
        assert cast(Message, await take(reader)).offset == i
    return aheads


async def test_a_message_larger_than_the_read_ahead_is_let_through_alone() -> None:
    pair = Pair()
    max_bytes = 64 * 1024
    reader, stream_id = await opened(pair, max_bytes=max_bytes)
    sizes = [1000] * 100 + [300_000] + [1000] * 100 + [200_000, 70_000] + [1000] * 50
    bodies = [pb(i, b"x" * n) for i, n in enumerate(sizes)]
    pair.server.send(stream_id, *bodies)
    aheads = await read_within_the_bound(pair, reader, stream_id, bodies, max_bytes)
    # Waiting for each large message, the read-ahead held all of it (the window was
    # widened to its size, beyond max_bytes) and nothing after it...
    for i in (100, 201, 202):
        assert aheads[i] == len(grpc_message(bodies[i])) > max_bytes
    # ... and it narrowed back once it was taken (until the next large one came).
    assert max(aheads[101:150]) <= max_bytes and max(aheads[203:]) <= max_bytes
    assert reader.read_ahead_limit <= max_bytes


@pytest.mark.parametrize("seed", range(6))
async def test_the_read_ahead_bound_holds_whatever_the_sizes(seed: int) -> None:
    rng = random.Random(seed)
    max_bytes = rng.choice([16 * 1024, 40 * 1024, 128 * 1024])
    max_messages = rng.choice([2, 8, 64, 4096])
    pair = Pair()
    reader, stream_id = await opened(pair, max_bytes=max_bytes, max_messages=max_messages)
    sizes = [
        rng.randint(max_bytes // 2, 4 * max_bytes) if rng.random() < 0.1 else rng.randint(0, 3000)
        for _ in range(150)
    ]
    bodies = [pb(i, b"r" * n) for i, n in enumerate(sizes)]
    pair.server.send(stream_id, *bodies)
    # Every message arrives (a large one never waits for a window that cannot come),
    # and the bound holds at each step.
    await read_within_the_bound(pair, reader, stream_id, bodies, max_bytes)


async def test_the_read_ahead_never_widens_beyond_the_largest_message_read() -> None:
    pair = Pair(max_message=100_000)
    reader, stream_id = await opened(pair, max_bytes=16 * 1024)
    fits, too_large = pb(0, b"f" * 99_000), pb(1, b"t" * 100_000)
    assert len(fits) <= 100_000 < len(too_large)
    pair.server.send(stream_id, fits, too_large)
    await read_within_the_bound(pair, reader, stream_id, [fits], 16 * 1024)
    pair.pump()
    assert reader.read_ahead_limit <= 100_005
    end = await take(reader)
    assert isinstance(end, StreamEnd) and isinstance(end.error, RpcError)
    assert "above the 100000 bytes" in str(end.error)


async def test_a_stalled_call_does_not_hold_back_another() -> None:
    pair = Pair()
    stalled, stalled_id = await opened(pair, max_bytes=32 * 1024)
    moving, moving_id = await opened(pair, max_bytes=32 * 1024)
    pair.server.send(stalled_id, *(pb(i, b"s" * 500) for i in range(1000)))
    pair.server.send(moving_id, *(pb(i, b"m" * 500) for i in range(1000)))
    pair.pump()
    got = []
    for _ in range(1000):
        got.append(cast(Message, await take(moving)).offset)
        pair.pump()
        await asyncio.sleep(0)
        pair.pump()
    assert got == list(range(1000))
    assert pair.server.sent[stalled_id] <= 32 * 1024
    stalled.cancel()


async def test_cancelled_waits_lose_no_message_under_a_racing_server() -> None:
    pair = Pair()
    reader, stream_id = await opened(pair, max_messages=64)
    count = 20_000
    rng = random.Random(7)

    async def produce() -> None:
        sent = 0
        while sent < count:
            batch = min(count - sent, rng.choice([1, 1, 5, 50, 300]))
            pair.server.send(stream_id, *(pb(i) for i in range(sent, sent + batch)))
            pair.pump()
            sent += batch
            await asyncio.sleep(rng.random() * 0.002 if rng.random() < 0.3 else 0)
        pair.server.finish(stream_id)
        pair.pump()

    producer = asyncio.ensure_future(produce())
    expected = 0
    while True:
        try:
            item = await asyncio.wait_for(reader.next_item(), 0.0005)
        except TimeoutError:
            pair.pump()
            continue
        if isinstance(item, StreamEnd):
            break
        assert cast(Message, item).offset == expected
        expected += 1
    await producer
    assert expected == count


# ---------------------------------------------------------------------- delivery


async def test_messages_and_their_bytes_are_counted_once_taken() -> None:
    pair = Pair()
    cell = ReadCell()
    reader, stream_id = await opened(pair, Delivery(cell), skip_through=1)
    bodies = [pb(i, b"x" * i, key=b"key") for i in range(6)]
    pair.server.send(stream_id, *bodies)
    pair.pump()
    assert await offsets(reader, 2) == [2, 3]  # the replayed 0 and 1 are skipped
    # Counted in bulk (when the buffer drains, at a grant, at the end), never
    # ahead of what was taken.
    assert cell.messages <= 2
    assert await offsets(reader, 2) == [4, 5]
    assert reader.get() is None  # drained
    # Bytes as the broker sent each message (key, headers and all; no framing).
    assert (cell.messages, cell.bytes) == (4, sum(map(len, bodies[2:])))
    assert reader.get() is None
    assert cell.messages == 4  # the handshake and empty polls count nothing

    # Messages taken before the end are counted when the call ends (a stop
    # position reached, or cancelled), even if the buffer was never drained.
    more = [pb(i, b"y" * 100) for i in range(6, 106)]
    pair.server.send(stream_id, *more)
    pair.pump()
    assert await offsets(reader, 3) == [6, 7, 8]
    reader.cancel()
    assert (cell.messages, cell.bytes) == (7, sum(map(len, bodies[2:] + more[:3])))


async def test_messages_taken_after_the_call_ended_are_counted_on_cancel() -> None:
    pair = Pair()
    cell = ReadCell()
    reader, stream_id = await opened(pair, Delivery(cell))
    bodies = [pb(i, b"w" * 10) for i in range(3)]
    pair.server.send(stream_id, *bodies)
    pair.server.finish(stream_id)  # the stop position: the end follows the messages
    pair.pump()
    assert await offsets(reader, 2) == [0, 1]
    assert reader.finished
    reader.cancel()  # what a subscription does at its stop offset
    assert (cell.messages, cell.bytes) == (2, sum(map(len, bodies[:2])))


async def test_counts_follow_the_grants_of_a_busy_reader() -> None:
    pair = Pair()
    cell = ReadCell()
    reader, stream_id = await opened(pair, Delivery(cell), max_messages=64)
    bodies = [pb(i, b"z" * 500) for i in range(2000)]
    taken = 0
    for start in range(0, len(bodies), 50):
        pair.server.send(stream_id, *bodies[start : start + 50])
        pair.pump()
        assert await offsets(reader, 50) == list(range(start, start + 50))
        taken += 50
        # Grants happen every half window: the counts are never far behind.
        assert taken - 64 <= cell.messages <= taken
    assert reader.get() is None
    assert (cell.messages, cell.bytes) == (2000, sum(map(len, bodies)))


async def test_a_message_the_deserializer_refuses_is_taken_and_reading_goes_on() -> None:
    pair = Pair()
    cell = ReadCell()
    delivery = Delivery(cell, JsonDeserializer(), StringDeserializer())
    reader, stream_id = await opened(pair, delivery)
    pair.server.send(
        stream_id, pb(0, b'{"a": 1}', key=b"k0"), pb(1, b"{not json", key=b"k1"), pb(2, b"[2]")
    )
    pair.pump()
    first = cast(Decoded, await take(reader))
    assert (first.offset, first.value, first.key) == (0, {"a": 1}, "k0")
    with pytest.raises(DeserializationError) as caught:
        await take(reader)
    error = caught.value
    assert (error.stream, error.partition, error.offset, error.what) == ("s", 2, 1, "value")
    assert error.raw_message is not None
    assert (error.raw_message.value, error.raw_message.key) == (b"{not json", b"k1")
    assert "offset 1 of stream 's', partition 2" in str(error)
    third = cast(Decoded, await take(reader))
    assert (third.offset, third.value, third.key) == (2, [2], None)  # no key stays None
    assert reader.get() is None
    assert cell.messages == 3  # the refused message was read too


async def test_a_key_the_deserializer_refuses_names_the_key() -> None:
    pair = Pair()
    reader, stream_id = await opened(pair, Delivery(key_deserializer=StringDeserializer()))
    pair.server.send(stream_id, pb(0, b"v", key=b"\xff\xfe"), pb(1, b"w", key=b"ok"))
    pair.pump()
    with pytest.raises(DeserializationError) as caught:
        await take(reader)
    assert (caught.value.offset, caught.value.what) == (0, "key")
    ok = cast(Decoded, await take(reader))
    assert (ok.value, ok.key) == (b"w", "ok")  # the value has no deserializer: bytes


# ---------------------------------------------------------------------- parsed protobufs


async def take_protos(reader: StreamReader, n: int, limit: int = 7) -> list[api_pb2.Message]:
    """``n`` messages through take_protos, ``limit`` at most per take."""
    out: list[api_pb2.Message] = []
    async with asyncio.timeout(5):
        while len(out) < n:
            got = reader.take_protos(min(limit, n - len(out)))
            assert len(got) <= limit
            if not got:
                await reader.wait()
            out.extend(got)
    return out


async def test_take_protos_hands_over_what_get_would_then_leaves_the_end() -> None:
    pair = Pair()
    reader, stream_id = pair.call(skip_through=5)
    pair.server.respond(stream_id)
    bodies = [pb(i, b"%d" % i, key=b"k" if i % 2 else b"") for i in range(3, 300)]
    pair.server.send(stream_id, HANDSHAKE, *bodies)
    pair.server.finish(stream_id)
    pair.pump()
    # The handshake and the replayed offsets 3 to 5 are dropped.
    got = await take_protos(reader, 294)
    assert [p.offset for p in got] == list(range(6, 300))
    assert [message_from_proto(p) for p in got] == [
        message_from_proto(api_pb2.Message.FromString(body)) for body in bodies[3:]
    ]
    # The end of the call stays for get() to report.
    assert reader.take_protos(10) == []
    end = reader.get()
    assert isinstance(end, StreamEnd) and end.error is None
    assert reader.get() is None


async def test_take_protos_counts_as_get_does() -> None:
    pair = Pair()
    cell = ReadCell()
    reader, stream_id = await opened(pair, Delivery(cell), skip_through=1)
    bodies = [pb(i, b"x" * i, key=b"key") for i in range(6)]
    pair.server.send(stream_id, *bodies)
    pair.pump()
    assert [p.offset for p in reader.take_protos(2)] == [2, 3]
    assert cell.messages <= 2  # never ahead of what was taken
    assert [p.offset for p in reader.take_protos(10)] == [4, 5]  # drained: counted
    assert (cell.messages, cell.bytes) == (4, sum(map(len, bodies[2:])))
    more = [pb(i, b"y" * 100) for i in range(6, 106)]
    pair.server.send(stream_id, *more)
    pair.pump()
    assert [p.offset for p in reader.take_protos(3)] == [6, 7, 8]
    reader.cancel()
    assert (cell.messages, cell.bytes) == (7, sum(map(len, bodies[2:] + more[:3])))


@pytest.mark.parametrize("limit", [1, 10, 1000])
async def test_take_protos_keeps_the_read_ahead_bound(limit: int) -> None:
    pair = Pair()
    max_bytes = 64 * 1024
    reader, stream_id = await opened(pair, max_bytes=max_bytes)
    bodies = [pb(i, b"b" * 1000) for i in range(1000)]
    pair.server.send(stream_id, *bodies)
    sizes = [len(grpc_message(body)) for body in bodies]
    taken = len(grpc_message(HANDSHAKE))
    got: list[int] = []
    async with asyncio.timeout(10):
        while len(got) < len(bodies):
            pair.pump()
            await asyncio.sleep(0)  # let a grant go out
            pair.pump()
            ahead = pair.server.sent[stream_id] - taken
            assert ahead <= max_bytes
            assert reader.read_ahead_limit <= max_bytes
            batch = [p.offset for p in reader.take_protos(limit)]
            taken += sum(sizes[o] for o in batch)
            got.extend(batch)
            if not batch:
                await reader.wait()
    assert got == list(range(1000))


async def test_take_protos_refuses_a_reader_with_deserializers() -> None:
    pair = Pair()
    reader, _ = await opened(pair, Delivery(None, StringDeserializer()))
    with pytest.raises(RuntimeError, match="deserializers"):
        reader.take_protos(1)


class Recorder(CallHandle):
    def __init__(self) -> None:
        self.grants: list[int] = []

    def grant(self, increment: int) -> None:
        self.grants.append(increment)

    def cancel(self) -> None:
        pass


@pytest.mark.parametrize("limit", [1, 3, 64, 5000])
@pytest.mark.parametrize("seed", [1, 2])
async def test_take_protos_grants_and_counts_exactly_as_get(limit: int, seed: int) -> None:
    """Fed the same bursts, a reader taken from with take_protos grants the same
    increments at the same points and counts the same as one taken from with get()."""
    rng = random.Random(seed)
    bodies = [HANDSHAKE] + [pb(i, b"s" * rng.randrange(0, 3000)) for i in range(3000)]
    bursts: list[list[bytes]] = []
    i = 0
    while i < len(bodies):
        n = rng.choice([1, 5, 20, 60, 300])
        bursts.append(bodies[i : i + n])
        i += n
    takes = [rng.choice([1, 7, 40, 300]) for _ in bursts]

    def reader() -> tuple[StreamReader, Recorder, ReadCell]:
        cell = ReadCell()
        r = StreamReader(
            skip_through=10, max_messages=256, max_bytes=64 * 1024, delivery=Delivery(cell)
        )
        handle = Recorder()
        r.attach(handle)
        return r, handle, cell

    by_get, get_handle, get_cell = reader()
    by_protos, protos_handle, protos_cell = reader()
    got: list[int] = []
    got_protos: list[int] = []
    for burst, want in zip(bursts, takes, strict=True):
        for body in burst:
            by_get.h2_append(body)
            by_protos.h2_append(body)
        # Take up to ``want`` messages from each, in slices of ``limit``.
        start = len(got)
        while len(got) - start < want:
            item = by_get.get()
            if item is None:
                break
            if isinstance(item, Message):
                got.append(item.offset)
        taken = 0
        while taken < want:
            batch = by_protos.take_protos(min(limit, want - taken))
            if not batch and not by_protos.buffered:
                break
            if not batch:  # only the handshake or replayed offsets were taken
                continue
            taken += len(batch)
            got_protos.extend(p.offset for p in batch)
        assert got_protos == got
    while (item := by_get.get()) is not None:
        got.append(cast(Message, item).offset)
    while batch := by_protos.take_protos(limit):
        got_protos.extend(p.offset for p in batch)
    assert got == got_protos == list(range(11, 3000))
    assert len(get_handle.grants) > 20
    assert protos_handle.grants == get_handle.grants
    assert (protos_cell.messages, protos_cell.bytes) == (get_cell.messages, get_cell.bytes)
    assert by_protos.read_ahead_limit == by_get.read_ahead_limit
