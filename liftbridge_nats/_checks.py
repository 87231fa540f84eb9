"""Every argument check of the SDK, run before anything is sent.

One convention: ``check_x(value, ...)`` returns the value it checked (converted where
its docstring says so, e.g. a ``bytearray`` value to ``bytes``, a duration to
milliseconds) or raises: ``TypeError`` for a value of the wrong kind,
:class:`InvalidArgumentError` naming the rule it breaks and what to pass instead. Each
rule lives here once: the request builders (:mod:`._requests`), the publisher and the
client call these checks rather than test arguments themselves.

Kept off the publisher's hot path: it calls :func:`check_message` only when a message
has more than a plain ``bytes`` value (a key, headers, an expected offset, a timeout,
or an unusual type), and checks each subject once (it caches the valid ones).

Names the server can store. Liftbridge v1.9.0 accepts a CreateStream request first and
builds the stream later, while it applies the request's Raft log entry on every broker.
A name it cannot use there makes each broker panic, and panic again on every restart,
because the entry stays in the log: the cluster is lost. Only the client can refuse
such names, so the rules follow where the server puts them (Liftbridge's
``server/partition.go``, ``newPartition`` and ``startLeading``):

* the stream name is a directory, ``<data dir>/streams/<name>/<partition>/``: one path
  component, so at most 255 bytes (a file name's limit on Linux file systems), not
  ``.`` or ``..``, and without ``/`` (nested directories, shared with other streams'
  partitions) or NUL;
* the stream name is also part of the NATS subjects ``<namespace>.<name>.<partition>.replicate``
  and ``.offset`` that the partition leader subscribes to: no whitespace or control
  characters, no empty part between dots (a leading or trailing dot, or ``..``), and no
  ``*`` or ``>``, which would subscribe to the replication traffic of other streams;
* the group is the NATS queue group of every partition's subscription: no whitespace
  or control characters, and short enough for a NATS protocol line (it is no file:
  dots and slashes are fine);
* partition N (N >= 1) subscribes to ``<subject>.N``, which is no valid subject when the
  subject ends in the ``>`` wildcard; NATS then closes the broker's connection;
* NATS refuses a protocol line over 4,096 bytes (nats-server's default
  ``max_control_line``) by closing the connection, so subjects and groups are bounded;
* durations become Go ``time.Duration`` nanoseconds: larger ones overflow.

A partition costs its leader and every replica a directory, a log and an index file,
memory maps and NATS subscriptions; thousands in one request keep the brokers busy for
a long time, so the client bounds the count (``Client(max_partitions=...)``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from ._errors import InvalidArgumentError
from ._messages import AckPolicy

__all__ = [
    "DEFAULT_MAX_PARTITIONS",
    "INT32_MAX",
    "INT64_MAX",
    "MAX_NAME_BYTES",
    "MAX_SUBJECT_BYTES",
    "Duration",
    "check_ack_policy",
    "check_callable",
    "check_correlation_id",
    "check_duration",
    "check_expected_offset",
    "check_group",
    "check_headers",
    "check_int",
    "check_key",
    "check_message",
    "check_name",
    "check_partition",
    "check_partition_count",
    "check_partitions",
    "check_publisher_args",
    "check_seconds",
    "check_stream_name",
    "check_stream_subject",
    "check_subject",
    "check_timeout",
    "check_value",
    "is_subject_token",
]

T = TypeVar("T")
Duration = timedelta | float | int

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# The server turns stream-option milliseconds into Go time.Duration nanoseconds (an
# int64): a larger value wraps around to a negative duration, and a negative cleaner
# interval makes the broker panic (time.NewTicker).
_GO_DURATION_MAX_MS = INT64_MAX // 1_000_000

MAX_NAME_BYTES = 255
"""Longest stream name (one file name on the server) and group, in UTF-8 bytes."""

MAX_SUBJECT_BYTES = 3584
"""Longest subject, in UTF-8 bytes. A subscription line carries the subject, a
partition suffix (up to 11 bytes), a group (up to :data:`MAX_NAME_BYTES`) and an id;
this bound keeps it below nats-server's default 4,096-byte protocol line."""

