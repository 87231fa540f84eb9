"""Micro-benchmarks of the hot-path pieces, timed by pyperf: ``make bench-micro``.

    python -m bench.micro [-o FILE.json] [--markdown FILE.md] [--fast | --rigorous]
                          [--only TEXT ...] [any pyperf option]
    python -m bench.micro --summary FILE.json [--markdown FILE.md]

Run from the repository root: pyperf starts every benchmark in fresh worker processes
(``python -m bench.micro --worker ...``) and reports the mean and standard deviation
of their values. Every figure is the process CPU time of one item (one message, ack or
header block pair): each benchmark processes a batch of distinct items per timed call
and pyperf divides by the batch size. ``-o`` writes pyperf's JSON (replacing the file);
``--summary`` prints the markdown summary of a saved JSON without running anything.

The cases, each on what the package does per item on its hot path:

- ``encode.*``: a 100-byte publish, as the Publisher encodes it (a ``str``
  correlation id in, the whole type-0 envelope out): :class:`PublishEncoder`'s
  ``encode_plain``, ``encode_keyed`` (a key and one header, whose encoded fields the
  Publisher caches; ``ours_uncached`` encodes them per message) and ``encode`` with a
  CRC-32C, each against protobuf building the same ``Message`` and serializing it with
  ``SerializeToString`` behind the same envelope header (the bytes are equal); and
  ``SerializeToString`` alone on Messages built beforehand.
- ``envelope.decode.*``: :func:`liftbridge_nats.envelope.decode` of that envelope,
  without and with a CRC-32C.
- ``ack.*``: acks as the server sends them (type 1, flags 0, no CRC): the
  AckListener's steps (header check, slice, ``Ack.FromString``, correlation id and
  error read, :func:`~liftbridge_nats.wire.ack_view`); the strict public decoder
  :func:`~liftbridge_nats.wire.decode_ack`; and the first field read of an ack view
  (its second parse).
- ``h2.receive.*``: a recorded Subscribe-like byte stream (one DATA frame per gRPC
  message of 120 bytes, read in 64 KiB chunks cut anywhere) into our
  :class:`~liftbridge_nats._h2.H2Connection`, and into python-hyper's ``h2`` client
  with the gRPC messages taken out of its DATA events; both return the window per chunk.
- ``hpack.*``: a gRPC response's header block and trailers, with and without
  Huffman-coded strings (encoded by the ``hpack`` package), decoded by our
  :class:`~liftbridge_nats._hpack.HpackDecoder` and by ``hpack.Decoder``.
- ``otel.ack_latency``: one ack-latency value recorded through an OpenTelemetry SDK
  (what :class:`~liftbridge_nats._metrics.AckLatency` costs per value it keeps).

The summary gives each pair's ratio, ours over the reference (below 1: ours is faster).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata as _dist
from pathlib import Path
from typing import Any

from liftbridge_nats import AckPolicy
from liftbridge_nats._h2 import H2Connection, Status
from liftbridge_nats._hpack import HpackDecoder
from liftbridge_nats._proto import api_pb2
from liftbridge_nats.envelope import Envelope, MsgType, decode, encode, header
from liftbridge_nats.wire import PublishEncoder, ack_view, decode_ack, header_fields

# ---------------------------------------------------------------------------- inputs

VALUE = b"v" * 100
KEY = b"customer-4711"
HEADERS = {"source": b"checkout"}
# What the AckListener's inbox looks like: nats-py's "_INBOX." and a 22-character id.
INBOX = "_INBOX.2cNOVrmgn6Nt9Tbwb2Hb6Y.ack"
POLICY = AckPolicy.ALL  # not the default, so the policy field is on the wire
PB_POLICY = api_pb2.AckPolicy.Value(POLICY.name)
_CID_PREFIX = "5f1c0a9e3b7d-"  # as a Publisher makes them: 6 random bytes in hex
_FIRST_CID = 1_000_000  # a publisher well into its run: 7-digit counters


def correlation_ids(count: int) -> list[str]:
    """Distinct correlation ids, as one Publisher makes them."""
    return [f"{_CID_PREFIX}{n}" for n in range(_FIRST_CID, _FIRST_CID + count)]


def protobuf_message(cid: str) -> api_pb2.Message:
    """The protobuf ``Message`` of a plain publish, built by protobuf."""
    return api_pb2.Message(
        offset=-1, value=VALUE, ackInbox=INBOX, correlationId=cid, ackPolicy=PB_POLICY
    )


def ack_envelopes(count: int) -> list[bytes]:
    """Acks of ``count`` publishes as a v1.9.0 server sends them: flags 0, no CRC."""
    out = []
    for i, cid in enumerate(correlation_ids(count)):
        pb = api_pb2.Ack(
            stream="orders",
            partitionSubject="orders",
            msgSubject="orders",
            offset=2_000_000 + i,
            ackInbox=INBOX,
            correlationId=cid,
            ackPolicy=PB_POLICY,
            receptionTimestamp=1_764_000_000_000_000_000 + i,
            commitTimestamp=1_764_000_000_000_500_000 + i,
        )
        out.append(header(MsgType.ACK) + pb.SerializeToString())
    return out


# The recorded Subscribe stream (built by hand, independently of our HTTP/2 code).
CHUNK = 64 * 1024
BODY_SIZE = 120
WINDOW = 4 * 1024 * 1024  # a reader's largest call window (its read-ahead bytes)
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
PATH = "/proto.API/Subscribe"
_FRAME = struct.Struct(">IBL")  # 24-bit length and 8-bit type, flags, stream id
# :status 200 (static index 8), then content-type (static name 31) as a literal.
_RESPONSE_HEADERS = b"\x88\x0f\x10\x10application/grpc"


def _frame(ftype: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return _FRAME.pack((len(payload) << 8) | ftype, flags, stream_id) + payload


def subscribe_body(offset: int, size: int = BODY_SIZE) -> bytes:
    """A serialized ``Message`` as Subscribe streams it, exactly ``size`` bytes."""
    pb = api_pb2.Message(
        stream="orders", partition=0, offset=offset, timestamp=1_764_000_000_000_000_000 + offset
    )
    # The value's tag and one length byte come on top of the value itself.
    pb.value = b"v" * (size - len(pb.SerializeToString()) - 2)
    data = pb.SerializeToString()
    if len(data) != size:
        raise ValueError(f"no {size}-byte Message at offset {offset}: {len(data)} bytes")
    return data


@functools.cache
def recorded_stream(messages: int, chunk: int = CHUNK) -> tuple[tuple[bytes, ...], list[bytes]]:
    """What a client reads from the socket on stream 1, cut into ``chunk``-byte
    pieces (frames split anywhere), and the gRPC message bodies it carries."""
    bodies = [subscribe_body(offset) for offset in range(messages)]
    out = bytearray()
    out += _frame(0x4, 0, 0)  # the server's SETTINGS (all defaults)
    out += _frame(0x4, 0x1, 0)  # its ACK of ours
    out += _frame(0x1, 0x4, 1, _RESPONSE_HEADERS)  # HEADERS, END_HEADERS
    for body in bodies:
        out += _frame(0x0, 0, 1, b"\x00" + len(body).to_bytes(4, "big") + body)
    data = bytes(out)
    return tuple(data[i : i + chunk] for i in range(0, len(data), chunk)), bodies


# --------------------------------------------------------------------------- the cases

Run = Callable[[], list[Any]]


@dataclass(frozen=True)
class Case:
    """One benchmark: ``make(n)`` prepares (untimed) a run over ``n`` items; calling
    the run does the timed work and returns what it produced, one entry per item."""

    name: str
    what: str
    per: str
    make: Callable[[int], Run]
    size: int


def _encode_plain_ours(n: int) -> Run:
    encode_plain = PublishEncoder(INBOX).encode_plain
    cids = correlation_ids(n)

    def run() -> list[bytes]:
        return [encode_plain(VALUE, cid.encode(), POLICY) for cid in cids]

    return run


def _encode_plain_protobuf(n: int) -> Run:
    lead = header(MsgType.PUBLISH)
    message = api_pb2.Message
    policy = PB_POLICY
    cids = correlation_ids(n)

    def run() -> list[bytes]:
        return [
            lead
            + message(
                offset=-1, value=VALUE, ackInbox=INBOX, correlationId=cid, ackPolicy=policy
            ).SerializeToString()
            for cid in cids
        ]

    return run


def _encode_plain_serialize_only(n: int) -> Run:
    lead = header(MsgType.PUBLISH)
    messages = [protobuf_message(cid) for cid in correlation_ids(n)]

    def run() -> list[bytes]:
        return [lead + m.SerializeToString() for m in messages]

    return run


def _encode_keyed_ours(n: int) -> Run:
    encode_keyed = PublishEncoder(INBOX).encode_keyed
    cids = correlation_ids(n)
    # The Publisher keeps the encoded header fields per headers dict (by its items)
    # and looks them up per message: so does this case.
    cache = {tuple(HEADERS.items()): header_fields(HEADERS)}

    def run() -> list[bytes]:
        return [
            encode_keyed(VALUE, cid.encode(), KEY, cache[tuple(HEADERS.items())], POLICY)
            for cid in cids
        ]

    return run


def _encode_keyed_ours_uncached(n: int) -> Run:
    encode_keyed = PublishEncoder(INBOX).encode_keyed
    cids = correlation_ids(n)

    def run() -> list[bytes]:
        return [
            encode_keyed(VALUE, cid.encode(), KEY, header_fields(HEADERS), POLICY) for cid in cids
        ]

    return run


def _encode_keyed_protobuf(n: int) -> Run:
    lead = header(MsgType.PUBLISH)
    message = api_pb2.Message
    policy = PB_POLICY
    cids = correlation_ids(n)

    def run() -> list[bytes]:
        return [
            lead
            + message(
                offset=-1,
                key=KEY,
                value=VALUE,
                headers=HEADERS,
                ackInbox=INBOX,
                correlationId=cid,
                ackPolicy=policy,
            ).SerializeToString()
            for cid in cids
        ]

    return run


def _encode_crc_ours(n: int) -> Run:
    encoder = PublishEncoder(INBOX, crc=True).encode
    cids = correlation_ids(n)

    def run() -> list[bytes]:
        return [encoder(VALUE, cid.encode(), ack_policy=POLICY) for cid in cids]

    return run


def _encode_crc_protobuf(n: int) -> Run:
    message = api_pb2.Message
    policy = PB_POLICY
    cids = correlation_ids(n)
    publish = MsgType.PUBLISH

    def run() -> list[bytes]:
        return [
            encode(
                publish,
                message(
                    offset=-1, value=VALUE, ackInbox=INBOX, correlationId=cid, ackPolicy=policy
                ).SerializeToString(),
                crc=True,
            )
            for cid in cids
        ]

    return run


def _envelope_decode(crc: bool) -> Callable[[int], Run]:
    def make(n: int) -> Run:
        encoder = PublishEncoder(INBOX, crc=crc).encode
        envelopes = [encoder(VALUE, cid.encode(), ack_policy=POLICY) for cid in correlation_ids(n)]

        def run() -> list[Envelope]:
            return [decode(data) for data in envelopes]

        return run

    return make


_ACK_HEADER = header(MsgType.ACK)
_ACK_HEADER_LEN = len(_ACK_HEADER)
_parse_ack = api_pb2.Ack.FromString


def listener_ack(data: bytes) -> Any:
    """What the AckListener does with one ack's bytes before it settles a future
    (its ledger lookup and the future aside): the same calls, in the same order."""
    if data.startswith(_ACK_HEADER):
        payload = data[_ACK_HEADER_LEN:]
    else:
        payload = bytes(decode(data).payload)
    pb = _parse_ack(payload)
    if pb.correlationId and not pb.ackError:
        return ack_view(payload)
    return pb


def _ack_listener(n: int) -> Run:
    acks = ack_envelopes(n)

    def run() -> list[Any]:
        return [listener_ack(data) for data in acks]

    return run


def _ack_decode(n: int) -> Run:
    acks = ack_envelopes(n)

    def run() -> list[Any]:
        return [decode_ack(data) for data in acks]

    return run


def _ack_view_read(n: int) -> Run:
    payloads = [data[_ACK_HEADER_LEN:] for data in ack_envelopes(n)]

    def run() -> list[int]:
        return [ack_view(payload).offset for payload in payloads]

    return run


class Collector:
    """A call owner that keeps the message bodies, as a reader's buffer does."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.h2_append = self.bodies.append
        self.status: Status | None = None

    def h2_wake(self) -> None:
        """Nothing to wake: the run takes the bodies after each chunk."""

    def h2_need(self, size: int) -> None:
        """Never called: every message here is one whole DATA frame."""

    def h2_end(self, status: Status) -> None:
        """Keep the status: the stream never ends, so a run that sees one fails."""
        self.status = status


