"""The Docker engine as the container harness uses it: through testcontainers.

One testcontainers :class:`~testcontainers.core.docker_client.DockerClient` per caller;
testcontainers' reaper (Ryuk) turned off unless the user chose otherwise (it runs from
an image pulled from a registry); a label on every container and network the harness
creates, naming the cluster and the test process that owns it; and removal by label.
Removal by label does not depend on the Python objects that created the resources, so
it also works from a finalizer, after a cancelled start, and for what a killed test run
left behind (:func:`remove_orphans`). testcontainers has no API for removal by label:
that part uses the docker-py client testcontainers exposes (``DockerClient.client``).
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import TYPE_CHECKING, Any

from liftbridge_nats import ServerStartError

if TYPE_CHECKING:
    from testcontainers.core.config import TestcontainersConfiguration
    from testcontainers.core.docker_client import DockerClient

# Value: the cluster's namespace (one per ContainerCluster).
CLUSTER_LABEL = "io.liftbridge-nats.cluster"
# Value: "<host name>:<process id>" of the Python process that created the resource.
OWNER_LABEL = "io.liftbridge-nats.owner"
# testcontainers' own switch for its reaper; the harness sets the same setting only when
# neither this variable nor ~/.testcontainers.properties (ryuk.disabled) says anything.
REAPER_ENV = "TESTCONTAINERS_RYUK_DISABLED"
_REAPER_PROPERTY = "ryuk.disabled"
_DEFAULT_HOST = "unix:///var/run/docker.sock"

_NO_TESTCONTAINERS = (
    "The container harness needs testcontainers: pip install 'liftbridge-nats[testing]'."
)
_ENGINE_HINT = (
    "Start a Docker engine (or set DOCKER_HOST), or run the servers as local processes "
    "(LocalCluster; leave LIFTBRIDGE_NATS_BACKEND unset)."
)


def owner() -> str:
    """The owner label value of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def labels(namespace: str) -> dict[str, str]:
    """Labels for a resource of the cluster ``namespace``."""
    return {CLUSTER_LABEL: namespace, OWNER_LABEL: owner()}


def disable_reaper(config: TestcontainersConfiguration | None = None) -> bool:
    """Turn testcontainers' reaper off unless the user set it either way; return whether
    it is off.

    The reaper runs from an image that only a registry has, so with it on, starting the
    first container fails on a machine without registry access. The harness removes
    what it creates itself, so it needs no reaper. ``config`` defaults to testcontainers'
    process-wide configuration (the setting then holds for the whole test process).
    """
    from testcontainers.core.config import testcontainers_config

    config = testcontainers_config if config is None else config
    if REAPER_ENV not in os.environ and _REAPER_PROPERTY not in config.tc_properties:
        config.ryuk_disabled = True
    return config.ryuk_disabled


def _socket_problem(host: str | None) -> str | None:
    """Why the engine's Unix socket takes no connection, or None (also for TCP hosts).

    Checked with a socket of our own: docker-py leaves its socket open when the connect
    fails, which a test run with ``-W error`` reports as a ResourceWarning.
    """
    host = host or _DEFAULT_HOST
    if not host.startswith("unix://"):
        return None
    path = host.removeprefix("unix://")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        try:
            sock.connect(path)
        except OSError as exc:
            return f"{path}: {exc.strerror or exc}"
    return None


def docker_client() -> DockerClient:
    """A testcontainers client of the engine that testcontainers finds (``DOCKER_HOST``,
    the Docker context, or the default socket), with its reaper turned off
    (:func:`disable_reaper`). Close it with ``client.client.close()``.

    Raises :class:`~liftbridge_nats.ServerStartError` when testcontainers is
    missing or no engine answers.
    """
    try:
        from testcontainers.core.docker_client import DockerClient, get_docker_host
    except ImportError as exc:
        raise ServerStartError(_NO_TESTCONTAINERS) from exc
    disable_reaper()
    problem = _socket_problem(get_docker_host())
    if problem is None:
        try:
            return DockerClient(timeout=120)
        except Exception as exc:
            problem = str(exc)
    raise ServerStartError(f"no Docker engine answers ({problem}). {_ENGINE_HINT}")


def remove_labelled(client: Any, label: str) -> list[str]:
    """Remove every container (with its anonymous volumes), network and named volume (a
    node's size-limited data directory) carrying ``label`` (``"key"`` or ``"key=value"``),
    in that order; return their names. ``client`` is a docker-py client
    (``DockerClient.client``). Errors are ignored: what is already gone needs no removal."""
    import docker.errors

    removed: list[str] = []
    with contextlib.suppress(docker.errors.DockerException):
        for container in client.containers.list(all=True, filters={"label": label}):
            with contextlib.suppress(docker.errors.DockerException):
                container.remove(force=True, v=True)
                removed.append(container.name)
    with contextlib.suppress(docker.errors.DockerException):
        for network in client.networks.list(filters={"label": label}):
            with contextlib.suppress(docker.errors.DockerException):
                network.remove()
                removed.append(network.name)
    with contextlib.suppress(docker.errors.DockerException):
        for volume in client.volumes.list(filters={"label": label}):
            with contextlib.suppress(docker.errors.DockerException):
                volume.remove(force=True)
                removed.append(volume.name)
    return removed


def _owner_alive(value: str) -> bool:
    host, _, pid = value.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's, or not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphans(client: Any) -> list[str]:
    """Remove the harness's containers and networks whose owning process (on this host)
    is gone, such as those of a test run that was killed; return their names. ``client``
    is a docker-py client (``DockerClient.client``)."""
    import docker.errors

    owners: set[str] = set()
    with contextlib.suppress(docker.errors.DockerException):
        for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
            owners.add(container.labels.get(OWNER_LABEL, ""))
        for network in client.networks.list(filters={"label": OWNER_LABEL}):
            owners.add(network.attrs.get("Labels", {}).get(OWNER_LABEL, ""))
        for volume in client.volumes.list(filters={"label": OWNER_LABEL}):
            owners.add((volume.attrs.get("Labels") or {}).get(OWNER_LABEL, ""))
    removed: list[str] = []
    for value in sorted(owners):
        if value and not _owner_alive(value):
            removed += remove_labelled(client, f"{OWNER_LABEL}={value}")
    return removed