DEFAULT_MAX_PARTITIONS = 256
"""Default upper bound on ``partitions`` in ``create_stream`` (``Client(max_partitions=)``)."""

_STREAM_IN_SUBJECTS = "the server puts stream names in NATS subjects"
_TOKEN = re.compile(r"[^.*>\s]+")


# ------------------------------------------------------------------ text


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    return value


def _utf8_length(text: str, what: str) -> int:
    """The UTF-8 length of ``text``: everything named goes to the server as UTF-8."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"{what} {text!r} is not valid Unicode (it contains a lone surrogate); names "
            "go to the server as UTF-8"
        ) from None


def _bad_character(text: str) -> str | None:
    """The first whitespace or control character of ``text``, if any."""
    for char in text:
        if char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            return char
    return None


def _no_bad_character(value: str, what: str, where: str) -> None:
    char = _bad_character(value)
    if char is not None:
        raise InvalidArgumentError(
            f"{what} {value!r} contains whitespace or a control character ({char!r}): "
            f"{where}, which do not allow them"
        )


def _text(value: object, what: str) -> tuple[str, int]:
    """``value`` as a non-empty str and its UTF-8 length."""
    text = _str(value, what)
    if not text:
        raise InvalidArgumentError(f"{what} must not be empty")
    return text, _utf8_length(text, what)


def check_name(value: object, what: str) -> str:
    """A name or id of something that exists (a stream to look up, a cursor, a group
    id): a non-empty str without surrounding spaces, valid Unicode."""
    name = _str(value, what)
    if not name or name != name.strip():
        raise InvalidArgumentError(f"{what} must be non-empty, without surrounding spaces")
    _utf8_length(name, what)
    return name


# ------------------------------------------------------------------ numbers


def check_int(value: object, what: str, *, low: int = 0, high: int = INT64_MAX) -> int:
    """An int within ``[low, high]`` (the proto field's range); bools are not ints here."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgumentError(f"{what} must be between {low} and {high}, got {value}")
    return value


def check_seconds(value: object, what: str, *, zero: bool = False) -> float:
    """A finite number of seconds > 0 (>= 0 with ``zero``), as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of seconds, got {type(value).__name__}")
    if not (value >= 0 if zero else value > 0) or value == float("inf"):
        bound = ">= 0" if zero else "> 0"
        raise InvalidArgumentError(
            f"{what} must be a finite number of seconds {bound}, got {value!r}"
        )
    return float(value)


def check_duration(value: object, what: str) -> int | None:
    """A stream option's duration (a timedelta or seconds, None: the server's default)
    as the milliseconds the server expects (Liftbridge's ``server/config.go``,
    ``StreamsConfig.ApplyOverrides``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise TypeError(f"{what} must be a timedelta or seconds, got {type(value).__name__}")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not seconds >= 0:  # also refuses NaN
        raise InvalidArgumentError(f"{what} must be a duration >= 0, got {value!r}")
    millis = round(seconds * 1000) if seconds < INT64_MAX else _GO_DURATION_MAX_MS + 1
    if millis > _GO_DURATION_MAX_MS:
        raise InvalidArgumentError(
            f"{what} must be at most {_GO_DURATION_MAX_MS // 1000:,} s (about 292 years: the "
            f"server keeps durations as int64 nanoseconds), got {value!r}"
        )
    return millis


def check_partition(partition: object) -> int:
    """A partition id: an int in [0, 2**31)."""
    return check_int(partition, "partition", high=INT32_MAX)


def check_partitions(partitions: Sequence[int] | None) -> list[int]:
    """Partition ids as a list (None: none given, which means every partition)."""
    ids = list(partitions or ())
    if any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in ids):
        raise InvalidArgumentError(f"partitions must be ints >= 0, got {ids!r}")
    return ids


