"""Our HTTP/2 client against python-hyper's h2 on valid server byte streams.

An h2 server connection plays a broker: for every call it sends (in an order drawn at
random across calls) response headers (after informational ones, sometimes), gRPC
messages cut into DATA frames at random points, with and without padding, then
trailers, or it ends the call with a trailers-only response, an HTTP error or a
RST_STREAM. Its HPACK encoder uses the dynamic table, Huffman coding or not, and
changes the table's size. Its bytes are then re-framed (header blocks cut into
HEADERS and CONTINUATION frames, padded and prioritized HEADERS, PING, PRIORITY and
unknown frames slipped in between) and cut at random points into reads.

The same reads go to our client, which drives the server (its SETTINGS, windows and
requests), and to h2's client connection as a reference. Both must get the messages
and the statuses the server was told to send.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liftbridge_nats._h2 import (
    _HTTP_STATUS,
    _RESET_STATUS,
    CONTINUATION,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    INTERNAL,
    MAX_FRAME,
    PADDED,
    PING,
    PRIORITY,
    PRIORITY_FLAG,
    UNKNOWN,
    H2Connection,
    Status,
    frame,
    message,
)

PATH = "/proto.API/Subscribe"


# ---------------------------------------------------------------------- what the server sends


@dataclass
class Script:
    """One call as the server plays it, and how it must end."""

    kind: str  # "ok", "trailers-only", "reset", "http-error"
    informational: int
    headers: list[tuple[bytes, bytes]]
    messages: list[bytes]
    status: int
    details: str
    trailers: list[tuple[bytes, bytes]]
    reset_code: int
    http_status: int
    cuts: list[int]  # where the call's message bytes are cut into DATA frames
    pads: list[int | None]

    def expected(self) -> tuple[list[bytes], int, str | None]:
        if self.kind == "ok":
            return self.messages, self.status, self.details
        if self.kind == "trailers-only":
            return [], self.status, self.details
        if self.kind == "reset":
            return self.messages, _RESET_STATUS.get(self.reset_code, INTERNAL), None
        return [], _HTTP_STATUS.get(self.http_status, UNKNOWN), None


_token = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=16)
_forbidden = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}
_name = _token.filter(
    lambda n: n not in _forbidden and n not in ("te", "content-length") and not n.startswith("grpc")
)
# Visible ASCII and latin-1 (obs-text) inside, no whitespace at either end.
_value = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=60,
).map(lambda v: v.strip(" "))
_fields = st.lists(
    st.tuples(_name, _value).map(lambda f: (f[0].encode(), f[1].encode("latin-1"))), max_size=5
)


@st.composite
def scripts(draw: st.DrawFn) -> Script:
    kind = draw(st.sampled_from(["ok", "ok", "ok", "trailers-only", "reset", "http-error"]))
    messages: list[bytes] = []
    if kind in ("ok", "reset"):
        sizes = draw(
            st.lists(
                st.one_of(st.integers(0, 200), st.integers(0, 40_000)), min_size=0, max_size=12
            )
        )
        messages = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    total = sum(len(message(m)) for m in messages)
    cuts = sorted(set(draw(st.lists(st.integers(0, max(0, total)), max_size=20))))
    # Or one DATA frame per message, as brokers send them.
    if draw(st.booleans()):
        cuts, pos = [], 0
        for m in messages:
            pos += len(message(m))
            cuts.append(pos)
    pads = draw(st.lists(st.one_of(st.none(), st.integers(0, 255)), min_size=1, max_size=8))
    return Script(
        kind=kind,
        informational=draw(st.integers(0, 2)),
        headers=draw(_fields),
        messages=messages,
        status=draw(st.integers(0, 16)),
        details=draw(st.text(max_size=40)),
        trailers=draw(_fields),
        reset_code=draw(st.sampled_from([0, 1, 2, 7, 8, 11, 12])),
        http_status=draw(st.sampled_from([400, 401, 403, 404, 418, 429, 500, 502, 503, 504])),
        cuts=cuts,
        pads=pads,
    )


class Server:
    """h2's server side, following ``Script`` for each call it receives."""

    def __init__(self, scripts: list[Script], rng: random.Random) -> None:
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.h2.initiate_connection()
        self.rng = rng
        self.scripts = scripts
        self.todo: dict[int, list[tuple[str, Any]]] = {}
        self.calls = 0
        encode = self.h2.encoder.encode

        def encode_maybe_huffman(headers: Any, huffman: bool = True) -> bytes:
            # Huffman or plain strings, and now and then a new table size (<= ours).
            if rng.random() < 0.2:
                self.h2.encoder.header_table_size = rng.choice([0, 32, 100, 512, 4096])
            return encode(headers, huffman=rng.random() < 0.6)

        self.h2.encoder.encode = encode_maybe_huffman  # type: ignore[method-assign]

    def receive(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                headers = dict(event.headers or [])
                assert headers[b":path"] == PATH.encode()
                self.todo[event.stream_id] = self._plan(self.scripts[self.calls])
                self.calls += 1
            elif isinstance(event, h2.events.DataReceived):
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)

    def _plan(self, script: Script) -> list[tuple[str, Any]]:
        plan: list[tuple[str, Any]] = []
        plan += [("headers", ([(b":status", b"103")], False))] * script.informational
        if script.kind == "http-error":
            plan.append(("headers", ([(b":status", str(script.http_status).encode())], True)))
            return plan
        response = [(b":status", b"200"), (b"content-type", b"application/grpc")]
        trailers = [
            (b"grpc-status", str(script.status).encode()),
            (b"grpc-message", quote(script.details).encode()),
            *script.trailers,
        ]
        if script.kind == "trailers-only":
            plan.append(("headers", (response + script.headers + trailers, True)))
            return plan
        plan.append(("headers", (response + script.headers, False)))
        body = b"".join(message(m) for m in script.messages)
        start = 0
        for i, cut in enumerate([*script.cuts, len(body)]):
            if cut > start:
                plan.append(("data", (body[start:cut], script.pads[i % len(script.pads)])))
                start = cut
        if script.kind == "reset":
            plan.append(("reset", script.reset_code))
        else:
            plan.append(("headers", (trailers, True)))
        return plan

    def step(self) -> bool:
        """Do one thing some call can do now; False when every call waits or is done."""
        ready = [s for s, todo in self.todo.items() if todo]
        self.rng.shuffle(ready)
        for stream_id in ready:
            todo = self.todo[stream_id]
            what, arg = todo[0]
            if what == "headers":
                headers, end = arg
                self.h2.send_headers(stream_id, headers, end_stream=end)
            elif what == "reset":
                self.h2.reset_stream(stream_id, arg)
            else:
                data, pad = arg
                overhead = 0 if pad is None else pad + 1
                room = min(
                    self.h2.local_flow_control_window(stream_id),
                    self.h2.max_outbound_frame_size,
                )
                room -= overhead
                if room <= 0:
                    continue
                self.h2.send_data(stream_id, data[:room], pad_length=pad)
                if room < len(data):
                    todo[0] = ("data", (data[room:], pad))
                    return True
            todo.pop(0)
            return True
        return False


