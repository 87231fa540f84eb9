"""Names and sizes the Liftbridge server can store, checked before anything is sent.

Liftbridge v1.9.0 accepts a CreateStream request first and builds the stream later,
while it applies the request's Raft log entry on every broker. A name it cannot use
there makes each broker panic, and panic again on every restart, because the entry
stays in the log: the cluster is lost. Only the client can refuse such names, so the
rules below follow where the server puts them (Liftbridge's ``server/partition.go``,
``newPartition`` and ``startLeading``):

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
* durations become Go ``time.Duration`` nanoseconds: larger ones overflow (see
  :mod:`._args`).

A partition costs its leader and every replica a directory, a log and an index file,
memory maps and NATS subscriptions; thousands in one request keep the brokers busy for
a long time, so the client bounds the count (``Client(max_partitions=...)``).
"""

from __future__ import annotations

import unicodedata

from ._errors import InvalidArgumentError

__all__ = [
    "DEFAULT_MAX_PARTITIONS",
    "MAX_NAME_BYTES",
    "MAX_SUBJECT_BYTES",
    "check_group",
    "check_new_stream",
    "check_partition_count",
    "check_stream_name",
    "check_stream_subject",
    "subject_problem",
]

MAX_NAME_BYTES = 255
"""Longest stream name (one file name on the server) and group, in UTF-8 bytes."""

MAX_SUBJECT_BYTES = 3584
"""Longest subject, in UTF-8 bytes. A subscription line carries the subject, a
partition suffix (up to 11 bytes), a group (up to :data:`MAX_NAME_BYTES`) and an id;
this bound keeps it below nats-server's default 4,096-byte protocol line."""

DEFAULT_MAX_PARTITIONS = 256
"""Default upper bound on ``partitions`` in ``create_stream`` (``Client(max_partitions=)``)."""

_STREAM_IN_SUBJECTS = "the server puts stream names in NATS subjects"


def _bad_character(text: str) -> str | None:
    """The first whitespace or control character of ``text``, if any."""
    for char in text:
        if char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            return char
    return None


def _utf8_length(text: str, what: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"{what} {text!r} is not valid Unicode (it contains a lone surrogate); names "
            "go to the server as UTF-8"
        ) from None


def _text(value: object, what: str) -> tuple[str, int]:
    """``value`` as a non-empty str and its UTF-8 length."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidArgumentError(f"{what} must not be empty")
    return value, _utf8_length(value, what)


def _no_bad_character(value: str, what: str, where: str) -> None:
    char = _bad_character(value)
    if char is not None:
        raise InvalidArgumentError(
            f"{what} {value!r} contains whitespace or a control character ({char!r}): "
            f"{where}, which do not allow them"
        )


def check_stream_name(value: object, what: str = "stream name") -> str:
    """Raise unless the server can store a stream named ``value``; return it.

    ``TypeError`` for a non-str, :class:`InvalidArgumentError` naming the broken rule
    otherwise (see the module docstring for where each rule comes from).
    """
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
    """Raise unless ``value`` can be a stream's load-balance group; return it."""
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


def subject_problem(subject: str) -> str | None:
    """Why NATS cannot carry ``subject`` (its length or characters), or None."""
    try:
        size = len(subject.encode("utf-8"))
    except UnicodeEncodeError:
        return "it is not valid Unicode (it contains a lone surrogate)"
    if size > MAX_SUBJECT_BYTES:
        return (
            f"it is {size} bytes in UTF-8, above the {MAX_SUBJECT_BYTES} that fit in a NATS "
            "protocol line (nats-server closes a connection that sends a longer one)"
        )
    char = _bad_character(subject)
    if char is not None:
        return f"it contains whitespace or a control character ({char!r})"
    return None


def check_stream_subject(subject: str, partitions: int) -> str:
    """Raise unless a stream with ``partitions`` partitions can record ``subject``.

    ``subject`` has passed the general subject check already (tokens, wildcards).
    """
    problem = subject_problem(subject)
    if problem is not None:
        raise InvalidArgumentError(f"subject {subject[:60]!r} is refused: {problem}")
    if partitions > 1 and subject.split(".")[-1] == ">":
        raise InvalidArgumentError(
            f"subject {subject!r} ends in the '>' wildcard, so a stream on it can have one "
            f"partition only: partition N listens on '<subject>.N', which is no valid NATS "
            f"subject after '>' (asked for {partitions} partitions)"
        )
    return subject


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


def check_new_stream(
    subject: str, name: str, group: str | None, partitions: int, max_partitions: int
) -> None:
    """Every check on the names and size of a new stream (``subject``: already checked
    as a NATS subject; ``partitions``: already an int >= 1)."""
    check_stream_name(name)
    if group is not None:
        check_group(group)
    check_partition_count(partitions, max_partitions)
    check_stream_subject(subject, partitions)
