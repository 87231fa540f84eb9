"""Correlation ids for messages published without one of the caller's.

Liftbridge stores a message's correlation id with it, replicates it and serves it to
every reader, so the ids the SDK makes are short: a random prefix per source (8
characters, 48 bits: two sources in one cluster share one with negligible odds) and a
decimal counter, e.g. ``Kx3_a9Qz-1742``. Unique for as long as the source lives, which
is what matching acks needs: each source matches only its own.
"""

from __future__ import annotations

import itertools
import secrets

__all__ = ["CorrelationIds"]


class CorrelationIds:
    """One source's ids: ``prefix`` followed by the next number of ``counter``."""

    __slots__ = ("counter", "prefix")

    def __init__(self) -> None:
        self.prefix = secrets.token_urlsafe(6) + "-"
        self.counter = itertools.count(1)

    def new(self) -> str:
        """The next id."""
        return self.prefix + str(next(self.counter))
