"""CPU per message of the read path's HTTP/2 client, this tree's against another's.

    .venv/bin/python -m bench.h2_cost --baseline DIR [--messages N] [--rounds R]

``DIR`` holds the ``_h2.py`` and ``_hpack.py`` to compare with (for instance the
versions of an earlier commit, written out with ``git show REV:liftbridge_nats/_h2.py``).
Without ``--baseline`` only this tree's code is measured.

The input is a recorded Subscribe-like byte stream as the client receives it: the
server's SETTINGS, the response headers, then one DATA frame per gRPC message
(``--size`` bytes of body each, a serialized ``Message``), read in 64 KiB chunks cut
at any byte. Two costs are measured, both in process CPU time per message:

- ``h2``: :meth:`H2Connection.receive` alone, the call's owner a deque that the
  loop drains after each chunk, granting the window back as a reader would;
- ``h2+reader``: the same bytes into a :class:`StreamReader`, every message taken with
  its ``get()`` (protobuf parse and ``Message`` built), as ``async for`` does.

Both versions run in the same process, in alternating rounds (A B, then B A, ...).
The median round of each is reported, and the ratio this tree / baseline as the
median of the rounds' ratios (each round's two runs are back to back, so a machine
whose speed drifts moves both alike).
``--h2`` adds python-hyper's ``h2`` package on the same bytes, for scale.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import statistics
import struct
import sys
import time
import types
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from liftbridge_nats import _h2 as current_h2
from liftbridge_nats._proto import api_pb2
from liftbridge_nats._stream_reader import CallHandle, StreamReader

CHUNK = 64 * 1024
WINDOW = 4 * 1024 * 1024  # the reader's largest window (its max_bytes)
_FRAME = struct.Struct(">IBL")


def _frame(ftype: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return _FRAME.pack((len(payload) << 8) | ftype, flags, stream_id) + payload


def body_of(offset: int, size: int) -> bytes:
    """A serialized ``Message`` of exactly ``size`` bytes (value padded to fit)."""
    pb = api_pb2.Message(stream="bench", partition=0, offset=offset, timestamp=1, value=b"")
    base = len(pb.SerializeToString())
    for pad in range(max(0, size - base - 3), size):
        pb.value = b"v" * pad
        data = pb.SerializeToString()
        if len(data) >= size:
            return data
    return pb.SerializeToString()


def recorded_stream(messages: int, size: int, stream_id: int = 1) -> list[bytes]:
    """What the client reads from the socket, in ``CHUNK``-byte pieces."""
    # :status 200 (static index 8), content-type: application/grpc (literal, name index 31).
    headers = b"\x88\x0f\x10\x10application/grpc"
    out = bytearray()
    out += _frame(0x4, 0, 0)  # SETTINGS (server defaults)
    out += _frame(0x4, 0x1, 0)  # the ACK of ours
    out += _frame(0x1, 0x4, stream_id, headers)
    body = b"\x00" + struct.pack(">L", 0)  # the handshake: an empty Message
    out += _frame(0x0, 0, stream_id, body)
    for offset in range(messages):
        body = body_of(offset, size)
        out += _frame(0x0, 0, stream_id, b"\x00" + struct.pack(">L", len(body)) + body)
    data = bytes(out)
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


class _DequeOwner:
    def __init__(self) -> None:
        self.buffer: deque[bytes] = deque()
        self.h2_append = self.buffer.append
        self.ended: object = None

    def h2_wake(self) -> None:
        pass

    def h2_need(self, size: int) -> None:
        pass

    def h2_end(self, status: object) -> None:
        self.ended = status


def run_h2(module: types.ModuleType, chunks: list[bytes]) -> tuple[float, int]:
    """CPU seconds and messages: receive() alone, the owner drained after each chunk."""
    conn = module.H2Connection("broker:9292")
    conn.initiate()
    owner = _DequeOwner()
    stream_id = conn.start_call("/proto.API/Subscribe", b"req", owner, window=WINDOW)
    conn.outbox.clear()
    receive = conn.receive
    grant = conn.grant
    buffer = owner.buffer
    outbox = conn.outbox
    taken = 0
    started = time.process_time()
    for chunk in chunks:
        receive(chunk)
        consumed = 0
        while buffer:
            consumed += len(buffer.popleft()) + 5
            taken += 1
        grant(stream_id, consumed)
        outbox.clear()
    cpu = time.process_time() - started
    if owner.ended is not None:
        raise RuntimeError(f"the call ended: {owner.ended!r}")
    return cpu, taken


class _Handle(CallHandle):
    def __init__(self, conn: Any, stream_id: int) -> None:
        self.conn = conn
        self.stream_id = stream_id

    def grant(self, increment: int) -> None:
        self.conn.grant(self.stream_id, increment)

    def cancel(self) -> None:
        self.conn.cancel(self.stream_id)


def run_reader(module: types.ModuleType, chunks: list[bytes]) -> tuple[float, int]:
    """CPU seconds and messages: receive() into a StreamReader, every message taken."""

    async def main() -> tuple[float, int]:
        conn = module.H2Connection("broker:9292")
        conn.initiate()
        reader = StreamReader()
        stream_id = conn.start_call("/proto.API/Subscribe", b"req", reader, window=reader.window)
        reader.attach(_Handle(conn, stream_id))
        conn.outbox.clear()
        receive = conn.receive
        get = reader.get
        outbox = conn.outbox
        taken = 0
        started = time.process_time()
        for chunk in chunks:
            receive(chunk)
            while get() is not None:
                taken += 1
            outbox.clear()
        cpu = time.process_time() - started
        if reader.finished:
            raise RuntimeError(f"the call ended: {reader.end!r}")
        return cpu, taken

    return asyncio.run(main())


def run_hyper(chunks: list[bytes]) -> tuple[float, int]:
    """CPU seconds and messages: python-hyper's h2 client on the same bytes."""
    import h2.config
    import h2.connection
    import h2.events

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WINDOW})
    conn.increment_flow_control_window(2**31 - 1 - 65_535)
    stream_id = conn.get_next_available_stream_id()
    conn.send_headers(
        stream_id,
        [(":method", "POST"), (":scheme", "http"), (":path", "/p"), (":authority", "b")],
    )
    conn.send_data(stream_id, b"\x00\x00\x00\x00\x03req", end_stream=True)
    conn.data_to_send()
    partial = bytearray()
    taken = 0
    started = time.process_time()
    for chunk in chunks:
        for event in conn.receive_data(chunk):
            if isinstance(event, h2.events.DataReceived):
                partial += event.data or b""
                pos = 0
                while len(partial) - pos >= 5:
                    size = struct.unpack_from(">L", partial, pos + 1)[0]
                    if len(partial) - pos - 5 < size:
                        break
                    pos += 5 + size
                    taken += 1
                del partial[:pos]
                conn.acknowledge_received_data(event.flow_controlled_length, stream_id)
        conn.data_to_send()
    return time.process_time() - started, taken


