"""The micro-benchmarks do the work they are named for: every case runs once, untimed,
on a few items, and its output is checked (against protobuf, h2 and hpack where a case
has a reference); the summary's ratios come out right."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from liftbridge_nats import Ack, AckError, AckPolicy
from liftbridge_nats._proto import api_pb2
from liftbridge_nats.envelope import MsgType
from liftbridge_nats.wire import decode_ack, decode_publish

REPO = Path(__file__).resolve().parents[2]
# bench/ is a top-level package of the repository, not part of the installed SDK. Last
# on the path: the SDK it measures is the installed one when the tests run on a wheel.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))

from bench import micro  # noqa: E402

N = 40


def outputs(name: str, n: int = N) -> list[Any]:
    case = next(case for case in micro.CASES if case.name == name)
    out = case.make(n)()
    assert len(out) == n, name
    return out


def test_every_case_runs_and_yields_one_output_per_item() -> None:
    for case in micro.CASES:
        if case.name.startswith("h2."):
            continue  # a stream of N messages: checked below
        assert len(case.make(N)()) == N, case.name
    assert {ours for _, ours, _ in micro.PAIRS} | {ref for _, _, ref in micro.PAIRS} <= {
        case.name for case in micro.CASES
    }


@pytest.mark.parametrize("kind", ["plain", "keyed", "crc"])
def test_publish_encoder_writes_what_protobuf_writes(kind: str) -> None:
    ours = outputs(f"encode.{kind}.ours")
    reference = outputs(f"encode.{kind}.protobuf")
    assert ours == reference
    assert len(set(ours)) == N  # every message its own correlation id
    for data, cid in zip(ours, micro.correlation_ids(N), strict=True):
        assert isinstance(data, bytes)
        published = decode_publish(data)
        assert published.correlation_id == cid
        assert published.ack_inbox == micro.INBOX
        assert published.ack_policy is micro.POLICY
        assert published.expected_offset == -1
        assert published.message.value == micro.VALUE
        if kind == "keyed":
            assert published.message.key == micro.KEY
            assert published.message.headers == micro.HEADERS


def test_the_other_encoder_cases_write_the_same_bytes() -> None:
    assert outputs("encode.plain.protobuf_serialize_only") == outputs("encode.plain.ours")
    assert outputs("encode.keyed.ours_uncached") == outputs("encode.keyed.protobuf")


@pytest.mark.parametrize("crc", [False, True])
def test_envelope_decode_finds_the_payload(crc: bool) -> None:
    envelopes = outputs("envelope.decode.crc" if crc else "envelope.decode.plain")
    for env, cid in zip(envelopes, micro.correlation_ids(N), strict=True):
        assert env.msg_type is MsgType.PUBLISH
        assert (env.crc is not None) is crc
        pb = api_pb2.Message.FromString(bytes(env.payload))
        assert pb.correlationId == cid
        assert pb.value == micro.VALUE


def test_the_acks_decode_to_what_the_server_sent() -> None:
    sent = micro.ack_envelopes(N)
    # As the server sends them: the plain 8-byte header, type 1, no CRC.
    assert all(data[4:8] == b"\x00\x08\x00\x01" for data in sent)
    listener = outputs("ack.listener")
    strict = outputs("ack.decode_ack")
    offsets = outputs("ack.view_read")
    for i, (view, ack, data) in enumerate(zip(listener, strict, sent, strict=True)):
        assert isinstance(ack, Ack)
        assert type(view) is not Ack  # a view, fields not read yet
        assert view == ack == decode_ack(data)
        assert ack.offset == offsets[i] == 2_000_000 + i
        assert ack.correlation_id == micro.correlation_ids(N)[i]
        assert ack.ack_policy is AckPolicy.ALL
        assert ack.error is AckError.OK


def test_our_h2_and_python_hyper_h2_deliver_the_same_bodies() -> None:
    messages = 1200  # about 150 KB: three chunks, frames cut at their edges
    chunks, bodies = micro.recorded_stream(messages)
    assert len(chunks) >= 3
    assert all(len(body) == micro.BODY_SIZE for body in bodies)
    assert len(set(bodies)) == messages
    ours = micro.receive_ours(chunks)
    reference = micro.receive_h2(chunks)
    assert ours == bodies
    assert reference == bodies
    # The benchmarks' own runs, on the smaller stream they are given here.
    case = {case.name: case for case in micro.CASES}
    assert case["h2.receive.ours"].make(N)() == micro.recorded_stream(N)[1]
    assert case["h2.receive.h2"].make(N)() == micro.recorded_stream(N)[1]


def test_h2_references_deliver_messages_split_across_frames() -> None:
    # The reference's slow path (a message in two DATA frames) must not drop bytes.
    body = micro.subscribe_body(7)
    message = b"\x00" + len(body).to_bytes(4, "big") + body
    chunks, _ = micro.recorded_stream(0)
    stream = b"".join(chunks)
    stream += micro._frame(0x0, 0, 1, message[:50]) + micro._frame(0x0, 0, 1, message[50:])
    assert micro.receive_h2([stream]) == [body]
    assert micro.receive_ours([stream]) == [body]


@pytest.mark.parametrize("huffman", [False, True])
def test_our_hpack_and_the_hpack_package_decode_the_same_headers(huffman: bool) -> None:
    head, tail = micro.response_blocks(huffman)
    plain_head, plain_tail = micro.response_blocks(False)
    if huffman:  # the Huffman-coded blocks are really coded
        assert len(head + tail) < len(plain_head + plain_tail)
    expected = (micro.RESPONSE_HEADERS, micro.RESPONSE_TRAILERS)
    kind = "huffman" if huffman else "plain"
    ours = outputs(f"hpack.{kind}.ours")
    reference = outputs(f"hpack.{kind}.hpack")
    for (our_head, our_tail), (ref_head, ref_tail) in zip(ours, reference, strict=True):
        assert (our_head, our_tail) == expected
        assert ([tuple(h) for h in ref_head], [tuple(h) for h in ref_tail]) == expected


def test_every_ack_latency_reaches_the_sdk_in_every_run() -> None:
    # pyperf calls a run many times: the later runs must record as much as the first.
    run, reader = micro.otel_ack_latency(N)
    run()
    run()
    data = reader.get_metrics_data()
    points = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "messaging.client.operation.duration"
        for point in metric.data.data_points
    ]
    assert sum(point.count for point in points) == 2 * N


def test_summary_reports_each_pair_as_ours_over_the_reference() -> None:
    stats = {
        "encode.plain.ours": (300e-9, 10e-9),
        "encode.plain.protobuf": (1.2e-6, 0.05e-6),
        "h2.receive.ours": (1.5e-6, 0.1e-6),
        "h2.receive.h2": (20e-6, 1e-6),
        "ack.listener": (800e-9, 20e-9),
    }
    text = micro.summary_markdown(stats, ["Machine: test"])
    assert "- Machine: test" in text
    assert "| `ack.listener` | " in text and "| 800 ns ± 20.0 ns |" in text
    assert "| encode, plain: PublishEncoder / protobuf | 300 ns | 1.20 µs | 0.25x |" in text
    assert "| HTTP/2 receive: _h2 / h2 | 1.50 µs | 20.0 µs | 0.07x |" in text
    # A pair with a side missing is left out, not reported as zero or infinite.
    assert "HPACK" not in text


def test_worker_processes_get_the_same_case_selection() -> None:
    class Args:
        only: ClassVar[list[str]] = ["hpack", "h2."]
        commit = "abc1234"

    cmd: list[str] = []
    micro._forward(cmd, Args())
    assert cmd == ["--only", "hpack", "--only", "h2.", "--commit", "abc1234"]
    assert [c.name for c in micro.selected(Args.only)] == [
        "h2.receive.ours",
        "h2.receive.h2",
        "hpack.plain.ours",
        "hpack.plain.hpack",
        "hpack.huffman.ours",
        "hpack.huffman.hpack",
    ]


def test_saved_runs_keep_no_machine_paths() -> None:
    saved = {
        "metadata": {"python_executable": "/opt/venv/bin/python", "cpu_count": 2},
        "benchmarks": [{"runs": [{"metadata": {"hostname": "box", "date": "2026-01-01"}}]}],
    }
    assert micro.scrub(saved) == {
        "metadata": {"cpu_count": 2},
        "benchmarks": [{"runs": [{"metadata": {"date": "2026-01-01"}}]}],
    }
