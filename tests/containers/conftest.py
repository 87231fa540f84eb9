"""Fixtures of the container tests: the Docker engine, and a report of the compose smoke
tests printed in the terminal summary (``COMPOSE <file>: ...``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from testcontainers.core.docker_client import DockerClient

from liftbridge_nats.testing._docker import docker_client
from liftbridge_nats.testing.pytest_plugin import require_docker

_STASH = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerClient]:
    """testcontainers' client of the engine; ``.client`` is the docker-py client it wraps
    (the test skips without an engine; fails in CI)."""
    require_docker()
    client = docker_client()
    yield client
    client.client.close()


@pytest.fixture
def compose_report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record one line for the terminal summary."""
    lines = request.config.stash.setdefault(_STASH, [])
    return lines.append


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Print what the compose smoke tests did."""
    lines = config.stash.get(_STASH, [])
    if lines:
        terminalreporter.section("compose smoke tests")
        for line in lines:
            terminalreporter.write_line(line)