def receive_ours(chunks: Iterable[bytes]) -> list[bytes]:
    """The bodies our client delivers for ``chunks``, the window returned per chunk."""
    conn = H2Connection("broker:9292")
    owner = Collector()
    stream_id = conn.start_call(PATH, b"", owner, window=WINDOW)
    conn.outbox.clear()
    receive = conn.receive
    grant = conn.grant
    outbox = conn.outbox
    bodies = owner.bodies
    taken = 0
    for chunk in chunks:
        receive(chunk)
        count = len(bodies)
        if count > taken:
            # What a reader gives back once its consumer took these messages.
            grant(stream_id, sum(map(len, bodies[taken:count])) + 5 * (count - taken))
            taken = count
        outbox.clear()
    if owner.status is not None:
        raise RuntimeError(f"our client ended the call: {owner.status!r}")
    return bodies


def receive_h2(chunks: Iterable[bytes]) -> list[bytes]:
    """The same with python-hyper's ``h2`` client: gRPC messages taken out of its
    DATA events (whole or in pieces), the window acknowledged per chunk."""
    import h2.config
    import h2.connection
    import h2.events

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    stream_id = conn.get_next_available_stream_id()
    conn.send_headers(
        stream_id,
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", PATH),
            (":authority", "broker:9292"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ],
    )
    conn.send_data(stream_id, b"\x00\x00\x00\x00\x00", end_stream=True)
    # The same windows as ours: the connection's wide open, the call's WINDOW.
    conn.increment_flow_control_window(MAX_WINDOW - DEFAULT_WINDOW)
    conn.increment_flow_control_window(WINDOW - DEFAULT_WINDOW, stream_id=stream_id)
    conn.data_to_send()
    receive_data = conn.receive_data
    acknowledge = conn.acknowledge_received_data
    data_to_send = conn.data_to_send
    data_received = h2.events.DataReceived
    ended = (h2.events.StreamEnded, h2.events.StreamReset, h2.events.ConnectionTerminated)
    bodies: list[bytes] = []
    partial = bytearray()
    for chunk in chunks:
        flow = 0
        for event in receive_data(chunk):
            if type(event) is data_received:
                data = event.data or b""
                flow += event.flow_controlled_length or 0
                if not partial and len(data) >= 5 and len(data) == 5 + int.from_bytes(data[1:5]):
                    bodies.append(data[5:])
                    continue
                partial += data
                while len(partial) >= 5:
                    end = 5 + int.from_bytes(partial[1:5])
                    if len(partial) < end:
                        break
                    bodies.append(bytes(partial[5:end]))
                    del partial[:end]
            elif isinstance(event, ended):
                raise RuntimeError(f"h2 ended the call: {event!r}")
        if flow:
            acknowledge(flow, stream_id)
        data_to_send()
    return bodies


