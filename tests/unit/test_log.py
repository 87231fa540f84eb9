"""The SDK's logging helpers: the logger hierarchy, redaction, rate limiting."""

from __future__ import annotations

import logging

import pytest

from liftbridge_nats._log import ROOT, RateLimitedLog, get_logger, redact

SEED = "SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4GY"
JWT = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJqdGkiOiJBQkMifQ.c2lnbmF0dXJl"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nats://alice:s3cret@127.0.0.1:4222", "nats://***@127.0.0.1:4222"),
        ("tls://tok3n@nats.example:4443", "tls://***@nats.example:4443"),
        (
            "servers nats://a:b@h1:1, nats://h2:2 and ws://u:p@h3/x",
            "servers nats://***@h1:1, nats://h2:2 and ws://***@h3/x",
        ),
        (f"seed {SEED} used", "seed *** used"),
        (f"jwt={JWT}", "jwt=***"),
        ("nats://127.0.0.1:4222 orders@v2", "nats://127.0.0.1:4222 orders@v2"),
        ("nothing to hide", "nothing to hide"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_loggers_live_under_the_package_root() -> None:
    assert get_logger("publisher").name == "liftbridge_nats.publisher"
    assert get_logger("liftbridge_nats.acks").name == "liftbridge_nats.acks"
    assert get_logger(ROOT).name == ROOT
    root_handlers = logging.getLogger(ROOT).handlers
    assert any(isinstance(h, logging.NullHandler) for h in root_handlers)


def test_no_secret_reaches_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    log = get_logger("test.redaction")
    with caplog.at_level(logging.INFO, logger=ROOT):
        log.warning("reconnecting to %s", "nats://alice:s3cret@10.0.0.1:4222")
        log.info("credentials %s / %s", SEED, JWT)
        log.info("plain %d", 3)
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "reconnecting to nats://***@10.0.0.1:4222",
        "credentials *** / ***",
        "plain 3",
    ]
    assert "s3cret" not in caplog.text and SEED not in caplog.text and JWT not in caplog.text
    # Adding the filter again (a second get_logger) does not stack filters.
    assert get_logger("test.redaction").filters.count(log.filters[0]) == 1


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rate_limited_log(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    limited = RateLimitedLog(get_logger("test.junk"), interval=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger=ROOT):
        assert limited.log("dropped junk on %s", "inbox.a")
        for _ in range(500):
            clock.now += 0.01
            assert not limited.log("dropped junk on %s", "inbox.a")
        assert limited.suppressed == 500
        clock.now += 5.1  # 10.1 s after the first line
        assert limited.log("dropped junk on %s", "inbox.b")
        assert limited.suppressed == 0
    assert [r.getMessage() for r in caplog.records] == [
        "dropped junk on inbox.a",
        "dropped junk on inbox.b (and 500 more like it since the last report)",
    ]


def test_rate_limited_log_costs_nothing_when_the_level_is_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    limited = RateLimitedLog(get_logger("test.quiet"), level=logging.DEBUG, clock=clock)
    with caplog.at_level(logging.WARNING, logger=ROOT):
        assert not limited.log("junk")
    assert limited.suppressed == 0 and caplog.records == []
