"""Shared CLI plumbing: where the servers are, argument parsers for sizes, durations and
times, and the connections a command opens.

Server addresses are resolved per option, first match wins: the command-line flag, the
environment (``LIFTBRIDGE_NATS_URL``, ``LIFTBRIDGE_BROKERS``), the state file of a dev
cluster started with ``liftbridge-nats servers start``, then the defaults
``nats://127.0.0.1:4222`` and ``127.0.0.1:9292``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from liftbridge_nats import InvalidArgumentError, NotConnectedError

from ._output import Console

if TYPE_CHECKING:
    from liftbridge_nats import Client

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
DEFAULT_BROKERS = "127.0.0.1:9292"
ENV_NATS_URL = "LIFTBRIDGE_NATS_URL"
ENV_BROKERS = "LIFTBRIDGE_BROKERS"
ENV_STATE_FILE = "LIFTBRIDGE_NATS_STATE_FILE"

# Exit statuses (documented in the CLI guide, docs/cli.md).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3
EXIT_INTERRUPTED = 130

Handler = Callable[[argparse.Namespace, Console], Coroutine[Any, Any, int]]


class CliError(Exception):
    """A failure the CLI reports as one line on stderr, with an exit status."""

    def __init__(self, message: str, status: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------ dev-cluster state


def state_file_path() -> Path:
    """Where ``servers start`` records the running dev cluster."""
    explicit = os.environ.get(ENV_STATE_FILE)
    if explicit:
        return Path(explicit).expanduser()
    from liftbridge_nats.testing import cache_dir

    return cache_dir() / "dev-cluster.json"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(0)
    # The state letter follows the parenthesised command name.
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] != "Z"


def read_state(path: Path | None = None) -> dict[str, Any] | None:
    """The recorded dev cluster, or None if there is none (or it is not valid JSON)."""
    path = path or state_file_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def live_state(path: Path | None = None) -> dict[str, Any] | None:
    """The recorded dev cluster if its supervising process is still alive."""
    state = read_state(path)
    if state is None or not pid_alive(int(state.get("pid", 0))):
        return None
    return state


# ------------------------------------------------------------------ endpoints


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where a command connects, and where each address came from."""

    nats_url: str
    brokers: tuple[str, ...]
    nats_source: str
    brokers_source: str


def add_connection_options(parser: argparse.ArgumentParser, *, nats: bool, brokers: bool) -> None:
    """Add ``--nats``/``--brokers``/``--timeout`` to a command that connects.

    Every such command accepts both addresses, so that one set of flags works for any
    command in a script; ``nats``/``brokers`` say which ones this command really uses.
    """
    group = parser.add_argument_group("connection")
    unused = " (not used by this command)"
    group.add_argument(
        "--nats",
        metavar="URL",
        help=f"NATS server URL (env {ENV_NATS_URL}; default: the dev cluster, "
        f"else {DEFAULT_NATS_URL})" + ("" if nats else unused),
    )
    group.add_argument(
        "--brokers",
        metavar="HOST:PORT[,...]",
        help=f"Liftbridge gRPC addresses (env {ENV_BROKERS}; default: the dev cluster, "
        f"else {DEFAULT_BROKERS})" + ("" if brokers else unused),
    )
    group.add_argument(
        "--timeout",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="deadline of each server call (default 10)",
    )


def resolve_endpoints(args: argparse.Namespace) -> Endpoints:
    """Apply flag > environment > dev-cluster state > default to both addresses."""
    state = live_state()

    def pick(flag: str | None, env: str, state_value: str | None, default: str) -> tuple[str, str]:
        if flag:
            return flag, "flag"
        if os.environ.get(env):
            return os.environ[env], f"${env}"
        if state_value:
            return state_value, "dev cluster"
        return default, "default"

    state_brokers = ",".join(state["brokers"]) if state and state.get("brokers") else None
    nats_url, nats_source = pick(
        getattr(args, "nats", None),
        ENV_NATS_URL,
        state.get("nats_url") if state else None,
        DEFAULT_NATS_URL,
    )
    brokers, brokers_source = pick(
        getattr(args, "brokers", None), ENV_BROKERS, state_brokers, DEFAULT_BROKERS
    )
    addresses = tuple(b.strip() for b in brokers.split(",") if b.strip())
    if not addresses:
        raise CliError("--brokers is empty; give HOST:PORT[,HOST:PORT...]", EXIT_USAGE)
    return Endpoints(nats_url, addresses, nats_source, brokers_source)


@contextlib.asynccontextmanager
async def open_client(args: argparse.Namespace, **options: Any) -> AsyncIterator[Client]:
    """A connected gRPC :class:`~liftbridge_nats.Client` for this command
    (``options``: more keyword arguments of the Client)."""
    from liftbridge_nats import Client

    endpoints = resolve_endpoints(args)
    async with Client(list(endpoints.brokers), timeout=args.timeout, **options) as client:
        yield client