def load_baseline(directory: Path) -> types.ModuleType:
    """Import ``directory``'s ``_h2.py`` (and the ``_hpack.py`` beside it) as a package."""
    for name in ("_h2.py", "_hpack.py"):
        if not (directory / name).is_file():
            raise SystemExit(f"{directory / name} is missing")
    package = types.ModuleType("h2_cost_baseline")
    package.__path__ = [str(directory)]
    sys.modules["h2_cost_baseline"] = package
    return importlib.import_module("h2_cost_baseline._h2")


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the alternating rounds, print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="directory with _h2.py and _hpack.py")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=120, help="message body bytes")
    parser.add_argument("--rounds", type=int, default=9, help="rounds per version and case")
    parser.add_argument("--h2", action="store_true", help="also measure python-hyper's h2")
    args = parser.parse_args(argv)

    chunks = recorded_stream(args.messages, args.size)
    versions: dict[str, types.ModuleType] = {"current": current_h2}
    if args.baseline is not None:
        versions = {"baseline": load_baseline(args.baseline), "current": current_h2}
    cases: dict[str, Callable[[types.ModuleType, list[bytes]], tuple[float, int]]] = {
        "h2": run_h2,
        "h2+reader": run_reader,
    }
    expected = args.messages + 1  # the handshake too
    print(
        f"{args.messages:,d} messages of {args.size} B, {len(chunks)} chunks of {CHUNK} B, "
        f"{args.rounds} alternating rounds; median CPU per message"
    )
    for case, run in cases.items():
        samples: dict[str, list[float]] = {name: [] for name in versions}
        names = list(versions)
        run(versions[names[-1]], chunks)  # warm-up
        for round_ in range(args.rounds):
            order = names if round_ % 2 == 0 else names[::-1]
            for name in order:
                gc.collect()
                cpu, taken = run(versions[name], chunks)
                if taken != expected:
                    raise SystemExit(f"{case} {name}: {taken} messages, expected {expected}")
                samples[name].append(cpu / taken * 1e6)
        medians = {name: statistics.median(values) for name, values in samples.items()}
        ratios = []
        if "baseline" in samples:
            ratios = [c / b for c, b in zip(samples["current"], samples["baseline"], strict=True)]
        line = ", ".join(
            f"{name} {medians[name]:.3f} us (range {min(samples[name]):.3f}-"
            f"{max(samples[name]):.3f})"
            for name in names
        )
        ratio = ""
        if "baseline" in medians:
            quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
            ratio = (
                f"; current / baseline = {statistics.median(ratios):.3f}x "
                f"(rounds' ratios, quartiles {quartiles[0]:.3f}-{quartiles[2]:.3f})"
            )
        print(f"{case:10s} {line}{ratio}")
    if args.h2:
        values = []
        for _ in range(max(1, args.rounds // 3)):
            cpu, taken = run_hyper(chunks)
            values.append(cpu / max(1, taken) * 1e6)
        print(f"{'hyper h2':10s} {statistics.median(values):.3f} us (the h2 package, for scale)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
