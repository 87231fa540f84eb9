"""The error family: flags, who raised what, the code tables, and the errors guide's
table (docs/errors.md)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

import liftbridge_nats
from liftbridge_nats import (
    AckError,
    AckTimeoutError,
    LiftbridgeError,
    LocalError,
    MaxBytesExceededError,
    MessageTooLargeError,
    NoRespondersError,
    PublishError,
    PublishRejectedError,
    RemoteError,
    RpcError,
    ServerError,
    for_ack_error,
    for_grpc_status,
)
from liftbridge_nats import _errors as errors

ERRORS_GUIDE = Path(__file__).resolve().parents[2] / "docs/errors.md"

# Bases that both local and remote errors derive from (or that group two cases).
BASES = {LiftbridgeError, LocalError, RemoteError, PublishError, RpcError, MessageTooLargeError}
CLASSES = [
    obj
    for name in errors.__all__
    if isinstance(obj := getattr(errors, name), type) and issubclass(obj, LiftbridgeError)
]


def test_every_error_name_is_importable_from_the_root() -> None:
    assert set(errors.__all__) <= set(liftbridge_nats.__all__)
    for name in errors.__all__:
        assert getattr(liftbridge_nats, name) is getattr(errors, name)


@pytest.mark.parametrize("cls", [c for c in CLASSES if c not in BASES], ids=lambda c: c.__name__)
def test_every_error_is_either_local_or_remote(cls: type[LiftbridgeError]) -> None:
    assert issubclass(cls, LocalError) != issubclass(cls, RemoteError)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_error_has_the_three_flags(cls: type[LiftbridgeError]) -> None:
    for flag in ("maybe_stored", "retriable", "invalid_metadata"):
        assert isinstance(getattr(cls, flag), bool)
    assert cls.__doc__ and cls.__doc__.strip()


def test_no_responders_is_an_answer_not_a_timeout() -> None:
    assert not issubclass(NoRespondersError, TimeoutError)
    assert not issubclass(NoRespondersError, AckTimeoutError)
    assert issubclass(AckTimeoutError, asyncio.TimeoutError)
    assert not NoRespondersError.maybe_stored and AckTimeoutError.maybe_stored
    assert NoRespondersError.retriable and NoRespondersError.invalid_metadata


def test_too_large_found_locally_is_not_a_server_rejection() -> None:
    local = errors.MaxPayloadExceededError("x")
    assert isinstance(local, MessageTooLargeError) and isinstance(local, LocalError)
    assert not isinstance(local, PublishRejectedError)
    remote = MaxBytesExceededError("x")
    assert isinstance(remote, MessageTooLargeError) and isinstance(remote, PublishRejectedError)


def test_every_ack_error_has_a_remote_class() -> None:
    for code in AckError:
        if code is AckError.OK:
            continue
        cls = for_ack_error(code)
        assert issubclass(cls, PublishRejectedError) and issubclass(cls, RemoteError)
    assert for_ack_error(AckError.TOO_LARGE) is MaxBytesExceededError
    assert for_ack_error(99) is PublishRejectedError


def test_grpc_status_table() -> None:
    assert for_grpc_status("NOT_FOUND") is errors.NoSuchStreamError
    assert for_grpc_status("DEADLINE_EXCEEDED") is errors.RpcTimeoutError
    assert for_grpc_status("INTERNAL") is ServerError
    assert for_grpc_status(None) is ServerError


# ---------------------------------------------------------------- the guide's table

_ROW = re.compile(r"^\| `(\w+)`[^|]*\| (\w+) \| (yes|no) \| (yes|no) \| (yes|no) \|")


def _guide_rows() -> dict[str, tuple[str, bool, bool, bool]]:
    text = ERRORS_GUIDE.read_text()
    section = text[text.index("## The errors and their flags\n") :]
    section = section.split("\n## ", 1)[0]
    rows: dict[str, tuple[str, bool, bool, bool]] = {}
    for line in section.splitlines():
        match = _ROW.match(line)
        if match:
            name, origin, a, b, c = match.groups()
            rows[name] = (origin, a == "yes", b == "yes", c == "yes")
    return rows


def test_guide_table_lists_every_error_with_its_flags() -> None:
    rows = _guide_rows()
    expected = {}
    for cls in CLASSES:
        if cls in (LiftbridgeError, LocalError, RemoteError):
            continue  # described in the text above the table
        origin = (
            "local"
            if issubclass(cls, LocalError)
            else "remote"
            if issubclass(cls, RemoteError)
            else "base"
        )
        expected[cls.__name__] = (origin, cls.maybe_stored, cls.retriable, cls.invalid_metadata)
    assert rows == expected
