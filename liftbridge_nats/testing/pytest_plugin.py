"""pytest plugin of liftbridge-nats: real NATS + Liftbridge servers as fixtures.

Loaded automatically (``pytest11`` entry point) wherever liftbridge-nats is installed.

Fixtures
--------
``liftbridge_cluster`` (session)
    A started 1-node cluster: ``.nats_url``, ``.brokers`` (``["127.0.0.1:PORT"]``),
    ``.node_ids``, ``.log_tail()``. Shared by the whole session, so give every test its
    own stream names (``unique_name``) and do not kill its servers; start a private
    cluster (``liftbridge_cluster_factory``) for fault tests.
``liftbridge_cluster3`` (session)
    The same with three nodes (``n0``, ``n1``, ``n2``) and short replica timeouts.
``liftbridge_cluster_factory`` (function)
    ``liftbridge_cluster_factory(nodes=1, **options)`` returns a new, not yet started
    cluster (``async with`` it); ``options`` are those of
    :func:`~liftbridge_nats.testing.new_cluster` (``backend="containers"`` forces
    containers). Every cluster it made is stopped after the test.
``liftbridge_container_cluster`` (session)
    A started 1-node :class:`~liftbridge_nats.testing.ContainerCluster`, whatever the
    backend.
``nats_client`` (function)
    A nats-py client connected to ``liftbridge_cluster``; closed after the test.
``unique_name`` (function)
    A callable: ``unique_name()`` or ``unique_name("orders")`` returns a new name such
    as ``orders-test-publish-3f9a1c2e``, valid both as a stream name and as a NATS
    subject token (letters, digits, ``-``, ``_``).

Backends
--------
The servers are local processes (:class:`~liftbridge_nats.testing.LocalCluster`), or
Docker containers (:class:`~liftbridge_nats.testing.ContainerCluster`) when
``LIFTBRIDGE_NATS_BACKEND=containers``. A test that can only run on processes says so
with ``@pytest.mark.processes_only("why")``; under the containers backend it is skipped
with that reason.

When no Docker engine answers, every test that needs containers is skipped with one
reason, except in CI (``CI=true``), where that fails the test. A cluster that cannot
start makes the fixture raise (the test errors with the servers' logs); it is never
skipped. When a test that used a cluster fails, the last lines of every server log are
added to its report.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from liftbridge_nats.testing._backend import CONTAINERS, Cluster, new_cluster, selected_backend
from liftbridge_nats.testing._containers import ContainerCluster

try:  # pytest-asyncio is in the testing extra; without it only nats_client is unusable.
    from pytest_asyncio import fixture as _async_fixture
except ImportError:  # pragma: no cover
    _async_fixture = pytest.fixture  # type: ignore[assignment]

_LOG_LINES = 40
NO_ENGINE_REASON = (
    "no Docker engine answers, so the container tests cannot run "
    "(start Docker, or leave LIFTBRIDGE_NATS_BACKEND unset)"
)


def _backend() -> str:
    try:
        return selected_backend()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@functools.cache
def _engine_problem() -> str | None:
    # Asked once per test run; the first answer also clears containers that killed
    # runs left behind.
    from liftbridge_nats import ServerStartError
    from liftbridge_nats.testing._docker import docker_client, remove_orphans

    try:
        client = docker_client()
    except ServerStartError as exc:
        return str(exc)
    try:
        remove_orphans(client.client)
    finally:
        client.client.close()
    return None


def require_docker() -> None:
    """Skip the current test when no Docker engine answers (fail it in CI)."""
    problem = _engine_problem()
    if problem is None:
        return
    if _in_ci():
        pytest.fail(f"CI: a Docker engine is required for the container tests. {problem}")
    pytest.skip(NO_ENGINE_REASON)


def _cluster(cluster: Cluster) -> Iterator[Cluster]:
    _teardown_on_sigterm()
    if isinstance(cluster, ContainerCluster):
        require_docker()
    with cluster:
        yield cluster


@pytest.fixture(scope="session")
def liftbridge_cluster() -> Iterator[Cluster]:
    """Session-wide 1-node cluster (NATS + one Liftbridge node)."""
    yield from _cluster(new_cluster(1, backend=_backend()))


@pytest.fixture(scope="session")
def liftbridge_cluster3() -> Iterator[Cluster]:
    """Session-wide 3-node cluster (NATS + three Liftbridge nodes)."""
    yield from _cluster(new_cluster(3, backend=_backend()))


@pytest.fixture(scope="session")
def liftbridge_container_cluster() -> Iterator[Cluster]:
    """Session-wide 1-node ContainerCluster, whatever LIFTBRIDGE_NATS_BACKEND says."""
    yield from _cluster(ContainerCluster(1))


@pytest.fixture
def liftbridge_cluster_factory() -> Iterator[Callable[..., Cluster]]:
    """Factory of private clusters on the selected backend, all stopped after the test."""
    made: list[Cluster] = []

    def make(nodes: int = 1, **options: Any) -> Cluster:
        options.setdefault("backend", _backend())
        cluster = new_cluster(nodes, **options)
        if isinstance(cluster, ContainerCluster):
            require_docker()
        _teardown_on_sigterm()
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.stop_sync()


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


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``processes_only`` marker."""
    config.addinivalue_line(
        "markers",
        "processes_only(reason): the test needs local server processes; under "
        "LIFTBRIDGE_NATS_BACKEND=containers it is skipped with this reason",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip ``processes_only`` tests under the containers backend, with their reason."""
    marker = item.get_closest_marker("processes_only")
    if marker is None or _backend() != CONTAINERS:
        return
    reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "")
    if not reason:
        raise pytest.UsageError(f"{item.nodeid}: processes_only needs a reason")
    pytest.skip(f"runs on local processes only: {reason}")


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
