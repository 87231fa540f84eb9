"""The Docker engine as the container harness uses it.

One client per caller (docker-py, the client testcontainers wraps); a label on every
container and network the harness creates, naming the cluster and the test process that
owns it; and removal by label. Removal by label does not depend on the Python objects
that created the resources, so it also works from a finalizer, after a cancelled start,
and for what a killed test run left behind (:func:`remove_orphans`).
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any

from liftbridge_nats.errors import ServerStartError

# Value: the cluster's namespace (one per ContainerCluster).
CLUSTER_LABEL = "io.liftbridge-nats.cluster"
# Value: "<host name>:<process id>" of the Python process that created the resource.
OWNER_LABEL = "io.liftbridge-nats.owner"

_NO_DOCKER_PACKAGE = (
    "The container harness needs the docker package: pip install 'liftbridge-nats[testing]'."
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


def _socket_problem() -> str | None:
    """Why the engine's Unix socket takes no connection, or None (also for TCP hosts).

    Checked with a socket of our own: docker-py leaves its socket open when the connect
    fails, which a test run with ``-W error`` reports as a ResourceWarning.
    """
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
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


def docker_client() -> Any:
    """A docker-py client of the engine that ``DOCKER_HOST`` (or the default socket) names.

    Raises :class:`~liftbridge_nats.errors.ServerStartError` when docker-py is missing or
    no engine answers.
    """
    try:
        import docker
    except ImportError as exc:
        raise ServerStartError(_NO_DOCKER_PACKAGE) from exc
    problem = _socket_problem()
    if problem is None:
        try:
            client = docker.from_env(timeout=120)
        except Exception as exc:
            problem = str(exc)
        else:
            return client
    raise ServerStartError(f"no Docker engine answers ({problem}). {_ENGINE_HINT}")


def engine_problem() -> str | None:
    """Why no Docker engine can be used, or None when one answers."""
    try:
        docker_client().close()
    except ServerStartError as exc:
        return str(exc)
    return None


def remove_labelled(client: Any, label: str) -> list[str]:
    """Remove every container (with its anonymous volumes) and network carrying ``label``
    (``"key"`` or ``"key=value"``); return their names. Errors are ignored: what is
    already gone needs no removal."""
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
    is gone, such as those of a test run that was killed; return their names."""
    import docker.errors

    owners: set[str] = set()
    with contextlib.suppress(docker.errors.DockerException):
        for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
            owners.add(container.labels.get(OWNER_LABEL, ""))
        for network in client.networks.list(filters={"label": OWNER_LABEL}):
            owners.add(network.attrs.get("Labels", {}).get(OWNER_LABEL, ""))
    removed: list[str] = []
    for value in sorted(owners):
        if value and not _owner_alive(value):
            removed += remove_labelled(client, f"{OWNER_LABEL}={value}")
    return removed


def leftovers(client: Any) -> list[str]:
    """Names of every container and network of the harness that exists now."""
    names = [c.name for c in client.containers.list(all=True, filters={"label": CLUSTER_LABEL})]
    names += [n.name for n in client.networks.list(filters={"label": CLUSTER_LABEL})]
    return names