def check_partition_count(partitions: int, limit: int) -> int:
    """Raise when ``partitions`` (already an int >= 1) is above the client's ``limit``."""
    if partitions > limit:
        raise InvalidArgumentError(
            f"{partitions:,} partitions are more than this client allows ({limit:,}): every "
            "partition costs each of its replicas a directory, files, memory maps and NATS "
            "subscriptions, and a large count in one request keeps the brokers busy long "
            "after the call has timed out. "
            "To allow more, create the client with a larger max_partitions"
        )
    return partitions


def check_callable(value: T, what: str) -> T:
    """A (de)serializer, listener or hook: None or something callable."""
    if value is not None and not callable(value):
        raise TypeError(f"{what} must be a callable or None, got {type(value).__name__}")
    return value


# ------------------------------------------------------------------ subjects


def _check_nats_can_carry(subject: str) -> None:
    """NATS carries a subject of valid Unicode, short enough for a protocol line, with
    no whitespace or control character."""
    size = _utf8_length(subject, "subject")
    if size > MAX_SUBJECT_BYTES:
        raise InvalidArgumentError(
            f"invalid subject {subject[:60]!r}: it is {size} bytes in UTF-8, above the "
            f"{MAX_SUBJECT_BYTES} that fit in a NATS protocol line (nats-server closes a "
            "connection that sends a longer one)"
        )
    char = _bad_character(subject)
    if char is not None:
        raise InvalidArgumentError(
            f"invalid subject {subject[:60]!r}: it contains whitespace or a control "
            f"character ({char!r})"
        )


def check_subject(subject: object) -> str:
    """A subject a message can be published on: no wildcard, no empty token."""
    text = _str(subject, "subject")
    if "" in text.split(".") or "*" in text or ">" in text:
        raise InvalidArgumentError(
            f"invalid subject {text!r}: it must be non-empty, without spaces or "
            "wildcards (* >), and its dot-separated tokens must be non-empty"
        )
    _check_nats_can_carry(text)
    return text


def check_stream_subject(subject: object, partitions: int = 1) -> str:
    """A subject a stream of ``partitions`` partitions can listen on: dot-separated
    non-empty tokens; wildcards (``*`` tokens, a final ``>``) are allowed."""
    text = _str(subject, "subject")
    tokens = text.split(".")
    if "" in tokens:
        raise InvalidArgumentError(
            f"subject {text!r} is not a valid NATS subject: tokens separated by single "
            "dots, no whitespace"
        )
    if ">" in tokens[:-1]:
        raise InvalidArgumentError(f"subject {text!r}: '>' may only be the last token")
    _check_nats_can_carry(text)
    if partitions > 1 and tokens[-1] == ">":
        raise InvalidArgumentError(
            f"subject {text!r} ends in the '>' wildcard, so a stream on it can have one "
            f"partition only: partition N listens on '<subject>.N', which is no valid NATS "
            f"subject after '>' (asked for {partitions} partitions)"
        )
    return text


def is_subject_token(text: str) -> bool:
    """True when ``text`` can be one token of a subject (no dot, wildcard or space)."""
    return _TOKEN.fullmatch(text) is not None


# ------------------------------------------------------------------ streams and groups


def check_stream_name(value: object, what: str = "stream name") -> str:
    """A name the server can store a new stream under (see the module docstring for
    where each rule comes from)."""
    name, size = _text(value, what)
    directory = "the server keeps each stream in a directory named after it"
    if name in (".", ".."):
        raise InvalidArgumentError(
            f"{what} {name!r} is refused: {directory}, and '.' and '..' name no new directory"
        )
    if "/" in name or "\0" in name:
        found = "'/'" if "/" in name else "NUL"
        raise InvalidArgumentError(
            f"{what} {name!r} contains {found}: {directory}, so the name must not contain "
            "'/' (nested directories) or NUL"
        )
    _no_bad_character(name, what, _STREAM_IN_SUBJECTS)
    if size > MAX_NAME_BYTES:
        raise InvalidArgumentError(
            f"{what} {name[:40]!r}... is {size} bytes in UTF-8: {directory}, and a file "
            f"name holds at most {MAX_NAME_BYTES} bytes"
        )
    if "" in name.split("."):
        raise InvalidArgumentError(
            f"{what} {name!r} has an empty part between dots (a leading or trailing dot, or "
            f"'..'): {_STREAM_IN_SUBJECTS}, whose dot-separated tokens must not be empty"
        )
    if "*" in name or ">" in name:
        raise InvalidArgumentError(
            f"{what} {name!r} contains a NATS wildcard ('*' or '>'): {_STREAM_IN_SUBJECTS} "
            "of its replication, where a wildcard would also match other streams"
        )
    return name