# ---------------------------------------------------------------------- re-framing


def reframe(data: bytes, rng: random.Random, streams: list[int]) -> bytes:
    """The same connection, other frames: header blocks cut into CONTINUATIONs,
    HEADERS padded or prioritized, harmless frames slipped in between blocks (not
    before the server's first frame, its SETTINGS)."""
    out = bytearray()
    pos = 0
    block = bytearray()
    block_flags = 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        ftype, flags = data[pos + 3], data[pos + 4]
        stream = int.from_bytes(data[pos + 5 : pos + 9], "big")
        payload = data[pos + 9 : pos + 9 + length]
        pos += 9 + length
        if ftype in (HEADERS, CONTINUATION):
            if ftype == HEADERS:
                block = bytearray(payload)  # h2 pads and prioritizes nothing
                block_flags = flags & END_STREAM
            else:
                block += payload
            if flags & END_HEADERS:
                out += _split_block(stream, bytes(block), block_flags, rng)
            continue
        if streams and rng.random() < 0.1:
            out += _noise(rng, streams)
        out += data[pos - 9 - length : pos]
    return bytes(out)


def _split_block(stream: int, block: bytes, flags: int, rng: random.Random) -> bytes:
    first_extra = b""
    if rng.random() < 0.3:
        flags |= PRIORITY_FLAG
        other = rng.choice([0, stream + 2, 1 if stream != 1 else 3])
        first_extra = struct.pack(">LB", other | rng.choice([0, 1 << 31]), rng.randrange(256))
    pad = rng.randrange(256) if rng.random() < 0.3 else None
    pieces = rng.randint(1, 6)
    cuts = sorted(rng.randrange(len(block) + 1) for _ in range(pieces - 1))
    fragments = [block[a:b] for a, b in zip([0, *cuts], [*cuts, len(block)], strict=True)]
    out = bytearray()
    for i, fragment in enumerate(fragments):
        last = END_HEADERS if i == len(fragments) - 1 else 0
        if i == 0:
            payload = first_extra + fragment
            head_flags = flags | last
            # (h2 refuses padding around nothing, which RFC 9113 allows: not tried.)
            if pad is not None and payload and len(payload) + pad + 1 <= MAX_FRAME:
                payload = bytes([pad]) + payload + bytes(pad)
                head_flags |= PADDED
            out += _frames_of(HEADERS, head_flags, stream, payload)
        else:
            out += frame(CONTINUATION, last, stream, fragment)
    return bytes(out)


