"""Short fuzzing of the network-facing decoders: the wire decoders, the read path's
HTTP/2 client and HPACK decoder (a few seconds each; the long run is
``python -m tests.fuzz.run --inputs 1000000``), and large adversarial inputs to the
HTTP/2 client (stopped early, in time linear in their size)."""

from __future__ import annotations

import importlib.util
import random
import time
from collections.abc import Callable
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liftbridge_nats._h2 import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    HEADERS,
    PING,
    SETTINGS,
    H2Connection,
    H2ProtocolError,
    frame,
    message,
)
from liftbridge_nats.envelope import MAGIC

from . import _h2_targets, _targets
from ._targets import DECODERS, Tally, check, mutate, run_mutations, seeds
from .run import main, run_atheris

_POOL = seeds()
_H2_INPUTS = cast(st.SearchStrategy[bytes], _h2_targets.strategy("h2"))
_HPACK_INPUTS = cast(st.SearchStrategy[bytes], _h2_targets.strategy("hpack"))


def _assert_clean(tally: Tally) -> None:
    detail = "\n".join(f"{f.decoder}: {f.error} input={f.data.hex()}" for f in tally.findings)
    assert not tally.findings, detail


def test_seeds_decode() -> None:
    tally = Tally()
    for data in _POOL:
        check(data, tally)
    _assert_clean(tally)
    assert tally.outcomes["wire.decode_ack: decoded"] >= 2
    assert tally.outcomes["wire.decode_publish: decoded"] >= 2


def test_mutations_raise_only_envelope_error() -> None:
    tally = run_mutations(30_000, seed=1234)
    _assert_clean(tally)
    assert tally.inputs >= 30_000
    # The mutator must reach the protobuf parser, not stop at the header checks.
    assert tally.outcomes["wire.decode_ack: decoded"] > 50
    assert tally.outcomes["wire.decode_publish: decoded"] > 50


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    tally = Tally()
    check(data, tally)
    check(MAGIC + bytes((0, 8, 0, 0)) + data, tally)
    check(MAGIC + bytes((0, 8, 0, 1)) + data, tally)
    _assert_clean(tally)


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(_POOL), st.randoms(use_true_random=False))
def test_mutated_seeds(seed_input: bytes, rng: random.Random) -> None:
    tally = Tally()
    check(mutate(rng, seed_input, _POOL), tally)
    _assert_clean(tally)