def check_group(value: object) -> str:
    """A stream's load-balance group (the NATS queue group of its partitions)."""
    group, size = _text(value, "group")
    queue = "the server subscribes every partition with the group as its NATS queue group"
    _no_bad_character(group, "group", "NATS queue groups")
    if size > MAX_NAME_BYTES:
        raise InvalidArgumentError(
            f"group {group[:40]!r}... is {size} bytes in UTF-8, above the limit of "
            f"{MAX_NAME_BYTES}: {queue}, and the subscription must fit in one NATS "
            "protocol line"
        )
    return group


# ------------------------------------------------------------------ messages


def check_value(value: object) -> bytes:
    """A message value: any bytes-like object, returned as ``bytes``."""
    if type(value) is bytes:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"value must be bytes, got {type(value).__name__}")


def check_key(key: object) -> bytes | bytearray | None:
    """A message key: None, bytes or bytearray."""
    if key is not None and not isinstance(key, bytes | bytearray):
        raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
    return key


def check_headers(headers: T) -> T:
    """Message headers: a mapping of non-empty str names to bytes values."""
    if not isinstance(headers, Mapping):
        raise InvalidArgumentError(
            f"headers must be a mapping of str to bytes, got {type(headers).__name__}"
        )
    for name, data in headers.items():
        if not isinstance(name, str) or not name or not isinstance(data, bytes):
            raise InvalidArgumentError(
                f"header {name!r}: names must be non-empty str and values bytes"
            )
    return headers


def check_ack_policy(ack_policy: object) -> AckPolicy:
    """An :class:`AckPolicy` member (its int value is refused: a typo would pass)."""
    if not isinstance(ack_policy, AckPolicy):
        raise InvalidArgumentError(f"ack_policy must be an AckPolicy, got {ack_policy!r}")
    return ack_policy


def check_expected_offset(expected_offset: object) -> int | None:
    """None (no concurrency check) or an int64 >= -1."""
    if expected_offset is not None and (
        not isinstance(expected_offset, int)
        or isinstance(expected_offset, bool)
        or not -1 <= expected_offset <= INT64_MAX
    ):
        raise InvalidArgumentError(
            f"expected_offset must be an int64 >= -1 (or None), got {expected_offset!r}"
        )
    return expected_offset


def check_timeout(timeout: object) -> float | None:
    """A publish's own deadline: None (the publisher's default) or seconds > 0."""
    if timeout is None:
        return None
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0:
        raise InvalidArgumentError(f"timeout must be > 0 seconds, got {timeout!r}")
    return float(timeout)


def check_correlation_id(correlation_id: object) -> str:
    """A correlation id: a non-empty str of valid Unicode."""
    if not isinstance(correlation_id, str) or not correlation_id:
        raise InvalidArgumentError(
            f"correlation_id must be a non-empty str, got {correlation_id!r}"
        )
    _utf8_length(correlation_id, "correlation_id")
    return correlation_id


def check_message(
    value: Any, key: Any, headers: Any, ack_policy: Any, expected_offset: Any, timeout: Any
) -> bytes:
    """Check a message's arguments; return the value as ``bytes``."""
    data = check_value(value)
    check_key(key)
    if headers is not None:
        check_headers(headers)
    check_ack_policy(ack_policy)
    check_expected_offset(expected_offset)
    check_timeout(timeout)
    return data


# ------------------------------------------------------------------ publisher

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
