"""Parsing of the ``liftbridge`` source's options into typed, frozen settings.

Spark hands options over as a case-insensitive map of strings. Names are matched
ignoring case, underscores and dots, so ``ack_policy``, ``ackPolicy`` and ``ACKPOLICY``
are the same option, and so are ``nats.url`` and ``nats_url``. Every error names the
option at fault and says what it accepts, and is raised on the driver before any task
starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from liftbridge_nats import AckPolicy, InvalidArgumentError

from ._positions import (
    EARLIEST,
    LATEST,
    PositionSpec,
    parse_offsets,
    parse_timestamp,
    parse_timestamps,
)
from ._security import GrpcTls, NatsAuth, parse_grpc_tls, parse_nats_auth
from ._values import Options, flag, positive_float, positive_int

__all__ = [
    "ReadOptions",
    "StreamSelection",
    "WriteOptions",
    "parse_read_options",
    "parse_write_options",
]


@dataclass(frozen=True, slots=True)
class StreamSelection:
    """The streams a read covers: a list of names, or a pattern (like Kafka's
    ``subscribe`` and ``subscribePattern``).

    A pattern is a Python regular expression that must match a whole stream name;
    Liftbridge's internal streams (names starting with ``__``) never match it.
    """

    names: tuple[str, ...] = ()
    pattern: str | None = None

    def matches(self, name: str) -> bool:
        """Whether the query reads stream ``name``."""
        if self.pattern is None:
            return name in self.names
        return not name.startswith("__") and re.fullmatch(self.pattern, name) is not None

    def describe(self) -> str:
        """``streams ['a', 'b']`` or ``streams matching 'orders-.*'``, for messages."""
        if self.pattern is None:
            return f"stream(s) {list(self.names)}"
        return f"streams matching {self.pattern!r}"


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Settings of a batch or streaming read."""

    brokers: tuple[str, ...]
    selection: StreamSelection
    starting: PositionSpec
    ending: PositionSpec
    max_offsets_per_split: int
    max_offsets_per_trigger: int | None
    timeout: float
    resume_paused: bool = True
    fail_on_data_loss: bool = True
    include_headers: bool = True
    tls: GrpcTls | None = None


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Settings of a batch or streaming write."""

    nats_servers: tuple[str, ...]
    brokers: tuple[str, ...]
    stream: str | None
    subject: str | None
    ack_policy: AckPolicy
    ack_timeout: float
    max_inflight: int
    timeout: float
    tls: GrpcTls | None = None
    nats_auth: NatsAuth = field(default_factory=NatsAuth)


def _brokers(opts: Options, *, required: bool) -> tuple[str, ...]:
    raw = opts.get("brokers")
    if raw is None:
        if required:
            raise InvalidArgumentError(
                "option 'brokers' is missing: set it to the Liftbridge gRPC addresses, "
                'e.g. .option("brokers", "host1:9292,host2:9292").'
            )
        return ()
    out: list[str] = []
    for part in raw.split(","):
        addr = part.strip()
        if not addr:
            continue
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgumentError(
                f"option 'brokers' has {addr!r}, which is not host:port; give a comma-"
                'separated list such as "host1:9292,host2:9292".'
            )
        out.append(addr)
    if not out:
        raise InvalidArgumentError("option 'brokers' is empty: give at least one host:port.")
    return tuple(out)


def _name(opts: Options, option: str, *, required: bool) -> str | None:
    value = opts.get(option)
    if value is None:
        if required:
            raise InvalidArgumentError(
                f"option {option!r} is missing: set it to the Liftbridge stream to use, "
                f'e.g. .option("{option}", "orders").'
            )
        return None
    if any(c.isspace() for c in value):
        raise InvalidArgumentError(f"option {option!r} must not contain spaces: {value!r}.")
    return value


def _selection(opts: Options) -> StreamSelection:
    given = [o for o in ("stream", "streams", "streamPattern") if opts.has(o)]
    if len(given) != 1:
        raise InvalidArgumentError(
            (
                "options " + ", ".join(repr(g) for g in given) + " are all set; keep one: "
                if given
                else "no stream to read: set "
            )
            + "'stream' (one stream), 'streams' (a comma-separated list) or 'streamPattern' "
            '(a regular expression over stream names), e.g. .option("stream", "orders").'
        )
    if given[0] == "streamPattern":
        pattern = opts.get("streamPattern")
        assert pattern is not None
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidArgumentError(
                f"option 'streamPattern' is not a valid regular expression ({exc})."
            ) from None
        return StreamSelection(pattern=pattern)
    if given[0] == "stream":
        name = _name(opts, "stream", required=True)
        assert name is not None
        return StreamSelection(names=(name,))
    raw = opts.get("streams")
    assert raw is not None
    names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
    bad = [n for n in names if any(c.isspace() for c in n)]
    if not names or bad:
        raise InvalidArgumentError(
            f"option 'streams' is {raw!r}; give stream names separated by commas, "
            'e.g. "orders,payments".'
        )
    return StreamSelection(names=names)


def _one_of(opts: Options, *names: str) -> str | None:
    given = [n for n in names if opts.has(n)]
    if len(given) > 1:
        raise InvalidArgumentError(
            f"options {', '.join(repr(g) for g in given)} are all set; they say the same "
            "thing in different ways: keep one."
        )
    return given[0] if given else None


def _positions(
    opts: Options,
    selection: StreamSelection,
    edge: str,
    default: int,
    allowed: tuple[int, ...],
) -> PositionSpec:
    """``<edge>Offsets``, ``<edge>Timestamp`` or ``<edge>OffsetsByTimestamp`` (at most
    one of them), for ``edge`` "starting" or "ending"."""
    which = _one_of(opts, f"{edge}Offsets", f"{edge}Timestamp", f"{edge}OffsetsByTimestamp")
    if which is None:
        return PositionSpec(default=default)
    raw = opts.get(which)
    assert raw is not None
    if which == f"{edge}Timestamp":
        return PositionSpec(default=parse_timestamp(raw, option=which))
    if which == f"{edge}OffsetsByTimestamp":
        return parse_timestamps(
            raw,
            option=which,
            selected=selection.matches,
            example_streams=selection.names,
            default=default,
        )
    return parse_offsets(
        raw,
        option=which,
        selected=selection.matches,
        example_streams=selection.names,
        default=default,
        allowed=allowed,
    )


def _starting(opts: Options, selection: StreamSelection, streaming: bool) -> PositionSpec:
    # A batch read is a snapshot, so its start defaults to earliest; a stream follows
    # what comes next, so it starts at latest unless told otherwise (Kafka's defaults).
    # A batch read starting at latest is always empty: refused, as Kafka does.
    default = LATEST if streaming else EARLIEST
    allowed = (EARLIEST, LATEST) if streaming else (EARLIEST,)
    return _positions(opts, selection, "starting", default, allowed)


def _ending(opts: Options, selection: StreamSelection, streaming: bool) -> PositionSpec:
    if streaming:
        which = _one_of(opts, "endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
        if which is not None:
            raise InvalidArgumentError(
                f"option {which!r} is for batch reads only; a streaming query has no end "
                "(use Trigger.AvailableNow to stop at what is stored now)."
            )
    return _positions(opts, selection, "ending", LATEST, (LATEST,))


def parse_read_options(raw: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Parse and check the options of ``spark.read`` / ``spark.readStream``."""
    opts = Options(raw)
    brokers = _brokers(opts, required=True)
    selection = _selection(opts)
    split = positive_int(opts, "maxOffsetsPerSplit", 100_000)
    assert split is not None
    per_trigger = positive_int(opts, "maxOffsetsPerTrigger", None)
    if per_trigger is not None and not streaming:
        raise InvalidArgumentError(
            "option 'maxOffsetsPerTrigger' is for streaming reads only; use "
            "'endingOffsets' to bound a batch read."
        )
    return ReadOptions(
        brokers=brokers,
        selection=selection,
        starting=_starting(opts, selection, streaming),
        ending=_ending(opts, selection, streaming),
        max_offsets_per_split=split,
        max_offsets_per_trigger=per_trigger,
        timeout=positive_float(opts, "timeout", 10.0),
        resume_paused=flag(opts, "resumePaused", True) is not False,
        fail_on_data_loss=flag(opts, "failOnDataLoss", True) is not False,
        include_headers=flag(opts, "includeHeaders", True) is not False,
        tls=parse_grpc_tls(opts),
    )