def _h2_receive(receive: Callable[[Iterable[bytes]], list[bytes]]) -> Callable[[int], Run]:
    def make(n: int) -> Run:
        chunks = recorded_stream(n)[0]
        return functools.partial(receive, chunks)

    return make


# A gRPC response of a server stream: its headers, then trailers ending it with an
# error and a message (so that the trailers carry text for Huffman to code).
RESPONSE_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]
RESPONSE_TRAILERS = [("grpc-status", "5"), ("grpc-message", "no such stream: orders")]


@functools.cache
def response_blocks(huffman: bool) -> tuple[bytes, bytes]:
    """The header block and the trailers' block as ``hpack``'s encoder writes them on
    one connection (literals indexed, so each block changes the dynamic table)."""
    import hpack

    encoder = hpack.Encoder()
    return (
        bytes(encoder.encode(RESPONSE_HEADERS, huffman=huffman)),
        bytes(encoder.encode(RESPONSE_TRAILERS, huffman=huffman)),
    )


def _hpack_ours(huffman: bool) -> Callable[[int], Run]:
    def make(n: int) -> Run:
        head, tail = response_blocks(huffman)
        decode_block = HpackDecoder().decode
        rounds = range(n)

        def run() -> list[Any]:
            return [(decode_block(head), decode_block(tail)) for _ in rounds]

        return run

    return make