def redact_url(url: str) -> str:
    """``url`` without its user-info (user, password or token), for messages and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at, hostpart = rest.rpartition("@")
    if not at:
        return url
    return f"{scheme}{sep}***@{hostpart}" if userinfo else url


@contextlib.asynccontextmanager
async def open_nats(args: argparse.Namespace) -> AsyncIterator[Any]:
    """A nats-py connection that fails fast when NATS is down."""
    import asyncio

    import nats.aio.client
    import nats.errors

    endpoints = resolve_endpoints(args)
    where = redact_url(endpoints.nats_url)
    seen: list[Exception] = []

    async def _remember(exc: Exception) -> None:
        # nats-py logs connection errors itself by default; the CLI reports one line.
        seen.append(exc)

    # nats-py annotates its timeouts as int but takes seconds as floats.
    options: dict[str, Any] = {
        "connect_timeout": min(args.timeout, 5.0),
        # nats-py retries a failed first connect as often as a reconnect: keep both
        # short so that a wrong URL fails in about a second, not after 20.
        "max_reconnect_attempts": 2,
        "reconnect_time_wait": 0.5,
        "error_cb": _remember,
        "name": "liftbridge-nats-cli",
    }
    nc = nats.aio.client.Client()
    try:
        await nc.connect(endpoints.nats_url, **options)
    except (nats.errors.Error, OSError, TimeoutError) as exc:
        # A refused connection keeps its socket unless the client is closed.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 1.0)
        causes = [*seen, exc]
        # nats-py reports a refused login as AuthorizationError, or as a plain Error
        # carrying the server's "Authorization Violation" (then "no servers available").
        if any(
            isinstance(e, nats.errors.AuthorizationError) or "authorization" in str(e).lower()
            for e in causes
        ):
            raise NotConnectedError(
                f"NATS at {where} ({endpoints.nats_source}) refused the credentials "
                "(authorization violation): check the user/password, token or NKey in "
                f"--nats / {ENV_NATS_URL}."
            ) from None
        detail = str(exc or type(exc).__name__).replace(endpoints.nats_url, where)
        raise NotConnectedError(
            f"cannot connect to NATS at {where} ({endpoints.nats_source}): "
            f"{detail}. Start a dev cluster with "
            "`liftbridge-nats servers start`, or pass --nats / set "
            f"{ENV_NATS_URL}."
        ) from None
    try:
        yield nc
    finally:
        await nc.close()


# ------------------------------------------------------------------ value parsers

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}


def parse_duration(text: str) -> float:
    """``"90"``, ``"1.5s"``, ``"250ms"``, ``"1h30m"``, ``"7d"`` -> seconds (float)."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pos = 0
        value = 0.0
        for match in _DURATION_PART.finditer(text):
            if match.start() != pos:
                break
            value += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if pos != len(text) or not text:
            raise argparse.ArgumentTypeError(
                f"invalid duration {text!r}: use seconds or units such as 250ms, 10s, 5m, 1h30m, 7d"
            ) from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: must be a finite number, not negative"
        )
    return value


def duration_arg(text: str) -> timedelta:
    """argparse type: a duration as a timedelta."""
    try:
        return timedelta(seconds=parse_duration(text))
    except OverflowError:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: far too long") from None


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"100"``, ``"1k"``/``"1KB"`` (1000), ``"1KiB"`` (1024), ``"4MiB"`` -> bytes."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: use bytes or units such as 512, 1KiB, 10MB"
        )
    number, prefix, binary = match.groups()
    base = 1024 if binary else 1000
    power = "kmgt".find(prefix.lower()) + 1 if prefix else 0
    return int(float(number) * base**power)


def parse_time(text: str) -> datetime:
    """An ISO 8601 time (UTC if it has no offset), ``now``, or a duration meaning that long ago."""
    text = text.strip()
    if text == "now":
        return datetime.now(UTC)
    try:
        ago = parse_duration(text.removesuffix("ago").strip())
    except argparse.ArgumentTypeError:
        pass
    else:
        return datetime.now(UTC) - timedelta(seconds=ago)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: use ISO 8601 (2026-01-31T12:00:00Z) or a duration "
            "ago such as 5m"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def header_arg(text: str) -> tuple[str, bytes]:
    """argparse type: ``name=value`` -> (name, UTF-8 value)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"invalid header {text!r}: use NAME=VALUE")
    return name, value.encode()


def partitions_arg(text: str) -> list[int]:
    """argparse type: ``"0,2,5"`` -> [0, 2, 5]."""
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid partition list {text!r}: use ids like 0,1,2"
        ) from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"invalid partition list {text!r}")
    return values


def partition_choice_arg(text: str) -> list[int] | None:
    """argparse type: ``0``, ``0,2`` or ``all`` (None: every partition)."""
    if text == "all":
        return None
    try:
        return partitions_arg(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"invalid partition {text!r}: use an id, a list like 0,2, or all"
        ) from None


def add_partition_choice(parser: argparse.ArgumentParser) -> None:
    """``--partition ID|LIST|all`` (default 0), read by :func:`selected_partitions`."""
    parser.add_argument(
        "--partition",
        "-p",
        type=partition_choice_arg,
        default=[0],
        metavar="ID|LIST|all",
        help="partition id, a list (0,2) or all (default 0)",
    )


async def selected_partitions(client: Client, stream: str, choice: list[int] | None) -> list[int]:
    """The partition ids a ``--partition ID|LIST|all`` option selects."""
    if choice is not None:
        return list(choice)
    return list(range(await client.partition_count(stream)))


def require(condition: bool, message: str) -> None:
    """Raise an InvalidArgumentError (reported like a server error) unless ``condition``."""
    if not condition:
        raise InvalidArgumentError(message)
