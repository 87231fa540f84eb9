"""Parsing of the ``liftbridge`` source's options into typed, frozen settings.

Spark hands options over as a case-insensitive map of strings. Names are matched
ignoring case and underscores, so ``ack_policy``, ``ackPolicy`` and ``ACKPOLICY`` are
the same option. Every error names the option at fault and says what it accepts, and
is raised on the driver before any task starts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from liftbridge_nats.errors import InvalidArgumentError
from liftbridge_nats.messages import AckPolicy

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "ReadOptions",
    "WriteOptions",
    "parse_offsets",
    "parse_read_options",
    "parse_write_options",
]

EARLIEST = -2
"""In an offsets spec: the oldest offset still retained (as in Spark's Kafka source)."""
LATEST = -1
"""In an offsets spec: just after the high watermark."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where to start or end in each partition of one stream.

    ``partitions`` holds the offsets a JSON spec named (read-only by convention: a
    plain dict, because settings travel to executors by pickle); any other partition
    gets ``default`` (``EARLIEST`` or ``LATEST``).
    """

    default: int
    partitions: Mapping[int, int] = field(default_factory=dict)

    def for_partition(self, partition: int) -> int:
        """The offset (or ``EARLIEST`` / ``LATEST``) asked for ``partition``."""
        return self.partitions.get(partition, self.default)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Settings of a batch or streaming read."""

    brokers: tuple[str, ...]
    stream: str
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp_ms: int | None
    max_offsets_per_split: int
    max_offsets_per_trigger: int | None
    timeout: float
    resume_paused: bool = True


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


def _norm(name: str) -> str:
    return name.replace("_", "").lower()


class _Options:
    """Option lookup ignoring case and underscores."""

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


def _brokers(opts: _Options, *, required: bool) -> tuple[str, ...]:
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


def _name(opts: _Options, option: str, *, required: bool) -> str | None:
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


def _positive_int(opts: _Options, option: str, default: int | None) -> int | None:
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


def _positive_float(opts: _Options, option: str, default: float) -> float:
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


def _bool(opts: _Options, option: str, default: bool) -> bool:
    raw = opts.get(option)
    if raw is None:
        return default
    value = raw.lower()
    if value not in ("true", "false"):
        raise InvalidArgumentError(f"option {option!r} must be true or false, not {raw!r}.")
    return value == "true"


def parse_offsets(
    raw: str, *, option: str, stream: str, default: int, allowed: tuple[int, ...]
) -> OffsetSpec:
    """Parse ``earliest``, ``latest`` or Kafka-style JSON (``{"orders":{"0":12,"1":-2}}``).

    ``default`` is what partitions absent from a JSON spec get; ``allowed`` lists which
    of ``EARLIEST`` / ``LATEST`` the option accepts (e.g. ``endingOffsets`` refuses
    ``earliest``).
    """
    text = raw.strip()
    word = text.lower()
    names = {EARLIEST: "earliest", LATEST: "latest"}
    accepted = " or ".join(repr(names[a]) for a in allowed)
    if word in ("earliest", "latest"):
        special = EARLIEST if word == "earliest" else LATEST
        if special not in allowed:
            raise InvalidArgumentError(
                f"option {option!r} cannot be {word!r} here; use {accepted} or JSON offsets."
            )
        return OffsetSpec(default=special)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(
            f"option {option!r} is neither {accepted} nor valid JSON ({exc.msg}); "
            f'expected e.g. {{"{stream}":{{"0":12,"1":-2}}}}.'
        ) from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise InvalidArgumentError(
            f"option {option!r} must be a JSON object of stream -> {{partition: offset}}, "
            f'e.g. {{"{stream}":{{"0":12,"1":-2}}}}.'
        )
    others = sorted(k for k in doc if k != stream)
    if others:
        raise InvalidArgumentError(
            f"option {option!r} names stream(s) {others} but option 'stream' is {stream!r}; "
            "offsets can only be given for the stream being read."
        )
    partitions: dict[int, int] = {}
    for key, value in doc.get(stream, {}).items():
        try:
            partition = int(key)
        except ValueError:
            partition = -1
        if partition < 0 or str(partition) != str(key).strip():
            raise InvalidArgumentError(
                f"option {option!r} has partition {key!r}; partitions are non-negative "
                "integers given as JSON strings."
            )
        if type(value) is not int or value < EARLIEST:
            raise InvalidArgumentError(
                f"option {option!r} has {value!r} for partition {partition}; use an offset "
                ">= 0, -2 for earliest or -1 for latest."
            )
        if value in (EARLIEST, LATEST) and value not in allowed:
            raise InvalidArgumentError(
                f"option {option!r} cannot use {value} ({names[value]}) for partition "
                f"{partition}; use {accepted} or an offset >= 0."
            )
        partitions[partition] = value
    return OffsetSpec(default=default, partitions=partitions)


def parse_read_options(raw: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Parse and check the options of ``spark.read`` / ``spark.readStream``."""
    opts = _Options(raw)
    brokers = _brokers(opts, required=True)
    stream = _name(opts, "stream", required=True)
    assert stream is not None
    # A batch read is a snapshot, so its start defaults to earliest; a stream follows
    # what comes next, so it starts at latest unless told otherwise (Kafka's defaults).
    start_default = LATEST if streaming else EARLIEST
    start_raw = opts.get("startingOffsets")
    ts_raw = opts.get("startingTimestamp")
    if start_raw is not None and ts_raw is not None:
        raise InvalidArgumentError(
            "options 'startingOffsets' and 'startingTimestamp' are both set; keep one."
        )
    starting = (
        parse_offsets(
            start_raw,
            option="startingOffsets",
            stream=stream,
            default=start_default,
            # A batch read starting at latest is always empty: refuse it, as Kafka does.
            allowed=(EARLIEST, LATEST) if streaming else (EARLIEST,),
        )
        if start_raw is not None
        else OffsetSpec(default=start_default)
    )
    starting_ts: int | None = None
    if ts_raw is not None:
        try:
            starting_ts = int(ts_raw)
        except ValueError:
            starting_ts = -1
        if starting_ts < 0:
            raise InvalidArgumentError(
                "option 'startingTimestamp' must be milliseconds since the Unix epoch "
                f"(an integer >= 0), not {ts_raw!r}."
            )
    end_raw = opts.get("endingOffsets")
    if end_raw is not None and streaming:
        raise InvalidArgumentError(
            "option 'endingOffsets' is for batch reads only; a streaming query has no end "
            "(use Trigger.AvailableNow to stop at what is stored now)."
        )
    ending = (
        parse_offsets(
            end_raw, option="endingOffsets", stream=stream, default=LATEST, allowed=(LATEST,)
        )
        if end_raw is not None
        else OffsetSpec(default=LATEST)
    )
    split = _positive_int(opts, "maxOffsetsPerSplit", 100_000)
    assert split is not None
    per_trigger = _positive_int(opts, "maxOffsetsPerTrigger", None)
    if per_trigger is not None and not streaming:
        raise InvalidArgumentError(
            "option 'maxOffsetsPerTrigger' is for streaming reads only; use "
            "'endingOffsets' to bound a batch read."
        )
    return ReadOptions(
        brokers=brokers,
        stream=stream,
        starting=starting,
        ending=ending,
        starting_timestamp_ms=starting_ts,
        max_offsets_per_split=split,
        max_offsets_per_trigger=per_trigger,
        timeout=_positive_float(opts, "timeout", 10.0),
        resume_paused=_bool(opts, "resumePaused", True),
    )


def parse_write_options(raw: Mapping[str, str]) -> WriteOptions:
    """Parse and check the options of ``df.write`` / ``df.writeStream``."""
    opts = _Options(raw)
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
    inflight = _positive_int(opts, "max_inflight", 4096)
    assert inflight is not None
    return WriteOptions(
        nats_servers=servers,
        brokers=brokers,
        stream=stream,
        subject=subject,
        ack_policy=policy,
        # Generous by default: the first ALL acks on a fresh replicated stream can take
        # several seconds (followers idle-wait), and a failed task costs a whole retry.
        ack_timeout=_positive_float(opts, "ack_timeout", 30.0),
        max_inflight=inflight,
        timeout=_positive_float(opts, "timeout", 10.0),
    )