def test_the_oracle_reports_other_exceptions(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(data: bytes) -> object:
        raise IndexError("decoder bug")

    monkeypatch.setitem(_targets.DECODERS, "broken", broken)
    tally = Tally()
    check(b"anything", tally)
    assert [f.decoder for f in tally.findings] == ["broken"]
    assert "IndexError: decoder bug" in tally.findings[0].error
    assert set(DECODERS) >= {"envelope.decode", "wire.decode_ack", "wire.decode_publish"}


def test_runner_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--inputs", "500", "--engine", "mutation"]) == 0
    out = capsys.readouterr().out
    assert "inputs=" in out and "findings=0" in out


@pytest.mark.skipif(
    importlib.util.find_spec("atheris") is None, reason="atheris not installed (dev extra)"
)
@pytest.mark.parametrize("target", ["wire", "h2", "hpack"])
def test_atheris_short_run(target: str) -> None:
    tally = run_atheris(3000, seed=7, target=target)
    assert tally.inputs >= 3000, tally.outcomes
    _assert_clean(tally)


@pytest.mark.skipif(
    importlib.util.find_spec("atheris") is None, reason="atheris not installed (dev extra)"
)
@pytest.mark.parametrize("target", ["wire", "h2", "hpack"])
def test_atheris_reports_a_planted_bug(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    monkeypatch.setenv("LBN_FUZZ_PLANTED_BUG", "1")
    tally = run_atheris(3000, seed=7, target=target)
    assert tally.findings, "the atheris run did not report the planted crash"
    assert tally.findings[0].data, "the crashing input was not recovered"


# ---------------------------------------------------------------------- the read path's HTTP/2


@pytest.mark.parametrize("target", ["h2", "hpack"])
def test_read_path_seeds_are_read(target: str) -> None:
    tally = Tally()
    check, make_seeds, _, _ = _h2_targets.TARGETS[target]
    for data in make_seeds():
        check(data, tally)
    _assert_clean(tally)
    read = sum(
        n for k, n in tally.outcomes.items() if k.endswith(("read, a call ended", "decoded"))
    )
    assert read == len(make_seeds()), tally.outcomes


@pytest.mark.parametrize(("target", "count"), [("h2", 10_000), ("hpack", 20_000)])
def test_read_path_mutations_keep_the_contract(target: str, count: int) -> None:
    tally = _h2_targets.run_mutations(target, count, seed=99)
    _assert_clean(tally)
    assert tally.inputs >= count
    # The mutants reach past the first checks: some read, some end each way.
    outcomes = {k.split(": ", 1)[1].split(" ")[0] for k in tally.outcomes}
    assert {"read", "H2ProtocolError"} <= outcomes or {"decoded", "HpackError"} <= outcomes
    if target == "h2":
        codes = {k.rsplit(" ", 1)[1] for k in tally.outcomes if "H2ProtocolError" in k}
        assert {"PROTOCOL_ERROR", "FRAME_SIZE_ERROR", "COMPRESSION_ERROR"} <= codes, codes


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_h2_generated_inputs(data: st.DataObject) -> None:
    tally = Tally()
    _h2_targets.check_h2(data.draw(_H2_INPUTS), tally)
    _assert_clean(tally)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_hpack_generated_inputs(data: st.DataObject) -> None:
    tally = Tally()
    _h2_targets.check_hpack(data.draw(_HPACK_INPUTS), tally)
    _assert_clean(tally)


def test_the_read_path_oracles_report_other_exceptions(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: object, data: bytes) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr("liftbridge_nats._h2.H2Connection.receive", broken)
    tally = Tally()
    _h2_targets.check_h2(_h2_targets.h2_seeds()[0], tally)
    assert [f.error for f in tally.findings] == ["ValueError: a bug"]

    def lenient(self: object, block: bytes) -> list[tuple[str, str]]:
        return []

    monkeypatch.setattr("liftbridge_nats._hpack.HpackDecoder.decode", lenient)
    tally = Tally()
    _h2_targets.check_hpack(b"\x00\x80", tally)  # index 0: hpack refuses it
    assert tally.findings and "InvariantError" in tally.findings[0].error


# Large adversarial inputs: the work is linear in what is read, and stops at the limits.


def _cpu_feed(conn: H2Connection, data: bytes, step: int) -> float:
    started = time.process_time()
    _feed(conn, data, step)
    return time.process_time() - started


def _client() -> H2Connection:
    conn = H2Connection("fuzz:1")
    conn.initiate()
    conn.start_call("/p", b"", _h2_targets._Owner(conn, grants=True), window=1 << 20)
    conn.receive(frame(SETTINGS, 0, 0) + frame(HEADERS, END_HEADERS, 1, b"\x88"))
    return conn


def _feed(conn: H2Connection, data: bytes, step: int) -> int:
    """Feed ``data`` in ``step``-byte reads until a connection error; bytes fed."""
    for start in range(0, len(data), step):
        try:
            conn.receive(data[start : start + step])
        except H2ProtocolError:
            return start + step
    return len(data)


def _header_list_16_mib(n: int) -> bytes:
    """16 MiB of header list in well-formed CONTINUATIONs."""
    field = (b"\x00\x01x\x7f\x81\x7f" + b"v" * 16_384)[:16_384]
    return frame(HEADERS, 0, 1, b"") + frame(CONTINUATION, 0, 1, field) * n


def _empty_continuations(n: int) -> bytes:
    """9 MiB of empty CONTINUATIONs."""
    return frame(HEADERS, 0, 1, b"") + frame(CONTINUATION, 0, 1) * (n * 1000)


def _oversized_data(n: int) -> bytes:
    """A DATA frame of 16 MiB, then its payload."""
    length = n * 16_384 - 1
    return length.to_bytes(3, "big") + bytes([DATA, 0]) + (1).to_bytes(4, "big") + bytes(length)


@pytest.mark.parametrize(
    "make",
    [_header_list_16_mib, _empty_continuations, _oversized_data],
    ids=["16 MiB header list", "empty CONTINUATIONs", "oversized DATA"],
)
def test_adversarial_inputs_stop_early(make: Callable[[int], bytes]) -> None:
    data = make(1024)  # 16 MiB, or 9 MiB of empty frames
    conn = _client()
    started = time.process_time()
    fed = _feed(conn, data, 65_536)
    cpu = time.process_time() - started
    # Stopped within the limits (128 KiB of header block, 64 frames, one frame header),
    # not after reading everything, in the time of what was read.
    assert fed <= 4 * 65_536, fed
    assert cpu < 0.2, cpu
    assert conn.buffered == 0


@pytest.mark.parametrize(
    "unit",
    [
        frame(PING, 0, 0, bytes(8)),  # answered, one by one
        frame(DATA, 0, 1, message(b"m" * 100)),  # the fast path
        frame(DATA, 0x8, 1, b"\x05" + message(b"m" * 100) + bytes(5)),  # padded
        frame(0xEE, 0, 0, b"x" * 100),  # unknown, ignored
    ],
    ids=["PING", "DATA", "padded DATA", "unknown"],
)
@pytest.mark.parametrize("step", [1, 1000, 65_536])
def test_time_is_linear_in_the_input(unit: bytes, step: int) -> None:
    """Reading 4x as many bytes costs about 4x the CPU, however the reads cut them
    (1-byte reads of a large frame cost no quadratic copying)."""
    small = unit * max(1, 20_000 // len(unit))
    large = small * 4
    if step == 1:
        small, large = small[:20_000], large[:80_000]
    times = []
    for data in (small, large, small, large):
        conn = _client()
        times.append(_cpu_feed(conn, data, step))
    ratio = (times[1] + times[3]) / max(times[0] + times[2], 1e-6)
    assert ratio < 8, times


def test_a_large_frame_in_tiny_reads_is_assembled_in_linear_time() -> None:
    frame_bytes = frame(DATA, 0, 1, message(b"z" * (16_384 - 5)))
    times = []
    for count in (4, 16):
        conn = _client()
        data = frame_bytes * count
        times.append(_cpu_feed(conn, data, 3))
    assert times[1] / max(times[0], 1e-6) < 8, times
