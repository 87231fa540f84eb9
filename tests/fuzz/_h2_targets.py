"""Fuzz targets of the read path: our HTTP/2 client and its HPACK decoder.

``h2``: an input is a mode byte and bytes from a server. The mode says whether a valid
server preface (SETTINGS, SETTINGS ACK) and a response to the first call come first,
how the bytes are cut into reads, and the client's settings (a small ``max_message``,
owners that grant back what they take). The client has two calls open. The contract:

- :meth:`H2Connection.receive` returns or raises :class:`H2ProtocolError`, nothing
  else; after the error a GOAWAY with its code is the last frame queued, every call
  has ended (UNAVAILABLE), and nothing more is read;
- a call ends once, with a :class:`Status` of an int code and a str message, and gets
  no message after its end; messages are bytes;
- memory is bounded by the limits: the start of a frame held between reads is less
  than a frame (16 KiB and its header), an open header block at most 128 KiB, and the
  message bytes a call got (taken or in pieces) never exceed the window the client
  advertised for it (its initial window plus the WINDOW_UPDATEs it queued);
- what the client queues to send is at most twice what it read, and a constant.

``hpack``: an input is a mode byte (the header list limit, how many blocks) and header
blocks, decoded in turn by one :class:`HpackDecoder`. The contract: a list of str
pairs within the limit or :class:`HpackError`, nothing else; and the hpack package's
decoder, the oracle, decodes the same blocks to the same fields or refuses them too.

Time linear in the input is checked by the tests on large adversarial inputs
(tests/fuzz/test_decoders_fuzz.py), not per input here.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

import hpack

from liftbridge_nats._h2 import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    MAX_FRAME,
    MAX_HEADER_LIST,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    RST_STREAM,
    SETTINGS,
    UNAVAILABLE,
    WINDOW_UPDATE,
    H2Connection,
    H2ProtocolError,
    Status,
    frame,
    message,
)
from liftbridge_nats._hpack import HpackDecoder, HpackError

from ._targets import Finding, Tally

PATH = "/proto.API/Subscribe"
WINDOWS = (16_384, 65_536)
_CHUNKS = (0, 1, 2, 9, 10, 100, 1000, 16_393)
_LIMITS = (128, 1024, 4096, 65_536)


class InvariantError(AssertionError):
    """A target's contract was broken (a finding)."""


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise InvariantError(what)


# ---------------------------------------------------------------------- h2


class _Owner:
    def __init__(self, conn: H2Connection, grants: bool) -> None:
        self.conn = conn
        self.grants = grants
        self.stream_id = 0
        self.taken = 0  # message bytes, prefixes included
        self.status: Status | None = None

    def h2_append(self, body: bytes) -> None:
        _require(self.status is None, "a message after the call's end")
        _require(type(body) is bytes, f"a message of type {type(body).__name__}")
        self.taken += len(body) + 5
        if self.grants:
            self.conn.grant(self.stream_id, len(body) + 5)

    def h2_wake(self) -> None:
        pass

    def h2_need(self, size: int) -> None:
        _require(isinstance(size, int) and size >= 5, f"h2_need({size!r})")
        if self.grants:
            self.conn.grant(self.stream_id, size)

    def h2_end(self, status: Status) -> None:
        _require(self.status is None, "a call ended twice")
        _require(
            isinstance(status, Status)
            and isinstance(status.code, int)
            and 0 <= status.code < 2**32
            and isinstance(status.details, str),
            f"a bad status {status!r}",
        )
        self.status = status