def parse_write_options(raw: Mapping[str, str]) -> WriteOptions:
    """Parse and check the options of ``df.write`` / ``df.writeStream``."""
    opts = Options(raw)
    nats_raw = opts.get("nats_url")
    if nats_raw is None:
        raise InvalidArgumentError(
            "option 'nats_url' is missing: set it to the NATS server(s) Liftbridge listens "
            'on, e.g. .option("nats_url", "nats://host:4222").'
        )
    servers = tuple(s.strip() for s in nats_raw.split(",") if s.strip())
    stream = _name(opts, "stream", required=False)
    subject = _name(opts, "subject", required=False)
    if (stream is None) == (subject is None):
        raise InvalidArgumentError(
            "set exactly one of the options 'stream' (a Liftbridge stream: its subject and "
            "partitions are looked up through 'brokers') and 'subject' (a NATS subject, "
            "published to as is)."
        )
    brokers = _brokers(opts, required=stream is not None)
    policy_raw = opts.get("ack_policy") or "ALL"
    try:
        policy = AckPolicy[policy_raw.upper()]
    except KeyError:
        raise InvalidArgumentError(
            f"option 'ack_policy' is {policy_raw!r}; use ALL (default), LEADER or NONE."
        ) from None
    inflight = positive_int(opts, "max_inflight", 4096)
    assert inflight is not None
    return WriteOptions(
        nats_servers=servers,
        brokers=brokers,
        stream=stream,
        subject=subject,
        ack_policy=policy,
        # Generous by default: the first ALL acks on a fresh replicated stream can take
        # several seconds (followers idle-wait), and a failed task costs a whole retry.
        ack_timeout=positive_float(opts, "ack_timeout", 30.0),
        max_inflight=inflight,
        timeout=positive_float(opts, "timeout", 10.0),
        tls=parse_grpc_tls(opts),
        nats_auth=parse_nats_auth(opts, servers),
    )
