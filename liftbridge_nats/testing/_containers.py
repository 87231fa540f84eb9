"""ContainerCluster: the LocalCluster surface, with NATS and Liftbridge in Docker.

Selected by ``LIFTBRIDGE_NATS_BACKEND=containers`` (pytest fixtures) and imported only
then, so testcontainers and Docker are needed only by those who use it. The Liftbridge
image is ``LIFTBRIDGE_NATS_IMAGE`` if set, else built once from ``docker/Dockerfile``
of a source checkout; NATS runs from ``LIFTBRIDGE_NATS_NATS_IMAGE`` (``nats:2.10-alpine``).

Every node is published on a host port picked like LocalCluster's, and listens on that
same port inside its container, so the addresses brokers advertise in FetchMetadata
are reachable from the tests. Containers keep their data and ports across
``kill_node``/``restart_node``. Readiness uses the same probe as LocalCluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from liftbridge_nats.errors import ServerStartError
from liftbridge_nats.testing._config import node_config, render_yaml
from liftbridge_nats.testing._install import DEFAULT_LIFTBRIDGE_VERSION
from liftbridge_nats.testing._process import free_ports
from liftbridge_nats.testing._readiness import ReadinessTarget, probe

_NATS_IMAGE = "nats:2.10-alpine"
_DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"


class ContainerCluster:
    """NATS + ``nodes`` Liftbridge containers (sync or async context manager)."""

    def __init__(
        self,
        nodes: int = 1,
        *,
        liftbridge_version: str = DEFAULT_LIFTBRIDGE_VERSION,
        liftbridge_config: Mapping[str, Any] | None = None,
        start_timeout: float = 120.0,
        log_level: str = "info",
    ) -> None:
        if nodes < 1:
            raise ValueError("a ContainerCluster needs at least one Liftbridge node")
        self._version = liftbridge_version
        self._overrides = dict(liftbridge_config or {})
        self.start_timeout = start_timeout
        self._log_level = log_level
        self._node_ids = [f"n{i}" for i in range(nodes)]
        self._namespace = f"lbn-{uuid.uuid4().hex[:10]}"
        self._host = "127.0.0.1"
        self._ports: list[int] = []
        self._nats_port = 0
        self._monitor_port = 0
        self._cursors_enabled = True
        self._network: Any = None
        self._nats: Any = None
        self._nodes: list[Any] = []

    # ------------------------------------------------------------------ addresses

    @property
    def nats_url(self) -> str:
        """URL of the NATS container as seen from the tests."""
        return f"nats://{self._host}:{self._nats_port}"

    @property
    def brokers(self) -> list[str]:
        """Advertised gRPC addresses of the Liftbridge nodes, by node index."""
        return [f"{self._host}:{port}" for port in self._ports]

    @property
    def node_ids(self) -> list[str]:
        """Liftbridge server ids, by node index."""
        return list(self._node_ids)

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` log lines of every container."""
        parts = []
        for name, container in [("nats-server", self._nats)] + [
            (f"liftbridge {i}", c) for i, c in zip(self._node_ids, self._nodes, strict=False)
        ]:
            if container is None:
                continue
            try:
                out, err = container.get_logs()
                text = (out or b"").decode(errors="replace") + (err or b"").decode(errors="replace")
            except Exception as exc:  # the container may be gone
                text = f"(no logs: {exc})"
            parts.append(f"----- {name} (last {n} lines)")
            parts.append("\n".join(text.splitlines()[-n:]) or "(empty)")
        return "\n".join(parts)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> ContainerCluster:
        self.start_sync()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_sync()

    async def __aenter__(self) -> ContainerCluster:
        await asyncio.to_thread(self.start_sync)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop_sync)

    def start_sync(self) -> None:
        """Start the containers and wait until the cluster is ready."""
        try:
            from testcontainers.core.container import DockerContainer
            from testcontainers.core.network import Network
        except ImportError as exc:
            raise ServerStartError(
                "LIFTBRIDGE_NATS_BACKEND=containers needs testcontainers: "
                "pip install 'liftbridge-nats[testing]' (and a running Docker engine)."
            ) from exc
        try:
            image = self._image()
            ports = free_ports(len(self._node_ids) + 2)
            self._nats_port, self._monitor_port, self._ports = ports[0], ports[1], ports[2:]
            self._network = Network().create()
            self._nats = (
                DockerContainer(os.environ.get("LIFTBRIDGE_NATS_NATS_IMAGE", _NATS_IMAGE))
                .with_network(self._network)
                .with_network_aliases("nats")
                .with_bind_ports(4222, self._nats_port)
                .with_bind_ports(8222, self._monitor_port)
                .with_command("--http_port 8222")
            )
            self._nats.start()
            self._host = self._nats.get_container_host_ip()
            for i, node_id in enumerate(self._node_ids):
                flat = node_config(
                    node_id=node_id,
                    port=self._ports[i],
                    data_dir="/data",
                    nats_url="nats://nats:4222",
                    namespace=self._namespace,
                    node_ids=self._node_ids,
                    log_level=self._log_level,
                    overrides=self._overrides,
                )
                flat["listen"] = f"0.0.0.0:{self._ports[i]}"
                flat["host"] = self._host
                self._cursors_enabled = bool(flat.get("cursors.stream.partitions"))
                container = (
                    DockerContainer(image)
                    .with_network(self._network)
                    .with_bind_ports(self._ports[i], self._ports[i])
                    .with_env("LBN_CONFIG_YAML", render_yaml(flat))
                )
                self._nodes.append(container)
                container.start()
            self._wait_ready_sync()
        except ServerStartError:
            self.stop_sync()
            raise
        except Exception as exc:
            self.stop_sync()
            raise ServerStartError(
                f"could not start the Liftbridge containers ({type(exc).__name__}: {exc}). "
                "Is a Docker engine running? Unset LIFTBRIDGE_NATS_BACKEND to run the "
                "servers as local processes instead."
            ) from exc
        except BaseException:
            self.stop_sync()
            raise

    def stop_sync(self) -> None:
        """Stop and remove every container and the network (errors are ignored)."""
        for container in [*self._nodes, self._nats]:
            if container is not None:
                # Already gone means nothing is left to clean.
                with contextlib.suppress(Exception):
                    container.stop()
        self._nodes, self._nats = [], None
        if self._network is not None:
            with contextlib.suppress(Exception):
                self._network.remove()
            self._network = None

    async def start(self) -> None:
        """Async :meth:`start_sync`."""
        await asyncio.to_thread(self.start_sync)

    async def stop(self) -> None:
        """Async :meth:`stop_sync`."""
        await asyncio.to_thread(self.stop_sync)

    def _image(self) -> str:
        explicit = os.environ.get("LIFTBRIDGE_NATS_IMAGE")
        if explicit:
            return explicit
        if not (_DOCKER_DIR / "Dockerfile").is_file():
            raise ServerStartError(
                "No Liftbridge image: set LIFTBRIDGE_NATS_IMAGE, or run from a source "
                "checkout that has docker/Dockerfile."
            )
        from testcontainers.core.image import DockerImage

        tag = f"liftbridge-nats/liftbridge:{self._version}"
        image = DockerImage(
            path=str(_DOCKER_DIR),
            tag=tag,
            clean_up=False,
            buildargs={"LIFTBRIDGE_VERSION": self._version},
        )
        image.build()
        return tag

    # ------------------------------------------------------------------ faults

    def _container(self, i: int) -> Any:
        return self._nodes[i].get_wrapped_container()

    async def kill_node(self, i: int) -> None:
        """SIGKILL node ``i``'s container (it keeps its data and port)."""
        await asyncio.to_thread(self._container(i).kill)

    async def stop_node(self, i: int) -> None:
        """Stop node ``i``'s container gracefully (SIGTERM, then SIGKILL after 10 s)."""
        await asyncio.to_thread(self._container(i).stop)

    async def restart_node(self, i: int) -> None:
        """Start node ``i``'s container again and wait until the cluster is ready."""
        await asyncio.to_thread(self._container(i).restart)
        await self.wait_ready()

    async def kill_nats(self) -> None:
        """SIGKILL the NATS container."""
        await asyncio.to_thread(self._nats.get_wrapped_container().kill)

    async def restart_nats(self) -> None:
        """Start the NATS container again (same ports) and wait until ready."""
        await asyncio.to_thread(self._nats.get_wrapped_container().restart)
        await self.wait_ready()

    async def wait_ready(self) -> None:
        """Wait until every running node is usable (same probe as LocalCluster)."""
        await asyncio.to_thread(self._wait_ready_sync)

    def _running(self) -> list[int]:
        running = []
        for i in range(len(self._nodes)):
            container = self._container(i)
            container.reload()
            if container.status == "running":
                running.append(i)
        return running

    def _wait_ready_sync(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        reason = "not probed yet"
        while time.monotonic() < deadline:
            running = self._running()
            if not running:
                raise ServerStartError(f"no Liftbridge container is running.\n{self.log_tail()}")
            target = ReadinessTarget(
                brokers={self._node_ids[i]: self.brokers[i] for i in running},
                namespace=self._namespace,
                monitor_url=f"http://{self._host}:{self._monitor_port}",
                cursors_enabled=self._cursors_enabled,
            )
            found = probe(target)
            if found is None:
                return
            reason = found
            time.sleep(0.5)
        raise ServerStartError(
            f"the Liftbridge containers were not ready within {self.start_timeout:.0f} s "
            f"(last check: {reason}).\n{self.log_tail()}"
        )