def _frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    out = []
    pos = 0
    while len(data) - pos >= 9:
        length = int.from_bytes(data[pos : pos + 3], "big")
        stream = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        out.append((data[pos + 3], data[pos + 4], stream, data[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    return out


def h2_one(data: bytes) -> str:
    """Run one input; the outcome's name. Raises on a broken contract (or lets any
    exception but H2ProtocolError through)."""
    mode = data[0] if data else 0
    payload = data[1:]
    conn = H2Connection("fuzz:1", max_message=100 if mode & 0x20 else 64 * 1024 * 1024)
    conn.initiate()
    owners = []
    for window in (WINDOWS[1], WINDOWS[mode >> 7]):
        owner = _Owner(conn, grants=bool(mode & 0x40))
        owner.stream_id = conn.start_call(PATH, b"request", owner, window=window)
        owners.append(owner)
    stream = b""
    if mode & 1:
        stream += frame(SETTINGS, 0, 0) + frame(SETTINGS, ACK, 0)
        if mode & 2:
            stream += frame(HEADERS, END_HEADERS, 1, b"\x88")  # :status 200
    stream += payload
    # Reads of the chosen size, but at most about 64 of them (a long input cut into
    # 1-byte reads would cost the fuzzer's time, not find more).
    step = max(_CHUNKS[(mode >> 2) & 7], len(stream) // 64, 1)
    if not _CHUNKS[(mode >> 2) & 7]:
        step = max(1, len(stream))
    sent_before = len(conn.outbox)
    outcome = "read"
    error: H2ProtocolError | None = None
    open_before: list[_Owner] = []
    for start in range(0, len(stream), step):
        open_before = [o for o in owners if o.status is None]
        try:
            conn.receive(stream[start : start + step])
        except H2ProtocolError as exc:
            error = exc
            outcome = f"H2ProtocolError {exc.code_name}"
            break
        _check_bounds(conn, owners)
    sent = bytes(conn.outbox)
    _require(
        len(sent) - sent_before <= 2 * len(stream) + 1024,
        f"{len(sent) - sent_before} bytes queued for {len(stream)} read",
    )
    frames = _frames(sent[len(PREFACE) :])
    if error is not None:
        _require(bool(frames) and frames[-1][0] == GOAWAY, "no GOAWAY after a connection error")
        code = int.from_bytes(frames[-1][3][4:8], "big")
        _require(code == error.code, f"GOAWAY code {code}, error code {error.code}")
        _require(conn.open_calls == 0 and not conn.can_start, "calls left after an error")
        # (A call may have ended otherwise earlier in the same read.)
        for owner in owners:
            _require(owner.status is not None, "a call not ended by a connection error")
        ended_by_error = [
            o for o in open_before if o.status and "HTTP/2 protocol (" in o.status.details
        ]
        for owner in ended_by_error:
            _require(
                owner.status is not None and owner.status.code == UNAVAILABLE, "not UNAVAILABLE"
            )
        conn.outbox.clear()
        conn.receive(frame(PING, 0, 0, bytes(8)))
        _require(not conn.outbox, "read on after a connection error")
    _check_windows(conn, owners, frames)
    if error is None and any(o.status is not None for o in owners):
        outcome = "read, a call ended"
    return outcome


def _check_bounds(conn: H2Connection, owners: list[_Owner]) -> None:
    _require(len(conn._buf) < MAX_FRAME + 9, f"{len(conn._buf)} bytes of a frame held")
    _require(len(conn._block) <= 2 * MAX_HEADER_LIST, f"a header block of {len(conn._block)}")
    for owner in owners:
        call = conn._calls.get(owner.stream_id)
        if call is not None:
            _require(0 <= call.window <= 2**31 - 1, f"a window of {call.window}")


def _check_windows(
    conn: H2Connection, owners: list[_Owner], frames: list[tuple[int, int, int, bytes]]
) -> None:
    initial = 16_384  # the SETTINGS_INITIAL_WINDOW_SIZE we send
    for owner in owners:
        call = conn._calls.get(owner.stream_id)
        held = owner.taken + (len(call.partial) if call is not None else 0)
        granted = initial + sum(
            int.from_bytes(p[:4], "big")
            for t, _, s, p in frames
            if t == WINDOW_UPDATE and s == owner.stream_id
        )
        _require(
            held <= granted,
            f"stream {owner.stream_id} got {held} bytes, {granted} were granted",
        )


def check_h2(data: bytes, tally: Tally) -> None:
    """Run one h2 input; record a finding for anything but the contract."""
    tally.inputs += 1
    tally.calls += 1
    try:
        outcome = h2_one(data)
    except Exception as exc:  # the finding itself
        tally.outcomes[f"h2: {type(exc).__name__}"] += 1
        if len(tally.findings) < 100:
            tally.findings.append(Finding("h2", data, f"{type(exc).__name__}: {exc}"))
    else:
        tally.outcomes[f"h2: {outcome}"] += 1


def _hpack_block(headers: list[tuple[bytes, bytes]], *, huffman: bool) -> bytes:
    return bytes(hpack.Encoder().encode(headers, huffman=huffman))


def h2_seeds() -> list[bytes]:
    """Valid server byte streams (with their mode byte)."""
    encoder = hpack.Encoder()
    response = bytes(encoder.encode([(b":status", b"200"), (b"content-type", b"application/grpc")]))
    trailers = bytes(encoder.encode([(b"grpc-status", b"0"), (b"grpc-message", b"ok%20done")]))
    trailers_huge = bytes(
        encoder.encode([(b"grpc-status", b"13"), (b"grpc-message", b"x" * 20_000)], huffman=False)
    )
    messages = [message(bytes([i]) * n) for i, n in enumerate((0, 1, 120, 120, 300, 5000))]
    calls = frame(HEADERS, END_HEADERS, 1, response) + frame(HEADERS, END_HEADERS, 3, response)
    out = []
    # One DATA frame per message, trailers.
    out.append(
        b"\x01"
        + calls
        + b"".join(frame(DATA, 0, 1, m) for m in messages)
        + frame(HEADERS, END_HEADERS | END_STREAM, 1, trailers)
    )
    # Messages across frames, padding, CONTINUATION, both calls.
    body = b"".join(messages)
    out.append(
        b"\x45"
        + calls
        + frame(DATA, PADDED, 3, b"\x05" + body[:1000] + bytes(5))
        + frame(DATA, 0, 3, body[1000:])
        + frame(HEADERS, END_STREAM, 3, trailers_huge[:10_000])
        + frame(CONTINUATION, END_HEADERS, 3, trailers_huge[10_000:])
        + frame(DATA, 0, 1, messages[2])
    )
    # The preface given; the fast path (mode bit 1); control frames.
    out.append(
        b"\x03"
        + frame(DATA, 0, 1, messages[3]) * 3
        + frame(PING, 0, 0, b"12345678")
        + frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", 1000))
        + frame(WINDOW_UPDATE, 0, 1, struct.pack(">L", 1000))
        + frame(PRIORITY, 0, 3, struct.pack(">LB", 1, 16))
        + frame(0xEE, 0, 0, b"unknown")
        + frame(SETTINGS, 0, 0, struct.pack(">HLHL", 4, 1 << 20, 5, 1 << 15))
        + frame(RST_STREAM, 0, 1, struct.pack(">L", 8))
        + frame(GOAWAY, 0, 0, struct.pack(">LL", 3, 0) + b"bye")
    )
    # Informational, trailers-only, an HTTP error; prioritized and padded HEADERS.
    informational = bytes(encoder.encode([(b":status", b"103")]))
    only = bytes(encoder.encode([(b":status", b"200"), (b"grpc-status", b"9")]))
    out.append(
        b"\x01"
        + frame(HEADERS, END_HEADERS | PRIORITY_FLAG, 1, struct.pack(">LB", 3, 7) + informational)
        + frame(HEADERS, END_HEADERS | END_STREAM | PADDED, 1, b"\x03" + only + bytes(3))
        + frame(HEADERS, END_HEADERS | END_STREAM, 3, bytes(encoder.encode([(b":status", b"503")])))
    )
    # Cut into small reads, small max_message, owners granting.
    out.append(b"\x65" + out[0][1:])
    out.append(b"\x8d" + out[1][1:])
    return out


_TYPES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0x0A, 0xEE)
_STREAMS = (0, 1, 2, 3, 5, 7, 1 | 1 << 31, 2**31 - 1)
_LENGTHS = (0, 1, 4, 5, 7, 8, 9, 16_383, 16_384, 16_385, 2**24 - 1)


def mutate_h2(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """Frame-aware mutations (lengths, types, flags, stream ids, whole frames) and
    byte-level ones."""
    mode, body = (data[:1] or b"\x01"), data[1:]
    frames = [frame(t, f, s, p) for t, f, s, p in _frames(body)] or [body]
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(12)
        i = rng.randrange(len(frames))
        raw = bytearray(frames[i])
        if op == 0:
            mode = bytes([rng.randrange(256)])
        elif op == 1 and len(raw) >= 9:
            raw[0:3] = rng.choice(_LENGTHS).to_bytes(3, "big")
        elif op == 2 and len(raw) >= 9:
            raw[3] = rng.choice(_TYPES)
        elif op == 3 and len(raw) >= 9:
            raw[4] ^= 1 << rng.randrange(8)
        elif op == 4 and len(raw) >= 9:
            raw[5:9] = rng.choice(_STREAMS).to_bytes(4, "big")
        elif op == 5:
            frames.insert(i, bytes(raw))  # duplicate
        elif op == 6 and len(frames) > 1:
            del frames[i]
            continue
        elif op == 7 and len(frames) > 1:
            j = rng.randrange(len(frames))
            frames[i], frames[j] = frames[j], frames[i]
            continue
        elif op == 8:
            other = _frames(rng.choice(pool)[1:])
            if other:
                t, f, s, p = rng.choice(other)
                frames.insert(i, frame(t, f, s, p))
        elif op == 9 and raw:
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        elif op == 10 and raw:
            del raw[rng.randrange(len(raw)) :]
        else:
            at = rng.randrange(len(raw) + 1)
            raw[at:at] = rng.randbytes(rng.randint(1, 8))
        frames[i] = bytes(raw)
    return mode + b"".join(frames)


def random_h2(rng: random.Random) -> bytes:
    """A mode byte and random frames (or plain random bytes)."""
    if rng.random() < 0.3:
        return rng.randbytes(rng.choice((1, 9, 20, 100, 500)))
    frames = b"".join(
        frame(
            rng.choice(_TYPES),
            rng.randrange(256),
            rng.choice(_STREAMS),
            rng.randbytes(rng.choice((0, 1, 4, 5, 8, 20))),
        )
        for _ in range(rng.randint(1, 6))
    )
    return bytes([rng.randrange(256) | 1]) + frames


# ---------------------------------------------------------------------- hpack


def _split_blocks(data: bytes) -> tuple[int, list[bytes]]:
    """The list limit and the blocks of an input: a mode byte (limit, block count),
    then each block but the last after a byte of its length; the last takes the rest."""
    mode = data[0] if data else 0
    limit = _LIMITS[mode & 3]
    blocks = []
    pos = 1
    for _ in range((mode >> 2) & 3):
        if pos >= len(data):
            break
        size = data[pos]
        blocks.append(data[pos + 1 : pos + 1 + size])
        pos += 1 + size
    blocks.append(data[pos:])
    return limit, blocks


def hpack_input(limit_index: int, blocks: list[bytes]) -> bytes:
    """An input of these blocks (all but the last at most 255 bytes)."""
    assert len(blocks) <= 4 and all(len(b) < 256 for b in blocks[:-1])
    head = bytes([limit_index | (len(blocks) - 1) << 2])
    return head + b"".join(bytes([len(b)]) + b for b in blocks[:-1]) + blocks[-1]


def hpack_one(data: bytes) -> str:
    """Decode one input's blocks with our decoder and hpack's; the outcome's name.
    Raises on a broken contract or a difference from hpack."""
    limit, blocks = _split_blocks(data)
    ours = HpackDecoder(max_header_list_size=limit)
    theirs = hpack.Decoder(max_header_list_size=limit)
    for block in blocks:
        try:
            expected: list[tuple[bytes, bytes]] | None = [
                (bytes(n), bytes(v)) for n, v in theirs.decode(block, raw=True)
            ]
        except (hpack.HPACKError, IndexError, ValueError):
            expected = None
        try:
            got = ours.decode(block)
        except HpackError as exc:
            _require(expected is None, f"hpack reads {expected!r}, ours refuses: {exc}")
            return f"HpackError {type(exc).__name__}"
        _require(
            all(isinstance(n, str) and isinstance(v, str) for n, v in got),
            "fields are not str",
        )
        size = sum(len(n) + len(v) + 32 for n, v in got)
        _require(size <= limit, f"a header list of {size} bytes, limit {limit}")
        _require(ours.table_size <= 4096, f"a table of {ours.table_size} bytes")
        raw = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in got]
        _require(expected is not None, f"hpack refuses what ours reads: {raw!r}")
        _require(raw == expected, f"ours reads {raw!r}, hpack {expected!r}")
    return "decoded"


def check_hpack(data: bytes, tally: Tally) -> None:
    """Run one hpack input; record a finding for anything but the contract."""
    tally.inputs += 1
    tally.calls += 1
    try:
        outcome = hpack_one(data)
    except Exception as exc:  # the finding itself
        tally.outcomes[f"hpack: {type(exc).__name__}"] += 1
        if len(tally.findings) < 100:
            tally.findings.append(Finding("hpack", data, f"{type(exc).__name__}: {exc}"))
    else:
        tally.outcomes[f"hpack: {outcome}"] += 1


def hpack_seeds() -> list[bytes]:
    """Valid blocks (with their mode byte): realistic responses, Huffman or not, the
    dynamic table filled then used, size updates, RFC 7541 examples."""
    out = []
    for huffman in (False, True):
        encoder = hpack.Encoder()
        first = bytes(
            encoder.encode(
                [(b":status", b"200"), (b"content-type", b"application/grpc"), (b"x-a", b"v")],
                huffman=huffman,
            )
        )
        encoder.header_table_size = 256
        second = bytes(
            encoder.encode(
                [(b"grpc-status", b"0"), (b"x-a", b"v"), (b"x-a", b"w")], huffman=huffman
            )
        )
        third = bytes(encoder.encode([(b"x-a", b"w"), (b"x-b", b"u" * 40)], huffman=huffman))
        out.append(hpack_input(3, [first, second, third]))
        out.append(hpack_input(1, [first, second]))
    out.append(hpack_input(3, [bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff")]))  # RFC 7541
    out.append(hpack_input(0, [bytes.fromhex("4803333032580770726976617465")]))  # C.5.1, part
    out.append(hpack_input(3, [b"\x3f\xe1\x1f\x20\x88"]))  # size updates, then a field
    out.append(hpack_input(2, [_hpack_block([(b"x", b"y" * 300)], huffman=True)]))
    return out


def mutate_hpack(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """Byte-level mutations, with integer prefixes and Huffman runs in mind."""
    buf = bytearray(data or b"\x03")
    for _ in range(rng.randint(1, 3)):
        n = len(buf)
        op = rng.randrange(8)
        if op == 0:
            buf[0] = rng.randrange(256)
        elif op == 1 and n > 1:
            buf[rng.randrange(1, n)] ^= 1 << rng.randrange(8)
        elif op == 2 and n > 1:
            buf[rng.randrange(1, n)] = rng.choice(
                (0x00, 0x0F, 0x1F, 0x20, 0x3F, 0x40, 0x7F, 0x80, 0xBE, 0xFF)
            )
        elif op == 3 and n > 1:
            del buf[rng.randrange(1, n) :]
        elif op == 4:
            at = rng.randrange(1, n + 1) if n > 1 else 1
            buf[at:at] = rng.choice((b"\xff" * rng.randint(1, 8), b"\x80" * 4, rng.randbytes(4)))
        elif op == 5:
            other = rng.choice(pool)
            buf += other[1:][rng.randrange(len(other)) :]
        elif op == 6 and n > 2:
            at = rng.randrange(1, n)
            buf[at:at] = buf[at : at + rng.randint(1, 32)]
        else:
            buf += bytes([0x40 | rng.randrange(64), 0x80 | rng.randrange(20)]) + rng.randbytes(
                rng.randrange(20)
            )
    return bytes(buf)


def random_hpack(rng: random.Random) -> bytes:
    return bytes([rng.randrange(256)]) + rng.randbytes(rng.choice((0, 1, 2, 5, 20, 100)))


# ---------------------------------------------------------------------- runs


Checker = Callable[[bytes, Tally], None]
TARGETS: dict[
    str,
    tuple[
        Checker,
        Callable[[], list[bytes]],
        Callable[[random.Random, bytes, list[bytes]], bytes],
        Callable[[random.Random], bytes],
    ],
] = {
    "h2": (check_h2, h2_seeds, mutate_h2, random_h2),
    "hpack": (check_hpack, hpack_seeds, mutate_hpack, random_hpack),
}


def run_mutations(target: str, count: int, seed: int) -> Tally:
    """Check ``count`` inputs of ``target``: seed mutations (80 %) and random inputs;
    mutants that reach further than an error are kept as seeds."""
    check, make_seeds, mutate, random_input = TARGETS[target]
    rng = random.Random(seed)
    pool = make_seeds()
    tally = Tally()
    for data in pool:
        check(data, tally)
    corpus = list(pool)
    while tally.inputs < count:
        data = random_input(rng) if rng.random() < 0.2 else mutate(rng, rng.choice(corpus), pool)
        errors = sum(n for k, n in tally.outcomes.items() if "Error" in k)
        check(data, tally)
        if (
            sum(n for k, n in tally.outcomes.items() if "Error" in k) == errors
            and len(corpus) < 3000
        ):
            corpus.append(data)
    return tally


def strategy(target: str) -> object:
    """Hypothesis's inputs for ``target``: structured (frames, blocks), seeds with
    junk spliced in, and plain bytes."""
    from hypothesis import strategies as st

    if target == "h2":
        pool = h2_seeds()
        payloads = [p for seed in pool for _, _, _, p in _frames(seed[1:])]
        frames = st.lists(
            st.builds(
                frame,
                st.sampled_from(_TYPES),
                st.integers(0, 255),
                st.sampled_from(_STREAMS),
                st.one_of(st.binary(max_size=40), st.sampled_from(payloads)),
            ),
            max_size=8,
        )
        return st.one_of(
            st.binary(max_size=300),
            st.builds(lambda m, fs: bytes([m]) + b"".join(fs), st.integers(0, 255), frames),
            st.builds(
                lambda s, cut, junk: s[:cut] + junk + s[cut:],
                st.sampled_from(pool),
                st.integers(0, 30_000),
                st.binary(max_size=16),
            ),
        )
    pool = hpack_seeds()
    return st.one_of(
        st.binary(max_size=200),
        st.builds(
            lambda s, cut, junk: s[:cut] + junk + s[cut:],
            st.sampled_from(pool),
            st.integers(0, 400),
            st.binary(max_size=16),
        ),
    )