def _frames_of(ftype: int, flags: int, stream: int, payload: bytes) -> bytes:
    assert len(payload) <= MAX_FRAME, "fragments of h2's blocks fit a frame"
    return frame(ftype, flags, stream, payload)


def _noise(rng: random.Random, streams: list[int]) -> bytes:
    choice = rng.randrange(3)
    if choice == 0:
        return frame(PING, 0, 0, rng.randbytes(8))
    if choice == 1 and streams:
        stream = rng.choice(streams)
        return frame(PRIORITY, 0, stream, struct.pack(">LB", 0, rng.randrange(256)))
    return frame(rng.randrange(0x0B, 0xFF), rng.randrange(256), rng.choice([0, 1]), b"x" * 3)


def cut(data: bytes, rng: random.Random) -> list[bytes]:
    """Reads as a socket gives them: from 1 byte to 64 KiB."""
    out = []
    pos = 0
    while pos < len(data):
        size = rng.choice([1, 2, 7, 9, 10, 100, 1000, 16_393, 65_536, rng.randrange(1, 70_000)])
        out.append(data[pos : pos + size])
        pos += size
    return out


# ---------------------------------------------------------------------- the two clients


class Owner:
    def __init__(self, conn: H2Connection) -> None:
        self.conn = conn
        self.stream_id = 0
        self.bodies: list[bytes] = []
        self.status: Status | None = None

    def h2_append(self, body: bytes) -> None:
        assert self.status is None
        self.bodies.append(body)
        self.conn.grant(self.stream_id, len(body) + 5)  # a consumer that keeps up

    def h2_wake(self) -> None:
        pass

    def h2_need(self, size: int) -> None:
        self.conn.grant(self.stream_id, size)

    def h2_end(self, status: Status) -> None:
        assert self.status is None
        self.status = status


@dataclass
class Reference:
    """h2's client on the same bytes, with a gRPC reading of its events."""

    conn: h2.connection.H2Connection = field(
        default_factory=lambda: h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
    )
    bodies: dict[int, list[bytes]] = field(default_factory=dict)
    partial: dict[int, bytearray] = field(default_factory=dict)
    ends: dict[int, tuple[int, str | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.conn.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            },
        )
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(2**31 - 1 - 65_535)

    def start(self, stream_id: int) -> None:
        assert self.conn.get_next_available_stream_id() == stream_id
        self.conn.send_headers(
            stream_id,
            [(":method", "POST"), (":scheme", "http"), (":path", PATH), (":authority", "b")],
            end_stream=True,
        )
        self.bodies[stream_id] = []
        self.partial[stream_id] = bytearray()
        self.conn.data_to_send()

    def receive(self, data: bytes) -> None:
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                fields = dict(event.headers or [])
                status = fields[b":status"]
                if status != b"200":
                    self.ends[event.stream_id] = (_HTTP_STATUS.get(int(status), UNKNOWN), None)
                elif event.stream_ended is not None:
                    self.ends[event.stream_id] = _grpc_status(fields)
            elif isinstance(event, h2.events.DataReceived):
                buf = self.partial[event.stream_id]
                buf += event.data or b""
                while len(buf) >= 5 and len(buf) >= 5 + int.from_bytes(buf[1:5], "big"):
                    size = int.from_bytes(buf[1:5], "big")
                    self.bodies[event.stream_id].append(bytes(buf[5 : 5 + size]))
                    del buf[: 5 + size]
            elif isinstance(event, h2.events.TrailersReceived):
                self.ends[event.stream_id] = _grpc_status(dict(event.headers or []))
            elif isinstance(event, h2.events.StreamReset):
                code = int(event.error_code or 0)
                self.ends[event.stream_id] = (_RESET_STATUS.get(code, INTERNAL), None)
        self.conn.data_to_send()