def _hpack_reference(huffman: bool) -> Callable[[int], Run]:
    def make(n: int) -> Run:
        import hpack

        head, tail = response_blocks(huffman)
        decode_block = hpack.Decoder().decode
        rounds = range(n)

        def run() -> list[Any]:
            return [(decode_block(head), decode_block(tail)) for _ in rounds]

        return run

    return make


def otel_ack_latency(n: int) -> tuple[Run, Any]:
    """A run recording ``n`` ack latencies through an OpenTelemetry SDK, and the SDK's
    in-memory reader that collects them."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from liftbridge_nats._metrics import Metrics

    reader = InMemoryMetricReader()
    latency = Metrics(MeterProvider(metric_readers=[reader])).ack_latency(min_interval=0.0)
    if latency is None:
        raise RuntimeError("no ack-latency recorder with an SDK meter provider")
    observe = latency.observe
    # Times that rise from one value to the next, and from one run to the next: with
    # no interval to wait, AckLatency keeps every value.
    step = 1e-6
    times = [i * step for i in range(n)]
    start = [time.monotonic()]

    def run() -> list[None]:
        base = start[0]
        start[0] = base + n * step
        return [observe(base + now, base + now - 0.002) for now in times]

    return run, reader


CASES: tuple[Case, ...] = (
    Case(
        "encode.plain.ours",
        "PublishEncoder.encode_plain, 100 B value",
        "message",
        _encode_plain_ours,
        1000,
    ),
    Case(
        "encode.plain.protobuf",
        "protobuf Message(...).SerializeToString() behind the header",
        "message",
        _encode_plain_protobuf,
        1000,
    ),
    Case(
        "encode.plain.protobuf_serialize_only",
        "SerializeToString() of a Message built beforehand, behind the header",
        "message",
        _encode_plain_serialize_only,
        1000,
    ),
    Case(
        "encode.keyed.ours",
        "PublishEncoder.encode_keyed, key and one header (fields cached, as the Publisher)",
        "message",
        _encode_keyed_ours,
        1000,
    ),
    Case(
        "encode.keyed.ours_uncached",
        "the same with header_fields() per message",
        "message",
        _encode_keyed_ours_uncached,
        1000,
    ),
    Case(
        "encode.keyed.protobuf",
        "protobuf Message(...) with key and headers, SerializeToString()",
        "message",
        _encode_keyed_protobuf,
        1000,
    ),
    Case(
        "encode.crc.ours",
        "PublishEncoder(crc=True).encode, 100 B value",
        "message",
        _encode_crc_ours,
        1000,
    ),
    Case(
        "encode.crc.protobuf",
        "protobuf Message(...).SerializeToString(), envelope.encode(crc=True)",
        "message",
        _encode_crc_protobuf,
        1000,
    ),
    Case(
        "envelope.decode.plain",
        "envelope.decode of a publish envelope, no CRC",
        "envelope",
        _envelope_decode(False),
        1000,
    ),
    Case(
        "envelope.decode.crc",
        "envelope.decode of a publish envelope with CRC-32C (checked)",
        "envelope",
        _envelope_decode(True),
        1000,
    ),
    Case(
        "ack.listener",
        "the AckListener's decoding of one ack (parse, ack_view)",
        "ack",
        _ack_listener,
        1000,
    ),
    Case("ack.decode_ack", "wire.decode_ack: strict, every field", "ack", _ack_decode, 1000),
    Case(
        "ack.view_read",
        "ack_view(payload) and its first field read (a second parse)",
        "ack",
        _ack_view_read,
        1000,
    ),
    Case(
        "h2.receive.ours",
        "our _h2 client, 120 B messages in 64 KiB chunks",
        "message",
        _h2_receive(receive_ours),
        10_000,
    ),
    Case(
        "h2.receive.h2",
        "python-hyper h2 client, the same bytes",
        "message",
        _h2_receive(receive_h2),
        10_000,
    ),
    Case(
        "hpack.plain.ours",
        "our HpackDecoder: response headers and trailers, no Huffman",
        "response",
        _hpack_ours(False),
        200,
    ),
    Case(
        "hpack.plain.hpack",
        "hpack.Decoder: the same blocks",
        "response",
        _hpack_reference(False),
        200,
    ),
    Case(
        "hpack.huffman.ours",
        "our HpackDecoder: response headers and trailers, Huffman",
        "response",
        _hpack_ours(True),
        200,
    ),
    Case(
        "hpack.huffman.hpack",
        "hpack.Decoder: the same blocks",
        "response",
        _hpack_reference(True),
        200,
    ),
    Case(
        "otel.ack_latency",
        "one ack latency recorded through the OpenTelemetry SDK",
        "ack",
        lambda n: otel_ack_latency(n)[0],
        1000,
    ),
)

# (label, ours, reference): the ratios the summary reports.
PAIRS: tuple[tuple[str, str, str], ...] = (
    ("encode, plain: PublishEncoder / protobuf", "encode.plain.ours", "encode.plain.protobuf"),
    (
        "encode, plain: PublishEncoder / SerializeToString alone",
        "encode.plain.ours",
        "encode.plain.protobuf_serialize_only",
    ),
    (
        "encode, key and header: PublishEncoder (fields cached) / protobuf",
        "encode.keyed.ours",
        "encode.keyed.protobuf",
    ),
    (
        "encode, key and header: PublishEncoder (fields per message) / protobuf",
        "encode.keyed.ours_uncached",
        "encode.keyed.protobuf",
    ),
    ("encode, CRC-32C: PublishEncoder / protobuf", "encode.crc.ours", "encode.crc.protobuf"),
    ("HTTP/2 receive: _h2 / h2", "h2.receive.ours", "h2.receive.h2"),
    ("HPACK, no Huffman: ours / hpack", "hpack.plain.ours", "hpack.plain.hpack"),
    ("HPACK, Huffman: ours / hpack", "hpack.huffman.ours", "hpack.huffman.hpack"),
)


# --------------------------------------------------------------------------- the summary


def format_time(seconds: float) -> str:
    """``123 ns``, ``1.23 µs``, ``12.3 µs``: three significant digits at most."""
    ns = seconds * 1e9
    if ns < 1000:
        return f"{ns:.0f} ns" if ns >= 100 else f"{ns:.1f} ns"
    us = ns / 1000
    if us < 10:
        return f"{us:.2f} µs"
    return f"{us:.1f} µs" if us < 100 else f"{us:.0f} µs"


def summary_markdown(stats: Mapping[str, tuple[float, float]], context: Sequence[str] = ()) -> str:
    """The markdown summary: every case's mean ± standard deviation per item, then
    each pair's ratio. ``stats`` maps case names to (mean, stdev) in seconds;
    ``context`` lines (machine, versions) go first."""
    lines = ["# liftbridge-nats micro-benchmarks", ""]
    lines += ["Generated by `python -m bench.micro` (`make bench-micro`), with pyperf.", ""]
    lines += [f"- {line}" for line in context]
    if context:
        lines.append("")
    lines += ["Process CPU time per item, mean ± standard deviation of pyperf's values.", ""]
    lines += ["| benchmark | what | per | mean ± std |", "|---|---|---|---:|"]
    known = {case.name: case for case in CASES}
    for name, (mean, std) in stats.items():
        case = known.get(name)
        what, per = (case.what, case.per) if case else ("", "")
        lines.append(f"| `{name}` | {what} | {per} | {format_time(mean)} ± {format_time(std)} |")
    rows = [
        (label, stats[ours][0], stats[reference][0])
        for label, ours, reference in PAIRS
        if ours in stats and reference in stats
    ]
    if rows:
        lines += ["", "Ours against the reference (CPU per item; below 1x ours is faster):", ""]
        lines += ["| pair | ours | reference | ours / reference |", "|---|---:|---:|---:|"]
        for label, ours_mean, reference_mean in rows:
            ratio = ours_mean / reference_mean if reference_mean else math.nan
            lines.append(
                f"| {label} | {format_time(ours_mean)} | {format_time(reference_mean)} "
                f"| {ratio:.2f}x |"
            )
    return "\n".join(lines) + "\n"


def _commit() -> str:
    """The checkout's commit, marked when the working tree differs from it."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} with local changes" if changed else head


