"""Logging of the SDK: the ``liftbridge_nats`` logger hierarchy, secrets kept out.

Every module logs through :func:`get_logger` (``liftbridge_nats.<part>``), so an
application tunes the SDK with ``logging.getLogger("liftbridge_nats")`` and each part by
its name (``liftbridge_nats.publisher``, ``liftbridge_nats.acks``, ...). Levels: DEBUG
for choices made once (the publisher's fast path), INFO for recoveries that worked
(resubscribed, partition resumed, reconnected), WARNING for what loses time or data
(re-sends, fail-overs, dropped inbox junk), ERROR for what the caller will see fail.

No secret reaches a log line: loggers from :func:`get_logger` carry a filter that
rewrites each record through :func:`redact` (credentials in URLs, tokens and passwords
written as ``name=value``, NATS seeds, JWTs): its message, and the traceback of an
exception logged with it (``_log.exception``, ``exc_info=``), which the filter formats
itself, so that no handler formats the raw exception later. Callers pass server
addresses through :func:`redact` anyway. Junk that strangers can send (the ack inbox is
a NATS subject anyone may publish to) is logged through a :class:`RateLimitedLog`, and
never by content: counts and subjects only.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Final

__all__ = ["ROOT", "RateLimitedLog", "get_logger", "redact"]

ROOT: Final = "liftbridge_nats"

# A library leaves the output to the application: no handler beyond this one, which
# keeps Python from printing "no handlers could be found" style fallbacks.
logging.getLogger(ROOT).addHandler(logging.NullHandler())

# The start of a URL (nats://, tls://, ws://, grpc+tls:// ...).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_SPACE = re.compile(r"\s")
# A secret written as name=value or name: value (a query string, a config dump, JSON):
# names ending in one of these words (auth_token, client_secret, user_password...).
# A quoted value is hidden to its closing quote, a bare one up to a space or "&" (with
# the scheme before it, as in "Authorization: Bearer <token>").
_NAMED_SECRET = re.compile(
    r"""(?ix)
    (?P<name>["']?\b(?:[a-z0-9]+[_\-])*
        (?:token|password|passwd|pwd|pass|secret|auth|authorization|credentials?
          |api[_\-]?key|access[_\-]?key|private[_\-]?key|jwt|seed|nkey)
    ["']?\s*[=:]\s*)
    (?:"[^"]*"|'[^']*'|(?:(?:Bearer|bearer|Basic)\s+)?[^\s&]+)
    """
)
# HTTP-style credentials in an error text: "Bearer <token>", "Basic <base64>" (as
# written in headers, and long: "basic auth" in a sentence stays).
_AUTH_SCHEME = re.compile(r"\b(?P<name>Bearer|bearer|Basic)\s+[A-Za-z0-9._~+/\-]{8,}=*")
# NATS nkey seeds (S + key type + base32) and JWTs (three base64url parts, "eyJ" start).
_NKEY_SEED = re.compile(r"\bS[ACNOPUX][A-Z2-7]{56}\b")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+")
_HIDDEN = "***"
_NAMES = ("token", "pass", "pwd", "secret", "auth", "credential", "key", "jwt", "seed")


def _hide_userinfo(text: str) -> str:
    """Every URL's user-info replaced, up to the last "@" of the URL.

    A URL runs from its scheme to the next space or the next URL. Its last "@" ends
    the user-info: a password may hold "@", ":", "/" or "%" (raw or percent-encoded)
    and is still hidden whole. The price: an "@" in a URL's path hides what precedes
    it as well, which a log line can afford.
    """
    urls = list(_SCHEME.finditer(text))
    out: list[str] = []
    done = 0
    for i, url in enumerate(urls):
        start = url.end()
        end = urls[i + 1].start() if i + 1 < len(urls) else len(text)
        space = _SPACE.search(text, start, end)
        if space is not None:
            end = space.start()
        at = text.rfind("@", start, end)
        if at > start:
            out.append(text[done:start])
            out.append(_HIDDEN)
            done = at
    out.append(text[done:])
    return "".join(out)


def redact(text: str) -> str:
    """``text`` with credentials replaced by ``***``.

    Hidden: the user-info of URLs, cut at the URL's last "@" (``nats://user:p@ss@host``
    and ``nats://TOKEN@host`` become ``nats://***@host``); values named as secrets
    (``?token=...``, ``password: ...``, ``"auth_token": "..."``); ``Bearer`` and
    ``Basic`` credentials; NATS nkey seeds and JWTs.
    """
    if "@" in text:
        text = _hide_userinfo(text)
    if "=" in text or ":" in text:
        low = text.lower()
        if any(name in low for name in _NAMES):
            text = _NAMED_SECRET.sub(rf"\g<name>{_HIDDEN}", text)
    if "earer " in text or "Basic " in text:
        text = _AUTH_SCHEME.sub(rf"\g<name> {_HIDDEN}", text)
    if "S" in text:
        text = _NKEY_SEED.sub(_HIDDEN, text)
    if "eyJ" in text:
        text = _JWT.sub(_HIDDEN, text)
    return text


# Formats tracebacks as logging's default formatter does, so that the text is redacted
# before any handler sees the record.
_TRACEBACKS = logging.Formatter()


class _RedactingFilter(logging.Filter):
    """Formats a record's message once and stores it redacted (args dropped); formats
    its exception's traceback (and stack) likewise into ``exc_text`` and drops the
    exception itself, whose arguments and frames may hold the very secrets."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = _TRACEBACKS.formatException(record.exc_info)
            # Handlers format exc_text when it is set; some (JSON, rich, error
            # trackers) would format or ship the exception itself.
            record.exc_info = None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_FILTER = _RedactingFilter()


def get_logger(part: str) -> logging.Logger:
    """The logger ``liftbridge_nats.<part>`` (a module's ``__name__`` is taken as is),
    with the redacting filter attached."""
    name = part if part == ROOT or part.startswith(ROOT + ".") else f"{ROOT}.{part}"
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


class RateLimitedLog:
    """At most one record per ``interval`` seconds; the next one tells how many were
    suppressed meanwhile. For events strangers can cause in bulk (junk on an inbox).

    ``log(fmt, *args)`` costs a level test and a clock read while suppressed.
    """

    __slots__ = ("_clock", "_interval", "_level", "_logger", "_next", "_suppressed")

    def __init__(
        self,
        logger: logging.Logger,
        level: int = logging.WARNING,
        interval: float = 10.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._level = level
        self._interval = interval
        self._clock = clock
        self._next = float("-inf")
        self._suppressed = 0

    @property
    def suppressed(self) -> int:
        """Records held back since the last one logged."""
        return self._suppressed

    def log(self, fmt: str, *args: object) -> bool:
        """Log ``fmt % args`` unless one was logged less than ``interval`` ago; return
        True when it was logged."""
        if not self._logger.isEnabledFor(self._level):
            return False
        now = self._clock()
        if now < self._next:
            self._suppressed += 1
            return False
        self._next = now + self._interval
        if self._suppressed:
            fmt += " (and %d more like it since the last report)"
            args = (*args, self._suppressed)
            self._suppressed = 0
        self._logger.log(self._level, fmt, *args)
        return True
