"""Argument checks of the publisher, run before anything is sent.

Kept off the hot path: the publisher calls :func:`check_message` only when a message
has more than a plain ``bytes`` value (a key, headers, an expected offset, a timeout, or
an unusual type), and checks each subject once (it caches the valid ones).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._errors import InvalidArgumentError
from ._messages import AckPolicy
from ._names import subject_problem

__all__ = [
    "check_correlation_id",
    "check_headers",
    "check_message",
    "check_publisher_args",
    "check_subject",
    "is_subject_token",
]

_INT64_MAX = 2**63 - 1
# What NATS refuses in a published subject: whitespace, wildcards, empty tokens.
_BAD_SUBJECT = re.compile(r"[\s*>]|^\.|\.$|\.\.")
_TOKEN = re.compile(r"[^.*>\s]+")


def check_subject(subject: Any) -> None:
    """Raise unless ``subject`` is a subject a message can be published on."""
    if not isinstance(subject, str):
        raise TypeError(f"subject must be a str, got {type(subject).__name__}")
    if not subject or _BAD_SUBJECT.search(subject):
        raise InvalidArgumentError(
            f"invalid subject {subject!r}: it must be non-empty, without spaces or "
            "wildcards (* >), and its dot-separated tokens must be non-empty"
        )
    problem = subject_problem(subject)
    if problem is not None:
        raise InvalidArgumentError(f"invalid subject {subject[:60]!r}: {problem}")


# What the publisher uses of a nats-py client and of the control-plane client.
_NATS_CLIENT_METHODS = ("publish", "subscribe", "new_inbox", "flush")
_CONTROL_CLIENT_METHODS = ("stream_info", "resume_stream")


def check_publisher_args(
    nc: Any, client: Any, ack_timeout: Any, retry_deadline: Any, *, nc_is_transport: bool = False
) -> None:
    """Raise ``TypeError`` naming the argument when a Publisher gets the wrong kind of
    object (value ranges are checked by the Publisher itself). ``nc_is_transport``: ``nc``
    is a publish transport (tests), not a nats-py client."""
    if not nc_is_transport and any(
        not callable(getattr(nc, name, None)) for name in _NATS_CLIENT_METHODS
    ):
        raise TypeError(
            "nc must be a connected nats-py client (`nc = await nats.connect(url)`), got "
            f"{type(nc).__name__}"
        )
    if client is not None and any(
        not callable(getattr(client, name, None)) for name in _CONTROL_CLIENT_METHODS
    ):
        raise TypeError(
            f"client must be a liftbridge_nats.Client (or None), got {type(client).__name__}"
        )
    for name, value in (("ack_timeout", ack_timeout), ("retry_deadline", retry_deadline)):
        if value is None and name == "retry_deadline":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")


def is_subject_token(text: str) -> bool:
    """True when ``text`` can be one token of a subject (no dot, wildcard or space)."""
    return _TOKEN.fullmatch(text) is not None


def check_message(
    value: Any, key: Any, headers: Any, ack_policy: Any, expected_offset: Any, timeout: Any
) -> bytes:
    """Check a message's arguments; return the value as ``bytes``."""
    if isinstance(value, bytearray | memoryview):
        value = bytes(value)
    elif type(value) is not bytes:
        if not isinstance(value, bytes):
            raise TypeError(f"value must be bytes, got {type(value).__name__}")
        value = bytes(value)
    if key is not None and not isinstance(key, bytes | bytearray):
        raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
    if headers is not None:
        check_headers(headers)
    if not isinstance(ack_policy, AckPolicy):
        raise InvalidArgumentError(f"ack_policy must be an AckPolicy, got {ack_policy!r}")
    if expected_offset is not None and (
        not isinstance(expected_offset, int)
        or isinstance(expected_offset, bool)
        or not -1 <= expected_offset <= _INT64_MAX
    ):
        raise InvalidArgumentError(
            f"expected_offset must be an int64 >= -1 (or None), got {expected_offset!r}"
        )
    if timeout is not None and (
        not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0
    ):
        raise InvalidArgumentError(f"timeout must be > 0 seconds, got {timeout!r}")
    checked: bytes = value
    return checked


def check_headers(headers: Any) -> None:
    """Raise unless ``headers`` is a mapping of non-empty str to bytes."""
    if not isinstance(headers, Mapping):
        raise InvalidArgumentError(
            f"headers must be a mapping of str to bytes, got {type(headers).__name__}"
        )
    for name, data in headers.items():
        if not isinstance(name, str) or not name or not isinstance(data, bytes):
            raise InvalidArgumentError(
                f"header {name!r}: names must be non-empty str and values bytes"
            )


def check_correlation_id(correlation_id: Any) -> str:
    """Raise unless ``correlation_id`` is a non-empty str; return it."""
    if not isinstance(correlation_id, str) or not correlation_id:
        raise InvalidArgumentError(
            f"correlation_id must be a non-empty str, got {correlation_id!r}"
        )
    return correlation_id
