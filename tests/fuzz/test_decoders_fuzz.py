"""Short fuzzing of the network-facing decoders (a few seconds; the long run is
``python -m tests.fuzz.run --inputs 1000000``)."""

from __future__ import annotations

import importlib.util
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liftbridge_nats.envelope import MAGIC

from . import _targets
from ._targets import DECODERS, Tally, check, mutate, run_mutations, seeds
from .run import main, run_atheris

_POOL = seeds()


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
def test_atheris_short_run() -> None:
    tally = run_atheris(3000, seed=7)
    assert tally.inputs >= 3000, tally.outcomes
    _assert_clean(tally)


@pytest.mark.skipif(
    importlib.util.find_spec("atheris") is None, reason="atheris not installed (dev extra)"
)
def test_atheris_reports_a_planted_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LBN_FUZZ_PLANTED_BUG", "1")
    tally = run_atheris(3000, seed=7)
    assert tally.findings, "the atheris run did not report the planted crash"
    assert tally.findings[0].data, "the crashing input was not recovered"
