"""Property tests of the name rules, without a server: every generated name is either
storable (and then really is one file name and a valid run of NATS subject tokens) or
refused with an InvalidArgumentError that names the rule it breaks."""

from __future__ import annotations

import os
import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_nats import InvalidArgumentError
from liftbridge_nats._checks import (
    DEFAULT_MAX_PARTITIONS,
    MAX_SUBJECT_BYTES,
    check_group,
    check_stream_name,
)
from liftbridge_nats._proto import api_pb2
from liftbridge_nats._requests import create_stream_request

from ._guards import MAX_NAME_BYTES, allowed_names, refused_groups, refused_names


def _one_directory(name: str) -> bool:
    """What the server's filepath.Join(data, "streams", name, "0") needs of ``name``."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    data = "/data/streams"
    joined = os.path.normpath(os.path.join(data, name, "0"))
    return (
        os.path.dirname(os.path.dirname(joined)) == data
        and os.path.basename(os.path.dirname(joined)) == name
        and "\0" not in name
        and len(name.encode("utf-8")) <= MAX_NAME_BYTES
    )


def _literal_subject_tokens(name: str) -> bool:
    """What nats-server needs of ``name`` inside ``ns.<name>.0.replicate``: non-empty
    tokens, no whitespace or control characters, no wildcard."""
    return all(
        token and token not in ("*", ">") and "*" not in token and ">" not in token
        for token in name.split(".")
    ) and not any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in name)


@settings(max_examples=600, deadline=None)
@given(allowed_names)
def test_allowed_names_are_storable(name: str) -> None:
    assert check_stream_name(name) == name
    assert _one_directory(name) and _literal_subject_tokens(name)


@settings(max_examples=600, deadline=None)
@given(refused_names)
def test_refused_names_name_their_rule(case: tuple[str, str, str]) -> None:
    rule, name, words = case
    with pytest.raises(InvalidArgumentError) as info:
        check_stream_name(name)
    assert words in str(info.value), (rule, name, str(info.value))


@settings(max_examples=1000, deadline=None)
@given(st.text(max_size=300) | st.binary(max_size=20).map(lambda b: b.decode("latin-1")))
def test_any_text_is_accepted_only_when_storable(name: str) -> None:
    """The independent checks above agree with the rule on arbitrary text."""
    try:
        check_stream_name(name)
    except InvalidArgumentError:
        accepted = False
    else:
        accepted = True
    storable = bool(name) and _one_directory(name) and _literal_subject_tokens(name)
    assert accepted == storable, name


@settings(max_examples=300, deadline=None)
@given(refused_groups)
def test_refused_groups_name_their_rule(case: tuple[str, str, str]) -> None:
    rule, group, words = case
    with pytest.raises(InvalidArgumentError) as info:
        check_group(group)
    assert words in str(info.value), (rule, group, str(info.value))


@pytest.mark.parametrize("group", ["..", ".", "a/b", "a.b", "workers", "名前"])
def test_groups_are_no_files(group: str) -> None:
    assert check_group(group) == group


@pytest.mark.parametrize("value", [None, b"orders", 7, ["a"]])
def test_wrong_types_are_type_errors(value: object) -> None:
    with pytest.raises(TypeError, match="stream name"):
        check_stream_name(value)
    with pytest.raises(TypeError, match="group"):
        check_group(value)


def _request(**kwargs: Any) -> api_pb2.CreateStreamRequest:
    base: dict[str, Any] = {"max_partitions": DEFAULT_MAX_PARTITIONS}
    base.update(kwargs)
    subject = base.pop("subject", "orders")
    name = base.pop("name", "orders")
    return create_stream_request(subject, name, **base)


def test_partition_count_is_bounded_with_an_override() -> None:
    assert _request(partitions=DEFAULT_MAX_PARTITIONS).partitions == DEFAULT_MAX_PARTITIONS
    with pytest.raises(InvalidArgumentError, match="max_partitions"):
        _request(partitions=DEFAULT_MAX_PARTITIONS + 1)
    assert _request(partitions=5000, max_partitions=5000).partitions == 5000


def test_subject_rules() -> None:
    assert _request(subject="a." * 1791 + "a").subject  # 3,583 bytes
    with pytest.raises(InvalidArgumentError, match="NATS protocol line"):
        _request(subject="a" * (MAX_SUBJECT_BYTES + 1))
    assert _request(subject="orders.>").partitions == 1
    with pytest.raises(InvalidArgumentError, match="one partition only"):
        _request(subject="orders.>", partitions=2)
    assert _request(subject="orders.*", partitions=2).partitions == 2


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("cleaner_interval", 10**13),
        ("retention_max_age", 9_223_372_037),
        ("segment_max_age", float("inf")),
        ("auto_pause_time", 1e300),
    ],
)
def test_durations_beyond_go_durations_are_refused(option: str, value: float) -> None:
    with pytest.raises(InvalidArgumentError, match="292 years"):
        _request(**{option: value})


def test_longest_duration_is_accepted() -> None:
    request = _request(retention_max_age=9_223_372_036)
    assert request.retentionMaxAge.value == 9_223_372_036_000