def _resolution() -> str:
    return f"{time.get_clock_info('process_time').resolution * 1e9:g} ns"


def _versions() -> dict[str, str]:
    found = {}
    for name in ("liftbridge-nats", "protobuf", "h2", "hpack", "opentelemetry-sdk", "pyperf"):
        try:
            found[name] = _dist.version(name)
        except _dist.PackageNotFoundError:
            found[name] = "absent"
    return found


def suite_summary(benchmarks: Sequence[Any]) -> str:
    """:func:`summary_markdown` of pyperf benchmarks, with the machine they ran on."""
    stats = {}
    loads: list[float] = []
    for bench in benchmarks:
        values = bench.get_values()
        stats[bench.get_name()] = (bench.mean(), bench.stdev() if len(values) > 1 else 0.0)
        for run in bench.get_runs():
            load = run.get_metadata().get("load_avg_1min")
            if isinstance(load, (int, float)):
                loads.append(float(load))
    context = []
    if benchmarks:
        meta = benchmarks[0].get_metadata()
        context.append(
            f"Machine: {meta.get('cpu_model_name', '?')}, {meta.get('cpu_count', '?')} CPUs, "
            f"{meta.get('platform', '?')}"
        )
        versions = ", ".join(
            f"{key.removeprefix('version ')} {value}"
            for key, value in sorted(meta.items())
            if key.startswith("version ")
        )
        context.append(f"Versions: python {meta.get('python_version', '?')}, {versions}")
        context.append(f"Commit: {meta.get('commit', '?')}")
        first = benchmarks[0]
        workers = sum(1 for run in first.get_runs() if run.values)
        context.append(
            f"Settings: {len(first.get_values())} values per benchmark from {workers} worker "
            "processes (the first benchmark's; pyperf calibrates the loops in one more); "
            "every value times a batch of distinct items"
        )
        dates = [b.get_dates() for b in benchmarks if b.get_dates()]
        if dates:
            context.append(
                f"Run: {min(d[0] for d in dates):%Y-%m-%d %H:%M} to "
                f"{max(d[1] for d in dates):%H:%M}"
            )
    if loads:
        context.append(f"Load average (1 min) in the workers: {min(loads):.2f}-{max(loads):.2f}")
    return summary_markdown(stats, context)


