"""The pytest plugin's container fixtures, and what happens without a Docker engine:
one skip reason on a user's machine, a failure in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from liftbridge_nats.testing import ContainerCluster, LocalCluster
from liftbridge_nats.testing._docker import CLUSTER_LABEL
from liftbridge_nats.testing.pytest_plugin import NO_ENGINE_REASON

from ._roundtrip import round_trip


async def test_container_cluster_fixture(
    liftbridge_container_cluster: Any, unique_name: Callable[[str], str]
) -> None:
    assert isinstance(liftbridge_container_cluster, ContainerCluster)
    cluster = liftbridge_container_cluster
    (await round_trip(cluster.nats_url, cluster.brokers, unique_name("fixture"))).check()


@pytest.fixture
def stopped_after_test(docker_engine: Any) -> Iterator[list[str]]:
    """Namespaces whose containers must be gone once the test's other fixtures are torn
    down (requested before ``liftbridge_cluster_factory``, so torn down after it)."""
    namespaces: list[str] = []
    yield namespaces
    for namespace in namespaces:
        label = f"{CLUSTER_LABEL}={namespace}"
        assert docker_engine.client.containers.list(all=True, filters={"label": label}) == []
        assert docker_engine.client.networks.list(filters={"label": label}) == []


async def test_factory_makes_what_it_is_asked_and_stops_it(
    stopped_after_test: list[str],
    liftbridge_cluster_factory: Callable[..., Any],
    docker_engine: Any,
) -> None:
    local = liftbridge_cluster_factory(1, backend="processes")
    cluster = liftbridge_cluster_factory(3, backend="containers", log_level="debug")
    assert isinstance(local, LocalCluster) and isinstance(cluster, ContainerCluster)
    await cluster.start()
    assert cluster.node_ids == ["n0", "n1", "n2"]
    assert "level=debug" in cluster.node_log(0)
    label = f"{CLUSTER_LABEL}={cluster.namespace}"
    assert len(docker_engine.client.containers.list(filters={"label": label})) == 4
    # Left running on purpose: the factory stops it after the test.
    stopped_after_test.append(cluster.namespace)


_NEEDS_DOCKER = """
async def test_fixture(liftbridge_container_cluster):
    pass

async def test_factory(liftbridge_cluster_factory):
    async with liftbridge_cluster_factory(1, backend="containers"):
        pass

def test_without_servers():
    pass
"""


def _pytest_without_engine(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_needs_docker.py").write_text(_NEEDS_DOCKER)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["DOCKER_HOST"] = f"unix://{tmp_path}/no-engine.sock"
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-W",
            "error",
            "-rs",
            "-p",
            "no:cacheprovider",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_no_engine_skips_with_one_reason(tmp_path: Path) -> None:
    done = _pytest_without_engine(tmp_path, ci=None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 2 skipped" in done.stdout
    reasons = {line.split(": ", 1)[1] for line in done.stdout.splitlines() if "SKIPPED" in line}
    assert reasons == {NO_ENGINE_REASON}, done.stdout


def test_no_engine_fails_in_ci(tmp_path: Path) -> None:
    done = _pytest_without_engine(tmp_path, ci="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed" in done.stdout and "skipped" not in done.stdout
    assert done.stdout.count("CI: a Docker engine is required for the container tests") >= 2
