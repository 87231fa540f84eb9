"""Suite-wide set-up: Ctrl-C as a terminal delivers it, and the containers backend guard.

A suite started in the background of a non-interactive shell inherits SIGINT ignored,
and so would every CLI process a test starts: the tests that press Ctrl-C on one would
wait for an exit that never comes. ``pytest_configure`` gives SIGINT back its default.

Under the containers backend every test runs its servers in containers, or says why it
cannot (``@pytest.mark.processes_only("why")``, which skips it with that reason). A test
that quietly started a LocalCluster instead would pass on processes unnoticed, so here
that start fails the test with what to do.

What collection loaded is frozen out of garbage collection once it ends (see
``pytest_collection_finish``).

An async test still running 20 s before its pytest-timeout prints the stack of every
task on its event loop to stderr (shown with the failure): the timeout's own report
shows only the main thread, idle in ``select`` when a task waits forever.

With ``LIFTBRIDGE_NATS_TEST_INSTALLED=1`` (the release checks, which test the built wheel
in a venv of its own) the run stops at once if ``liftbridge_nats`` was imported from the
checkout rather than from that venv.

Fixtures shared by several folders: ``jwt_hub_cluster`` (NATS in operator mode, for
creds-file logins), and ``traced``, ``metered`` and ``metric_values`` (OpenTelemetry
SDK providers read in memory).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import liftbridge_nats
from liftbridge_nats.testing import LocalCluster
from liftbridge_nats.testing._backend import CONTAINERS, selected_backend
from liftbridge_nats.testing._jwt import OperatorHub, operator_hub_cluster

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.environ.get("LIFTBRIDGE_NATS_TEST_INSTALLED") == "1":
        package = Path(liftbridge_nats.__file__).resolve()
        if ROOT in package.parents:
            raise pytest.UsageError(
                f"LIFTBRIDGE_NATS_TEST_INSTALLED=1 but liftbridge_nats was imported from the "
                f"checkout ({package}): run the venv's pytest script, not `python -m pytest`, "
                "so that the installed package is the one tested"
            )


def pytest_collection_finish(session: pytest.Session) -> None:
    # What collection loaded (every test module, item and strategy) lives for the whole
    # run, yet each full garbage collection walks it on whichever thread allocates: late
    # in the main run, stalls long enough for the tests that time the event loop to
    # blame them on the SDK. Frozen, it is left out; what the tests allocate is collected.
    gc.collect()
    gc.freeze()


def _awaits(coro: Any) -> list[str]:
    """Where a coroutine and everything it awaits are suspended (a task's own
    ``print_stack`` shows one frame of a suspended coroutine)."""
    out = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            out.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return out


@pytest.fixture(autouse=True)
def _stacks_before_the_timeout(request: pytest.FixtureRequest) -> None:
    if inspect.iscoroutinefunction(getattr(request, "function", None)):
        request.getfixturevalue("_task_stacks_before_the_timeout")


@pytest.fixture
async def _task_stacks_before_the_timeout(request: pytest.FixtureRequest) -> Any:
    marker = request.node.get_closest_marker("timeout")
    limit = float(marker.args[0] if marker and marker.args else request.config.getini("timeout"))
    if limit <= 20:
        yield
        return
    loop = asyncio.get_running_loop()

    def dump() -> None:
        print(
            f"\n---- {request.node.nodeid}: still running after {limit - 20:.0f} s; its tasks:",
            file=sys.stderr,
        )
        for task in asyncio.all_tasks(loop):
            print(f"-- {task.get_name()}, awaiting (outermost first):", file=sys.stderr)
            for where in _awaits(task.get_coro()):
                print(f"   {where}", file=sys.stderr)

    handle = loop.call_later(limit - 20, dump)
    yield
    handle.cancel()


@pytest.fixture(autouse=True)
def _containers_backend_means_containers(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if request.node.get_closest_marker("processes_only") or selected_backend() != CONTAINERS:
        return

    async def refuse(self: LocalCluster) -> None:
        raise RuntimeError(
            "this test started a LocalCluster under LIFTBRIDGE_NATS_BACKEND=containers: "
            "start it through liftbridge_cluster_factory (containers then), or mark the "
            'test @pytest.mark.processes_only("why it needs processes")'
        )

    monkeypatch.setattr(LocalCluster, "start", refuse)


@pytest.fixture(scope="module")
def jwt_hub_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalCluster, OperatorHub]]:
    """A 1-node LocalCluster whose NATS is a leaf node of an operator-mode (JWT) hub, and
    the hub (its URL, and the account to write creds files for), per test module."""
    with operator_hub_cluster(tmp_path_factory.mktemp("jwt")) as pair:
        yield pair


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """An OpenTelemetry SDK tracer provider whose finished spans land in memory, to pass
    as ``tracing=`` or to the tracing helpers; shut down after the test."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@pytest.fixture
def metered() -> Iterator[tuple[MeterProvider, InMemoryMetricReader]]:
    """An OpenTelemetry SDK meter provider read in memory, to pass as ``metrics=``; shut
    down after the test."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield provider, reader
    provider.shutdown()


def _metric_values(reader: InMemoryMetricReader) -> dict[str, dict[str, Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: {
            str((point.attributes or {}).get("error.type", "")): getattr(point, "value", point)
            for point in metric.data.data_points
        }
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


@pytest.fixture
def metric_values() -> Callable[[InMemoryMetricReader], dict[str, dict[str, Any]]]:
    """Reads a metric reader as {instrument name: {error.type (or ""): value or histogram
    point}}."""
    return _metric_values