# --------------------------------------------------------------------------- running


def _time_func(case: Case) -> Callable[[int], float]:
    def time_func(loops: int) -> float:
        run = case.make(case.size)  # untimed: inputs, encoders, connections' setup
        # CPU time, not wall time: on a machine shared with other work, time spent
        # waiting for a core would count against whichever case ran then.
        timer = time.process_time
        started = timer()
        for _ in range(loops):
            run()
        return timer() - started

    return time_func


def selected(only: Sequence[str]) -> list[Case]:
    """The cases whose name contains one of ``only`` (all of them without any)."""
    return [case for case in CASES if not only or any(text in case.name for text in only)]


# Metadata pyperf records that name this machine's paths and host, not the run.
_PRIVATE_METADATA = frozenset({"hostname", "python_executable", "python_config_args"})


def scrub(data: Any) -> Any:
    """pyperf's JSON without :data:`_PRIVATE_METADATA`, wherever metadata sits."""
    if isinstance(data, dict):
        return {
            key: scrub(value)
            for key, value in data.items()
            if not (key in _PRIVATE_METADATA and isinstance(value, str))
        }
    if isinstance(data, list):
        return [scrub(item) for item in data]
    return data


def _scrub_file(path: str) -> None:
    file = Path(path)
    data = scrub(json.loads(file.read_text(encoding="utf-8")))
    # pyperf's own compact layout, so that its tools read the file as they wrote it.
    file.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n", "utf-8")


