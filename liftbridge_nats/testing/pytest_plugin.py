"""pytest plugin of liftbridge-nats: real NATS + Liftbridge servers as fixtures.

Loaded automatically (``pytest11`` entry point) wherever liftbridge-nats is installed.

Fixtures
--------
``liftbridge_cluster`` (session)
    A started 1-node :class:`~liftbridge_nats.testing.LocalCluster`: ``.nats_url``,
    ``.brokers`` (``["127.0.0.1:PORT"]``), ``.node_ids``, ``.log_tail()``. Shared by
    the whole session, so give every test its own stream names (``unique_name``) and
    do not kill its processes; start a private ``LocalCluster`` for fault tests.
``liftbridge_cluster3`` (session)
    The same with three nodes (``n0``, ``n1``, ``n2``) and short replica timeouts.
``nats_client`` (function)
    A nats-py client connected to ``liftbridge_cluster``; closed after the test.
``unique_name`` (function)
    A callable: ``unique_name()`` or ``unique_name("orders")`` returns a new name such
    as ``orders-test-publish-3f9a1c2e``, valid both as a stream name and as a NATS
    subject token (letters, digits, ``-``, ``_``).

A cluster that cannot start makes the fixture raise (the test errors with the servers'
logs); it is never skipped. When a test that used a cluster fails, the last lines of
every server log are added to its report.

Set ``LIFTBRIDGE_NATS_BACKEND=containers`` to run the servers in Docker containers
(testcontainers, image from ``docker/Dockerfile``) instead of local processes.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from liftbridge_nats.testing._cluster import LocalCluster

try:  # pytest-asyncio is in the testing extra; without it only nats_client is unusable.
    from pytest_asyncio import fixture as _async_fixture
except ImportError:  # pragma: no cover
    _async_fixture = pytest.fixture  # type: ignore[assignment]

_LOG_LINES = 40


def _backend() -> str:
    return os.environ.get("LIFTBRIDGE_NATS_BACKEND", "processes").strip().lower() or "processes"


def _cluster(nodes: int) -> Iterator[Any]:
    _teardown_on_sigterm()
    backend = _backend()
    if backend in ("containers", "container", "docker"):
        from liftbridge_nats.testing._containers import ContainerCluster

        with ContainerCluster(nodes) as cluster:
            yield cluster
    elif backend in ("processes", "process", "local"):
        with LocalCluster(nodes) as cluster:
            yield cluster
    else:
        raise pytest.UsageError(
            f"LIFTBRIDGE_NATS_BACKEND={backend!r} is unknown; use 'processes' or 'containers'."
        )


@pytest.fixture(scope="session")
def liftbridge_cluster() -> Iterator[Any]:
    """Session-wide 1-node cluster (NATS + one Liftbridge node)."""
    yield from _cluster(1)


@pytest.fixture(scope="session")
def liftbridge_cluster3() -> Iterator[Any]:
    """Session-wide 3-node cluster (NATS + three Liftbridge nodes)."""
    yield from _cluster(3)


@_async_fixture
async def nats_client(liftbridge_cluster: Any) -> AsyncIterator[Any]:
    """A nats-py client connected to ``liftbridge_cluster``, closed after the test."""
    import nats

    nc = await nats.connect(liftbridge_cluster.nats_url, connect_timeout=5)
    try:
        yield nc
    finally:
        await nc.close()


def _safe(text: str) -> str:
    # Stream names and NATS subject tokens both accept these characters.
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Factory of unique stream names / subject tokens for the current test."""
    slug = _safe(request.node.name)[:40] or "test"

    def make(prefix: str = "") -> str:
        suffix = uuid.uuid4().hex[:8]
        safe_prefix = _safe(prefix)
        return f"{safe_prefix}-{slug}-{suffix}" if safe_prefix else f"{slug}-{suffix}"

    return make


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _teardown_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt once a cluster fixture starts servers.

    Python's default SIGTERM action exits at once, without teardown or atexit hooks,
    which would leave the cluster processes running. Runs that use no cluster fixture
    keep their signal handling untouched, and a handler someone else installed is left
    alone.
    """
    if threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ):
        signal.signal(signal.SIGTERM, _stop_on_sigterm)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Append the server log tails of every cluster the failed test used."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed:
        return
    funcargs: dict[str, Any] = getattr(item, "funcargs", {}) or {}
    seen: set[int] = set()
    for name, value in funcargs.items():
        log_tail = getattr(value, "log_tail", None)
        if not callable(log_tail) or id(value) in seen:
            continue
        seen.add(id(value))
        try:
            text = log_tail(_LOG_LINES)
        except Exception as exc:  # a report hook must never raise
            text = f"(could not read the logs: {exc})"
        report.sections.append((f"liftbridge-nats server logs ({name})", str(text)))