def _grpc_status(fields: dict[bytes, bytes]) -> tuple[int, str | None]:
    from urllib.parse import unquote

    raw = fields.get(b"grpc-status", b"")
    details = unquote(fields.get(b"grpc-message", b"").decode("latin-1"), errors="replace")
    return (int(raw), details) if raw.isdigit() else (UNKNOWN, None)


# ---------------------------------------------------------------------- the test


def run(call_scripts: list[Script], rng: random.Random) -> None:
    ours = H2Connection("broker:9292")
    ours.initiate()
    reference = Reference()
    server = Server(call_scripts, rng)
    owners: dict[int, Owner] = {}
    wire = bytearray()

    def deliver(everything: bool) -> None:
        data = reframe(bytes(server.h2.data_to_send()), rng, list(owners))
        wire.extend(data)
        if not wire:
            return
        size = len(wire) if everything else rng.randrange(len(wire) + 1)
        for piece in cut(bytes(wire[:size]), rng):
            ours.receive(piece)
            reference.receive(piece)
        del wire[:size]

    def exchange() -> None:
        out = bytes(ours.outbox)
        ours.outbox.clear()
        if out:
            server.receive(out)
        deliver(everything=False)

    # The prefaces, then the calls, one by one or all at once.
    for _ in range(3):
        exchange()
        deliver(everything=True)
    for _ in call_scripts:
        owner = Owner(ours)
        owner.stream_id = ours.start_call(
            PATH, b"request", owner, window=rng.choice([16_384, 65_536])
        )
        owners[owner.stream_id] = owner
        reference.start(owner.stream_id)
        if rng.random() < 0.5:
            exchange()
    for _ in range(100_000):
        exchange()
        progressed = False
        for _ in range(rng.randint(1, 5)):
            progressed = server.step() or progressed
        if not progressed and not ours.outbox and not any(server.todo.values()):
            break
    else:
        raise AssertionError("the exchange never settled")
    deliver(everything=True)

    for stream_id, owner in owners.items():
        script = call_scripts[(stream_id - 1) // 2]
        messages, code, details = script.expected()
        assert owner.status is not None, f"stream {stream_id} never ended"
        assert owner.bodies == messages
        assert owner.status.code == code, owner.status
        if details is not None:
            assert owner.status.details == details
        assert reference.bodies[stream_id] == messages
        assert reference.ends[stream_id][0] == code
        if details is not None:
            assert reference.ends[stream_id][1] == details
    assert ours.open_calls == 0
    assert ours.buffered == 0


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(scripts(), min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_our_client_reads_what_h2_reads(call_scripts: list[Script], rng: random.Random) -> None:
    run(call_scripts, rng)


@pytest.mark.parametrize("seed", range(3))
def test_many_messages_on_many_calls(seed: int) -> None:
    rng = random.Random(seed)
    call_scripts = []
    for _ in range(6):
        messages = [
            rng.randbytes(rng.choice([0, 1, 120, 120, 120, 5000, 70_000])) for _ in range(300)
        ]
        total = sum(len(message(m)) for m in messages)
        cuts, pos = [], 0
        for m in messages:
            pos += len(message(m))
            if rng.random() < 0.8:
                cuts.append(pos)
            else:
                cuts.append(rng.randrange(total + 1))
        call_scripts.append(
            Script(
                kind="ok",
                informational=0,
                headers=[(b"x-seed", str(seed).encode())],
                messages=messages,
                status=0,
                details="",
                trailers=[],
                reset_code=0,
                http_status=200,
                cuts=sorted(set(cuts)),
                pads=[None, None, None, 7],
            )
        )
    run(call_scripts, rng)