def _forward(cmd: list[str], args: Any) -> None:
    # Workers must register the same cases in the same order as the manager: pyperf
    # tells them which one to run by its index.
    for text in args.only:
        cmd.extend(("--only", text))
    # Looked up once, by the manager.
    cmd.extend(("--commit", args.commit))


def main(argv: list[str] | None = None) -> int:
    """Run the suite under pyperf (or summarize a saved run)."""
    import pyperf  # type: ignore[import-untyped]

    # pyperf refuses an existing -o file; a new run of the suite replaces its figures.
    early = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    early.add_argument("-o", "--output")
    early.add_argument("--worker", action="store_true")
    early.add_argument("--summary")
    known = early.parse_known_args(argv)[0]
    # The checkout's state before the old -o file goes: that is no change of the code.
    commit = None if known.worker else _commit()
    if known.output and not known.worker and not known.summary:
        Path(known.output).unlink(missing_ok=True)

    runner = pyperf.Runner(
        program_args=("-m", "bench.micro"),
        add_cmdline_args=_forward,
        metadata={
            "timer": f"process CPU time (time.process_time), resolution: {_resolution()}",
            **{f"version {name}": version for name, version in _versions().items()},
        },
    )
    parser = runner.argparser
    parser.description = __doc__.splitlines()[0] if __doc__ else None
    parser.prog = "python -m bench.micro"
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="run only the cases whose name contains TEXT (repeatable)",
    )
    parser.add_argument("--markdown", metavar="FILE", help="also write the summary to FILE")
    parser.add_argument("--summary", metavar="JSON", help="summarize a saved run; run nothing")
    parser.add_argument("--commit", help=argparse.SUPPRESS)  # the manager's, for workers
    args = runner.parse_args(argv)
    if args.commit is None:
        args.commit = commit or _commit()
    runner.metadata["commit"] = args.commit

    if args.summary:
        text = suite_summary(list(pyperf.BenchmarkSuite.load(args.summary)))
    else:
        results = []
        for case in selected(args.only):
            bench = runner.bench_time_func(case.name, _time_func(case), inner_loops=case.size)
            if bench is not None:
                results.append(bench)
        if args.worker:
            return 0
        if args.output and results:
            _scrub_file(args.output)
        text = suite_summary(results)
    print()
    print(text, end="")
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
