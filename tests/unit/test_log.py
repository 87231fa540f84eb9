"""The SDK's logging helpers: the logger hierarchy, redaction, rate limiting."""

from __future__ import annotations

import io
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


# Passwords with the characters that end a URL's parts, raw and percent-encoded.
PASSWORDS = ["p@ss", "p:ss", "p/ss", "p%ss", "p%40ss", "a@b:c/d%e@f", "%2F%3A%40%25", "x@"]


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("scheme", ["nats", "tls", "ws", "grpc+tls"])
def test_redact_hides_the_whole_password(scheme: str, password: str) -> None:
    text = f"cannot reach {scheme}://alice:{password}@nats.example:4222/x, retrying"
    assert redact(text) == f"cannot reach {scheme}://***@nats.example:4222/x, retrying"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A token as the whole user-info, and next to other URLs.
        ("nats://s3cr3t-t0k3n@h:4222", "nats://***@h:4222"),
        ("nats://t0k@h1:1,nats://u:p@ss@h2:2", "nats://***@h1:1,nats://***@h2:2"),
        # Named in a query string, a config dump, JSON, a header.
        ("nats://h:4222/?token=abc%40def&x=1", "nats://h:4222/?token=***&x=1"),
        ("connect(user=alice, password=p@ss:w/rd%)", "connect(user=alice, password=***"),
        ('{"auth_token": "a b c", "user": "x"}', '{"auth_token": ***, "user": "x"}'),
        ("client_secret: hunter2 rejected", "client_secret: *** rejected"),
        ("Authorization: Bearer abcdefghijklmnop", "Authorization: ***"),
        ("sent Bearer abcdefghijklmnop twice", "sent Bearer *** twice"),
        # Words alone are no secrets.
        ("a basic check; the token expired", "a basic check; the token expired"),
    ],
)
def test_redact_hides_tokens(text: str, expected: str) -> None:
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


def _fail_with_secrets() -> None:
    try:
        raise ConnectionError(
            f"nats: auth failed for nats://alice:p@ss:w/rd%40x@10.0.0.1:4222 ({SEED})"
        )
    except ConnectionError as exc:
        raise RuntimeError("token=t0k3n-in-the-message; could not connect") from exc


SECRETS = ("p@ss", "w/rd", "%40x", SEED, "t0k3n", "alice:")


def test_tracebacks_are_redacted_before_any_handler_formats_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = get_logger("test.tracebacks")
    stream = io.StringIO()
    # An application's own handler and formatter: the traceback reaches it redacted.
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    try:
        with caplog.at_level(logging.INFO, logger=ROOT):
            try:
                _fail_with_secrets()
            except RuntimeError:
                log.exception("publisher of %s failed", "nats://tok3n@h:4222")
            try:
                _fail_with_secrets()
            except RuntimeError as exc:
                log.warning("gave up", exc_info=exc)
            log.info("stack of %s", "nats://u:p@ss@h", stack_info=True)
    finally:
        log.removeHandler(handler)
    written = stream.getvalue()
    for text in (written, caplog.text):
        # The tracebacks are there, both exceptions of the chain...
        assert text.count("Traceback (most recent call last)") == 4
        assert "The above exception was the direct cause" in text
        assert "nats://***@10.0.0.1:4222" in text and "token=***" in text
        assert "publisher of nats://***@h:4222 failed" in text
        # ... and no secret.
        for secret in (*SECRETS, "tok3n", "p@ss@h"):
            assert secret not in text, (secret, text)
    first = caplog.records[0]
    assert first.exc_info is None and first.exc_text is not None
    assert "Traceback" in first.exc_text and "p@ss" not in first.exc_text
    assert caplog.records[2].stack_info is not None and "p@ss" not in caplog.records[2].stack_info


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
