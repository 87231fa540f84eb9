"""The compose files of docker/, brought up with docker-compose and smoke-tested from the
host: create a stream, publish with ALL acks, read it back, tear down with volumes.

Both services run the local server image (no registry), through the image variables the
compose files read. Each run uses a fixed project name, so that a run killed half-way is
cleared by the next one's first ``down``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from liftbridge_nats.testing._image import ensure_image
from liftbridge_nats.testing._readiness import ReadinessTarget, probe

from ._roundtrip import round_trip

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"
# Liftbridge's namespace when the configuration names none (server/config.go).
DEFAULT_NAMESPACE = "liftbridge-default"
NO_COMPOSE = "neither docker-compose nor the docker compose plugin is installed"


def _compose_command() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run(
            [docker, "compose", "version"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        return [docker, "compose"]
    return None


def _run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def _wait_ready(brokers: dict[str, str], within: float) -> None:
    target = ReadinessTarget(
        brokers=brokers,
        namespace=DEFAULT_NAMESPACE,
        monitor_url="http://127.0.0.1:8222",
        cursors_enabled=True,
    )
    deadline = time.monotonic() + within
    while (reason := probe(target)) is not None:
        assert time.monotonic() < deadline, f"not ready within {within} s: {reason}"
        time.sleep(0.5)


def _project_resources(client: Any, project: str) -> list[str]:
    label = {"label": f"com.docker.compose.project={project}"}
    names = [c.name for c in client.containers.list(all=True, filters=label)]
    names += [n.name for n in client.networks.list(filters=label)]
    return names + [v.name for v in client.volumes.list(filters=label)]


@pytest.mark.parametrize(("file", "nodes"), [("compose-1node.yml", 1), ("compose-3node.yml", 3)])
def test_compose_file_smoke(
    file: str,
    nodes: int,
    docker_engine: Any,
    unique_name: Callable[[str], str],
    compose_report: Callable[[str], None],
) -> None:
    compose = _compose_command()
    if compose is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: {NO_COMPOSE}")
        pytest.skip(NO_COMPOSE)
    image = ensure_image(docker_engine)
    project = f"lbn-smoke-{nodes}node"
    env = {**os.environ, "LIFTBRIDGE_NATS_IMAGE": image, "LIFTBRIDGE_NATS_NATS_IMAGE": image}
    base = [*compose, "--project-directory", str(DOCKER_DIR), "-f", str(DOCKER_DIR / file)]
    base += ["-p", project]
    _run([*base, "down", "--volumes", "--remove-orphans"], env)  # a killed run's leftovers
    brokers = {f"n{i}": f"127.0.0.1:{9292 + i}" for i in range(nodes)}
    started = time.monotonic()
    try:
        _run([*base, "up", "--detach", "--no-build"], env)
        _wait_ready(brokers, within=120)
        ready_after = time.monotonic() - started
        label = {"label": f"com.docker.compose.project={project}"}
        volumes = sorted(v.name for v in docker_engine.client.volumes.list(filters=label))
        assert len(volumes) == nodes, volumes
        result = asyncio.run(
            round_trip(
                "nats://127.0.0.1:4222",
                list(brokers.values()),
                unique_name("compose"),
                replication=nodes,
            )
        )
        result.check()
    finally:
        _run([*base, "down", "--volumes"], env)
    assert _project_resources(docker_engine.client, project) == []
    compose_report(
        f"COMPOSE {file}: {nodes + 1} containers up and ready in {ready_after:.1f} s; "
        f"stream created (replication factor {nodes}); {result.summary()}; "
        f"down --volumes: volumes {', '.join(volumes)} removed, nothing of {project} left"
    )
