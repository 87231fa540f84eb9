"""Generated inputs for the input guards, and the checks a cluster must pass after them.

Names are built rule by rule (see ``liftbridge_nats._checks``): ``allowed_names`` breaks
no rule; each refused strategy breaks exactly one, so the error must name that rule.
``bad_calls`` mixes refused names with wrong argument types and ranges across the
public API. The same pieces serve the property tests (a few hundred inputs, in CI) and
the long fuzz run (``python -m tests.fuzz.guards``).
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeAlias, TypeVar

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client as NATS

from liftbridge_nats import (
    AckPolicy,
    Client,
    InvalidArgumentError,
    LiftbridgeError,
    Publisher,
    StartPosition,
    StopPosition,
)
from liftbridge_nats.testing import LocalCluster

MAX_NAME_BYTES = 255
T = TypeVar("T")

# A generated argument: of any type, right or wrong, on purpose, since what is tested is
# that the SDK checks it at run time. Any is how it gets past the typed signatures.
Arg: TypeAlias = Any


def examples(strategy: st.SearchStrategy[T], count: int) -> list[T]:
    """``count`` generated values, drawn by hypothesis, for a test to run in order
    (against a real cluster, where shrinking would take too long)."""
    found: list[T] = []

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: T) -> None:
        found.append(value)

    collect()
    return found


# Characters a name may hold: no dot, separator, wildcard, whitespace, control or
# format character, and no lone surrogate.
_NAME_CHAR = st.characters(
    blacklist_categories=("Cc", "Cf", "Cs", "Zs", "Zl", "Zp"),
    blacklist_characters="./*>",
)
_TOKEN = st.text(_NAME_CHAR, min_size=1, max_size=12)


def _fits(name: str) -> bool:
    return len(name.encode("utf-8")) <= MAX_NAME_BYTES


def _fill(char: str, prefix: str, extra: int) -> str:
    """``prefix`` then ``char`` repeated up to MAX_NAME_BYTES + ``extra`` bytes."""
    room = MAX_NAME_BYTES + extra - len(prefix.encode())
    return prefix + char * max(1, math.ceil(room / len(char.encode())))


def _near_limit(char: str, pad: str) -> str:
    """``pad`` then as many ``char`` as fit in MAX_NAME_BYTES (within 3 bytes of it)."""
    return pad + char * ((MAX_NAME_BYTES - len(pad)) // len(char.encode()))


_AT_LIMIT = st.builds(_near_limit, _NAME_CHAR, st.text("abc", max_size=3))

allowed_names = st.one_of(
    st.lists(_TOKEN, min_size=1, max_size=4).map(".".join).filter(_fits),
    _AT_LIMIT,
    st.sampled_from(["a", "-", "_", "a\\b", "orders.eu.2", "Ünïcödé", "名前", "🦀" * 63]),
)
"""Stream names the server can store."""

_SHORT_ALLOWED = allowed_names.filter(lambda n: len(n.encode()) <= 200)


def _insert(bad: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """An allowed name with ``bad`` inserted somewhere."""
    return st.builds(
        lambda name, at, text: name[: at % (len(name) + 1)] + text + name[at % (len(name) + 1) :],
        _SHORT_ALLOWED,
        st.integers(0, 300),
        bad,
    )


_CONTROL_OR_SPACE = st.characters(whitelist_categories=("Cc", "Cf", "Zs", "Zl", "Zp")).filter(
    lambda c: c != "\0"
)

# (rule, strategy of names breaking only that rule, words the error must contain)
REFUSED_NAME_RULES: list[tuple[str, st.SearchStrategy[str], str]] = [
    ("empty", st.just(""), "must not be empty"),
    ("dot", st.sampled_from([".", ".."]), "'.' and '..'"),
    ("slash", _insert(st.sampled_from(["/", "/..", "../"])), "'/'"),
    ("nul", _insert(st.just("\0")), "NUL"),
    ("whitespace or control", _insert(_CONTROL_OR_SPACE), "whitespace or a control character"),
    (
        "too long",
        st.builds(_fill, _NAME_CHAR, st.sampled_from(["", "x.", "orders-"]), st.integers(1, 60)),
        "bytes in UTF-8",
    ),
    (
        "empty part",
        st.one_of(
            _SHORT_ALLOWED.map(lambda n: "." + n),
            _SHORT_ALLOWED.map(lambda n: n + "."),
            st.builds(lambda a, b: a[:100] + ".." + b[:100], _SHORT_ALLOWED, _SHORT_ALLOWED),
        ),
        "empty part between dots",
    ),
    ("wildcard", _insert(st.sampled_from(["*", ">", "**", ">*"])), "wildcard"),
    ("lone surrogate", _insert(st.characters(categories=["Cs"])), "lone surrogate"),
]

refused_names = st.one_of(
    *[st.tuples(st.just(rule), names, st.just(words)) for rule, names, words in REFUSED_NAME_RULES]
)
"""(rule, name, words of the error) for names the server cannot store."""

refused_groups = st.one_of(
    st.tuples(st.just("empty"), st.just(""), st.just("must not be empty")),
    st.tuples(
        st.just("whitespace or control"),
        _insert(_CONTROL_OR_SPACE | st.just("\0")),
        st.just("whitespace or a control character"),
    ),
    st.tuples(
        st.just("too long"),
        st.builds(_fill, _NAME_CHAR, st.just("g-"), st.integers(1, 40)),
        st.just("bytes in UTF-8"),
    ),
)
"""(rule, group, words of the error) for groups no NATS queue subscription can carry."""


# ------------------------------------------------------------------ calls


@dataclass(frozen=True)
class Call:
    """One public API call with generated arguments, and what it may end with."""

    label: str
    run: Callable[[Client, Publisher], Awaitable[object]]
    must_refuse: bool
    """True: the SDK must refuse it (InvalidArgumentError or TypeError) before sending."""


_OPTION_VALUES: dict[str, st.SearchStrategy[object]] = {
    "partitions": st.one_of(
        st.integers(max_value=0),
        st.integers(min_value=257, max_value=2**40),
        st.floats(),
        st.text(max_size=3),
        st.booleans(),
        st.none(),
    ),
    "replication_factor": st.one_of(
        st.just(0),
        st.integers(max_value=-2),
        st.integers(min_value=2**31, max_value=2**70),
        st.text(max_size=2),
    ),
    "retention_max_age": st.one_of(
        st.floats(max_value=-1e-3),
        st.floats(min_value=1e10),
        st.just(float("nan")),
        st.just(timedelta.max),
        st.just(timedelta(seconds=-1)),
        st.text(max_size=3),
    ),
    "cleaner_interval": st.one_of(
        st.integers(min_value=10**10, max_value=10**30),
        st.integers(max_value=-1),
        st.just(float("inf")),
        st.just(timedelta(days=10**7)),
    ),
    "segment_max_bytes": st.one_of(st.integers(max_value=-1), st.integers(min_value=2**63)),
    "retention_max_messages": st.one_of(st.integers(max_value=-1), st.floats()),
    "min_isr": st.one_of(st.integers(max_value=-1), st.integers(min_value=2**31)),
    "compact_max_goroutines": st.one_of(st.integers(max_value=-1), st.text(max_size=2)),
    "auto_pause_time": st.one_of(st.integers(min_value=10**10, max_value=10**20), st.just(-5)),
    "timeout": st.one_of(
        st.just(0), st.just(-1.0), st.just(float("nan")), st.just("5"), st.just(float("inf"))
    ),
}


def _fresh() -> str:
    return f"fz-{uuid.uuid4().hex[:10]}"


def _create(
    subject: Arg, name: Arg, **options: Arg
) -> Callable[[Client, Publisher], Awaitable[object]]:
    async def run(client: Client, _pub: Publisher) -> None:
        await client.create_stream(subject, name, **options)

    return run


def _bad_create() -> list[st.SearchStrategy[Call]]:
    by_name = refused_names.map(
        lambda case: Call(f"create name ({case[0]})", _create(_fresh(), case[1]), True)
    )
    by_group = refused_groups.map(
        lambda case: Call(
            f"create group ({case[0]})", _create(_fresh(), _fresh(), group=case[1]), True
        )
    )
    by_subject = st.one_of(
        st.builds(
            lambda n: Call(
                "create subject '>' with partitions", _create("fz.>", _fresh(), partitions=n), True
            ),
            st.integers(2, 8),
        ),
        st.builds(
            lambda k: Call("create subject too long", _create("s." * k + "s", _fresh()), True),
            st.integers(1793, 3000),
        ),
        _insert(_CONTROL_OR_SPACE).map(
            lambda s: Call("create subject control", _create(s, _fresh()), True)
        ),
    )
    by_option = st.sampled_from(sorted(_OPTION_VALUES)).flatmap(
        lambda key: _OPTION_VALUES[key].map(
            lambda value: Call(f"create {key}", _create(_fresh(), _fresh(), **{key: value}), True)
        )
    )
    return [by_name, by_group, by_subject, by_option]


def _other_calls() -> list[st.SearchStrategy[Call]]:
    def delete(name: str) -> Call:
        async def run(client: Client, _pub: Publisher) -> None:
            await client.delete_stream(name)

        return Call("delete refused name", run, True)

    def lookup(name: str, partition: Arg) -> Call:
        # Names that are only looked up reach the server (an unknown stream is its
        # answer), unless empty or of the wrong type.
        async def run(client: Client, _pub: Publisher) -> object:
            return await client.fetch_partition_metadata(name, partition)

        refused = not name or name != name.strip() or not isinstance(partition, int)
        refused = refused or isinstance(partition, bool) or partition < 0 or partition >= 2**31
        return Call("fetch partition metadata", run, refused)

    def cursor(cursor_id: str, offset: Arg) -> Call:
        async def run(client: Client, _pub: Publisher) -> None:
            await client.set_cursor(cursor_id, _fresh(), 0, offset)

        return Call("set cursor", run, True)

    def subscribe(start_offset: Arg, stop_offset: Arg) -> Call:
        async def run(client: Client, _pub: Publisher) -> object:
            async with client.subscribe(
                _fresh(), start_offset=start_offset, stop_offset=stop_offset
            ) as sub:
                return [m async for m in sub]

        return Call("subscribe offsets", run, True)

    def publish(subject: Arg, value: Arg) -> Call:
        async def run(_client: Client, pub: Publisher) -> object:
            return await pub.publish(subject, value, timeout=2)

        return Call("publish", run, True)

    def publish_to_stream(name: str) -> Call:
        async def run(_client: Client, pub: Publisher) -> object:
            return await pub.publish_to_stream(name, b"x", timeout=2)

        return Call("publish to unknown stream", run, False)

    weird_text = st.text(max_size=40)
    return [
        refused_names.map(lambda case: delete(case[1])),
        st.builds(
            lookup,
            weird_text,
            st.one_of(st.integers(-3, 3), st.integers(2**31, 2**40), st.floats(), st.none()),
        ),
        st.builds(
            cursor,
            weird_text,
            st.one_of(st.integers(max_value=-2), st.floats(), st.text(max_size=2)),
        ),
        st.builds(
            subscribe,
            st.one_of(st.integers(max_value=-1), st.floats(), st.text(max_size=2)),
            st.none(),
        ),
        st.builds(
            publish,
            st.one_of(
                st.just(""),
                _insert(_CONTROL_OR_SPACE),
                st.builds(lambda k: "s." * k + "s", st.integers(1793, 2500)),
                st.sampled_from(["a.*", "a.>", "a..b", ".a"]),
            ),
            st.just(b"v"),
        ),
        st.builds(
            publish, st.just("fz-subject"), st.one_of(st.text(max_size=3), st.none(), st.integers())
        ),
        st.builds(publish_to_stream, st.sampled_from(["no-such-stream-x", "fz.unknown"])),
    ]


_FAMILIES = [*_bad_create(), *_other_calls()]
bad_calls = st.integers(0, len(_FAMILIES) - 1).flatmap(lambda i: _FAMILIES[i])
"""Calls with refused names or wrong arguments, each family of calls equally likely."""


# ------------------------------------------------------------------ running them


@dataclass
class Tally:
    """What became of the generated calls."""

    inputs: int = 0
    refused: int = 0
    answered: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    findings: list[str] = field(default_factory=list)


async def attempt(call: Call, client: Client, pub: Publisher, tally: Tally) -> None:
    """Run one call; record a finding unless it ended as it must."""
    tally.inputs += 1
    try:
        await asyncio.wait_for(call.run(client, pub), 30)
    except (InvalidArgumentError, TypeError) as exc:
        if not str(exc):
            tally.findings.append(f"{call.label}: {type(exc).__name__} without a message")
        tally.refused += 1
        tally.outcomes[f"{call.label}: refused"] += 1
        return
    except LiftbridgeError as exc:
        if call.must_refuse:
            tally.findings.append(f"{call.label}: reached the server: {exc!r}")
        tally.answered += 1
        tally.outcomes[f"{call.label}: {type(exc).__name__}"] += 1
        return
    except Exception as exc:  # a finding, whatever it is
        tally.findings.append(f"{call.label}: raised {exc!r}")
        return
    if call.must_refuse:
        tally.findings.append(f"{call.label}: was accepted")
    tally.outcomes[f"{call.label}: accepted"] += 1


async def assert_healthy(cluster: LocalCluster, client: Client, nc: NATS) -> None:
    """Every node runs, and a new replicated stream takes a publish that reads back."""
    dead = [n for i, n in enumerate(cluster.node_ids) if not cluster.is_running(i)]
    assert not dead, f"nodes died: {dead}\n{cluster.log_tail()}"
    name = f"health-{uuid.uuid4().hex[:10]}"
    await client.create_stream(name, name, replication_factor=len(cluster.node_ids))
    try:
        async with Publisher(nc, ack_timeout=20) as pub:
            ack = await pub.publish(name, b"still-healthy", ack_policy=AckPolicy.ALL)
        assert ack is not None and ack.offset == 0
        async with client.subscribe(
            name, start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
        ) as sub:
            values = [m.value async for m in sub]
        assert values == [b"still-healthy"]
    finally:
        await client.delete_stream(name)
    dead = [n for i, n in enumerate(cluster.node_ids) if not cluster.is_running(i)]
    assert not dead, f"nodes died: {dead}\n{cluster.log_tail()}"
