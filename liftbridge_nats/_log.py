"""Logging of the SDK: the ``liftbridge_nats`` logger hierarchy, secrets kept out.

Every module logs through :func:`get_logger` (``liftbridge_nats.<part>``), so an
application tunes the SDK with ``logging.getLogger("liftbridge_nats")`` and each part by
its name (``liftbridge_nats.publisher``, ``liftbridge_nats.acks``, ...). Levels: DEBUG
for choices made once (the publisher's fast path), INFO for recoveries that worked
(resubscribed, partition resumed, reconnected), WARNING for what loses time or data
(re-sends, fail-overs, dropped inbox junk), ERROR for what the caller will see fail.

No secret reaches a log line: loggers from :func:`get_logger` carry a filter that
rewrites each record through :func:`redact` (credentials in URLs, NATS seeds, JWTs),
and callers pass server addresses through :func:`redact` anyway. Junk that strangers
can send (the ack inbox is a NATS subject anyone may publish to) is logged through a
:class:`RateLimitedLog`, and never by content: counts and subjects only.
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

# user:password@ or token@ after a scheme (nats://, tls://, ws://, grpc+tls:// ...).
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^@/\s]+@")
# NATS nkey seeds (S + key type + base32) and JWTs (three base64url parts, "eyJ" start).
_NKEY_SEED = re.compile(r"\bS[ACNOPUX][A-Z2-7]{56}\b")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+")
_HIDDEN = "***"


def redact(text: str) -> str:
    """``text`` with credentials replaced by ``***``: the user-info part of URLs
    (``nats://user:pass@host`` -> ``nats://***@host``), NATS nkey seeds and JWTs."""
    if "@" in text:
        text = _URL_USERINFO.sub(rf"\g<scheme>{_HIDDEN}@", text)
    if "S" in text:
        text = _NKEY_SEED.sub(_HIDDEN, text)
    if "eyJ" in text:
        text = _JWT.sub(_HIDDEN, text)
    return text


class _RedactingFilter(logging.Filter):
    """Formats a record's message once and stores it redacted (args dropped)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
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
