"""Option values as Spark hands them over: a case-insensitive map of strings.

:class:`Options` looks names up ignoring case, underscores and dots; the helpers turn
one value into a number, a flag or a readable file, or raise an
:class:`~liftbridge_nats.InvalidArgumentError` naming the option.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from liftbridge_nats import InvalidArgumentError

__all__ = ["Options", "flag", "positive_float", "positive_int", "readable_file"]


def _norm(name: str) -> str:
    return name.replace("_", "").replace(".", "").lower()


class Options:
    """Option lookup ignoring case, underscores and dots."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self._values: dict[str, tuple[str, str]] = {}
        for name, value in raw.items():
            self._values[_norm(name)] = (name, str(value))

    def get(self, name: str) -> str | None:
        item = self._values.get(_norm(name))
        if item is None:
            return None
        value = item[1].strip()
        return value or None

    def has(self, name: str) -> bool:
        return self.get(name) is not None


def positive_int(opts: Options, option: str, default: int | None) -> int | None:
    """A positive integer, or ``default`` when unset."""
    raw = opts.get(option)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise InvalidArgumentError(f"option {option!r} must be a positive integer, not {raw!r}.")
    return value


def positive_float(opts: Options, option: str, default: float) -> float:
    """A positive, finite number of seconds, or ``default`` when unset."""
    raw = opts.get(option)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise InvalidArgumentError(
            f"option {option!r} must be a positive number of seconds, not {raw!r}."
        )
    return value


def flag(opts: Options, option: str, default: bool | None) -> bool | None:
    """``true`` / ``false`` (any case), or ``default`` when unset."""
    raw = opts.get(option)
    if raw is None:
        return default
    value = raw.lower()
    if value not in ("true", "false"):
        raise InvalidArgumentError(f"option {option!r} must be true or false, not {raw!r}.")
    return value == "true"


def readable_file(opts: Options, option: str) -> str | None:
    """A path the driver can read (executors are expected to see the same file)."""
    path = opts.get(option)
    if path is None:
        return None
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise InvalidArgumentError(
            f"option {option!r}: cannot read the file {path!r} on the driver; give a path "
            "that the driver and every executor can read."
        )
    return path
