"""LocalCluster: one nats-server and N Liftbridge nodes as local processes.

Every process listens on 127.0.0.1 on a port the OS picked, writes its log to a file
in the cluster's temporary directory, and is killed and reaped on stop, on errors,
on cancellation and (through a finalizer) at interpreter exit.

Readiness (see ``_readiness``) is checked from outside, as a client sees the cluster.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import shutil
import signal
import tempfile
import time
import uuid
import weakref
from collections.abc import Coroutine, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from liftbridge_nats import ServerStartError
from liftbridge_nats.testing._config import nats_conf, node_config, render_yaml
from liftbridge_nats.testing._install import (
    DEFAULT_LIFTBRIDGE_VERSION,
    ensure_liftbridge,
    find_nats_server,
)
from liftbridge_nats.testing._process import ServerProcess, free_ports, port_open, tail
from liftbridge_nats.testing._readiness import GrpcTls, ReadinessTarget, probe, wait_ready

if TYPE_CHECKING:
    from liftbridge_nats.testing._certs import TestCertificates

_T = TypeVar("_T")

_START_ATTEMPTS = 3


def _run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to completion from synchronous code.

    Always in a worker thread with its own event loop: ``asyncio.run`` on the calling
    thread would replace that thread's current loop (which pytest-asyncio may have
    set up), and would fail outright inside a running loop. Ctrl-C reaches the calling
    thread only: it cancels the coroutine, which then cleans up before this returns.
    """
    running: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]]
    running = concurrent.futures.Future()

    async def main() -> _T:
        task = asyncio.current_task()
        assert task is not None
        running.set_result((asyncio.get_running_loop(), task))
        return await coro

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        done = pool.submit(asyncio.run, main())
        try:
            return done.result()
        except BaseException:
            if not done.done():
                loop, task = running.result()
                # The loop may have closed since done.done() was checked.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(task.cancel)
            raise  # leaving the pool waits for the cancelled coroutine's clean-up


class _Runtime:
    """The resources a cluster owns, kept apart so a finalizer can free them."""

    def __init__(self) -> None:
        self.workdir: Path | None = None
        self.processes: list[ServerProcess] = []

    def cleanup(self) -> None:
        # Liftbridge nodes first so they do not log NATS reconnect storms, NATS last.
        for proc in reversed(self.processes):
            proc.kill()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


class LocalCluster:
    """A real nats-server plus ``nodes`` Liftbridge servers, for tests and demos.

    Use it as an async or a sync context manager::

        async with LocalCluster(3) as cluster:
            ...  # cluster.nats_url, cluster.brokers

        with LocalCluster() as cluster:
            ...

    ``liftbridge_config`` is merged into every node's generated YAML (dotted keys such
    as ``"streams.auto.pause.time": "2s"`` or nested mappings; ``None`` removes a
    default). ``nats_config`` is extra nats-server configuration (text, or a mapping
    written as ``key: <json>`` lines). ``nats_args`` / ``liftbridge_args`` are extra
    command-line arguments. ``start_timeout`` bounds start-up (not the one-time
    Liftbridge build) and every later wait for readiness.

    ``grpc_tls`` (certificates from :func:`generate_certificates`) makes the
    readiness probe talk TLS to the brokers, trusting ``ca_cert`` and presenting the
    client certificate; the server side is configured through ``liftbridge_config``
    (``tls.cert``, ``tls.key``, ``tls.client.auth.*``). ``nats_url_userinfo`` (such as
    a token, or ``user:password``) goes into the NATS URL the nodes connect with;
    :meth:`log_tail` masks it, since Liftbridge logs its NATS URLs.
    """

    def __init__(
        self,
        nodes: int = 1,
        *,
        liftbridge_version: str = DEFAULT_LIFTBRIDGE_VERSION,
        liftbridge_config: Mapping[str, Any] | None = None,
        nats_config: str | Mapping[str, Any] | None = None,
        nats_args: Iterable[str] = (),
        liftbridge_args: Iterable[str] = (),
        start_timeout: float = 60.0,
        log_level: str = "info",
        grpc_tls: TestCertificates | None = None,
        nats_url_userinfo: str | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("a LocalCluster needs at least one Liftbridge node")
        self._grpc_tls = grpc_tls
        self._nats_userinfo = nats_url_userinfo
        self._nodes = nodes
        self._version = liftbridge_version
        self._liftbridge_config = dict(liftbridge_config or {})
        self._nats_config = nats_config
        self._nats_args = list(nats_args)
        self._liftbridge_args = list(liftbridge_args)
        self.start_timeout = start_timeout
        self._log_level = log_level
        self._node_ids = [f"n{i}" for i in range(nodes)]
        self._namespace = f"lbn-{uuid.uuid4().hex[:10]}"
        self._ports: list[int] = []
        self._nats_port = 0
        self._monitor_port = 0
        self._cursors_enabled = True
        self._nats: ServerProcess | None = None
        self._liftbridge: list[ServerProcess] = []
        self._runtime = _Runtime()
        self._finalizer = weakref.finalize(self, self._runtime.cleanup)
        self._started = False

    def __repr__(self) -> str:
        if not self._started or self._runtime.workdir is None:
            return f"<LocalCluster nodes={self._nodes} (not running)>"
        return f"<LocalCluster nats={self.nats_url} brokers={self.brokers}>"

    # ------------------------------------------------------------------ addresses

    @property
    def nats_url(self) -> str:
        """URL of the cluster's nats-server, e.g. ``nats://127.0.0.1:4222``."""
        self._require_started()
        return f"nats://127.0.0.1:{self._nats_port}"

    @property
    def nats_monitor_url(self) -> str:
        """URL of nats-server's HTTP monitoring endpoint."""
        self._require_started()
        return f"http://127.0.0.1:{self._monitor_port}"

    @property
    def brokers(self) -> list[str]:
        """gRPC addresses ``"127.0.0.1:PORT"`` of the Liftbridge nodes, by node index."""
        self._require_started()
        return [f"127.0.0.1:{port}" for port in self._ports]

    @property
    def node_ids(self) -> list[str]:
        """Liftbridge server ids (``"n0"``, ``"n1"``, ...), by node index."""
        return list(self._node_ids)

    @property
    def namespace(self) -> str:
        """The Liftbridge cluster namespace (unique per LocalCluster)."""
        return self._namespace

    @property
    def workdir(self) -> Path:
        """Temporary directory holding configs, data directories and logs."""
        self._require_started()
        assert self._runtime.workdir is not None
        return self._runtime.workdir

    def data_dir(self, i: int) -> Path:
        """Data directory of node ``i``."""
        return self.workdir / self._node_ids[i] / "data"

    def config_path(self, i: int) -> Path:
        """Generated YAML configuration file of node ``i``."""
        return self.workdir / self._node_ids[i] / "liftbridge.yaml"

    def log_path(self, i: int) -> Path:
        """Log file of Liftbridge node ``i``."""
        return self.workdir / "logs" / f"{self._node_ids[i]}.log"

    @property
    def nats_log_path(self) -> Path:
        """Log file of the nats-server."""
        return self.workdir / "logs" / "nats.log"

    def node_log(self, i: int) -> str:
        """Everything Liftbridge node ``i`` has logged so far, across restarts."""
        try:
            return self.log_path(i).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def pids(self) -> list[int]:
        """Process ids of every server process that is currently running."""
        return [p.pid for p in self._runtime.processes if p.running and p.pid is not None]

    def is_running(self, i: int) -> bool:
        """Whether Liftbridge node ``i`` is running."""
        return self._liftbridge[i].running

    def is_nats_running(self) -> bool:
        """Whether the nats-server is running."""
        return self._nats is not None and self._nats.running

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` lines of every process log, with a heading per process."""
        if self._runtime.workdir is None:
            return "(cluster not running: no logs)"
        parts = []
        for proc in self._runtime.processes:
            if proc.pid is None:
                state = "not started"
            elif proc.running:
                state = "running"
            else:
                state = f"exited with status {proc.returncode}"
            parts.append(f"----- {proc.name} [{state}] {proc.log_path} (last {n} lines)")
            parts.append(tail(proc.log_path, n).rstrip("\n") or "(empty)")
        text = "\n".join(parts)
        if self._nats_userinfo:
            text = text.replace(self._nats_userinfo, "***")
        return text

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> LocalCluster:
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

    def __enter__(self) -> LocalCluster:
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
        # The logs are deleted on stop: keep their tail on the error that ended the
        # block, so a failing test shows what the servers said.
        if isinstance(exc, Exception) and not isinstance(exc, ServerStartError):
            exc.add_note(f"liftbridge-nats LocalCluster logs:\n{self.log_tail()}")

    def start_sync(self) -> None:
        """Blocking :meth:`start` for synchronous code."""
        _run_sync(self.start())

    def stop_sync(self) -> None:
        """Blocking :meth:`stop` for synchronous code."""
        self._runtime.cleanup()
        self._started = False

    async def start(self) -> None:
        """Start NATS and every Liftbridge node and wait until the cluster is ready.

        Raises :class:`~liftbridge_nats.ServerStartError` (with the log tail of
        every process) if the servers cannot start or are not ready within
        ``start_timeout``. Nothing is left running after a failure.
        """
        if self._started:
            raise RuntimeError("this LocalCluster is already started")
        # The first call may compile Liftbridge (about a minute); not part of the timeout.
        liftbridge_bin = await asyncio.to_thread(ensure_liftbridge, self._version)
        nats_bin = find_nats_server()
        for attempt in range(_START_ATTEMPTS):
            self._started = True
            try:
                self._prepare(str(liftbridge_bin), str(nats_bin))
                assert self._nats is not None
                self._nats.start()
                await self._wait_nats_port()
                for proc in self._liftbridge:
                    proc.start()
                await self.wait_ready()
                return
            except ServerStartError as exc:
                # A free port can be taken by another process between our probe and
                # the server's bind; new ports fix that, nothing else is retried.
                lost_port = "address already in use" in str(exc)
                self.stop_sync()
                if not lost_port or attempt == _START_ATTEMPTS - 1:
                    raise
            except BaseException:
                self.stop_sync()
                raise

    async def stop(self) -> None:
        """Kill every process (SIGKILL, then reap) and delete the temporary directory."""
        self.stop_sync()

    def _prepare(self, liftbridge_bin: str, nats_bin: str) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="liftbridge-nats-"))
        self._runtime.workdir = workdir
        ports = free_ports(self._nodes + 2)
        self._nats_port, self._monitor_port = ports[0], ports[1]
        self._ports = ports[2:]
        nats_conf_path = workdir / "nats.conf"
        nats_conf_path.write_text(
            nats_conf(
                port=self._nats_port, monitor_port=self._monitor_port, extra=self._nats_config
            )
        )
        self._nats = ServerProcess(
            "nats-server",
            [nats_bin, "-c", str(nats_conf_path), *self._nats_args],
            workdir / "logs" / "nats.log",
        )
        self._liftbridge = []
        for i, node_id in enumerate(self._node_ids):
            data_dir = self.data_dir(i)
            data_dir.mkdir(parents=True)
            flat = node_config(
                node_id=node_id,
                port=self._ports[i],
                data_dir=str(data_dir),
                nats_url=self._node_nats_url(),
                namespace=self._namespace,
                node_ids=self._node_ids,
                log_level=self._log_level,
                overrides=self._liftbridge_config,
            )
            self._cursors_enabled = bool(flat.get("cursors.stream.partitions"))
            self.config_path(i).write_text(render_yaml(flat))
            self._liftbridge.append(
                ServerProcess(
                    f"liftbridge {node_id}",
                    [liftbridge_bin, "--config", str(self.config_path(i)), *self._liftbridge_args],
                    self.log_path(i),
                )
            )
        self._runtime.processes = [self._nats, *self._liftbridge]

    # ------------------------------------------------------------------ faults

    async def kill_node(self, i: int) -> None:
        """SIGKILL Liftbridge node ``i`` (no clean shutdown) and reap it."""
        self._require_started()
        self._liftbridge[i].kill()

    async def stop_node(self, i: int) -> None:
        """SIGTERM Liftbridge node ``i`` and wait for it to exit (SIGKILL after 10 s)."""
        self._require_started()
        await self._liftbridge[i].terminate()

    async def pause_node(self, i: int) -> None:
        """SIGSTOP node ``i``: it keeps its sockets but answers nothing (a hung node).

        Returns once every thread of the node is stopped. The kernel stops each thread
        only when it is next scheduled, and on a busy machine a node went on for several
        milliseconds after the signal: long enough to store and ack a message that a
        test published "after" the pause.
        """
        self._require_started()
        proc = self._liftbridge[i]
        proc.send_signal(signal.SIGSTOP)
        pid = proc.pid if proc.running else None
        if pid is None:
            return
        deadline = time.monotonic() + 5.0
        while running := _running_threads(pid):
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"liftbridge {self.node_ids[i]} still runs 5 s after SIGSTOP "
                    f"(threads {', '.join(running)}): is the machine overloaded?"
                )
            await asyncio.sleep(0.001)

    async def resume_node(self, i: int) -> None:
        """SIGCONT node ``i`` after :meth:`pause_node`."""
        self._require_started()
        self._liftbridge[i].send_signal(signal.SIGCONT)

    def node_pid(self, i: int) -> int | None:
        """Process id of Liftbridge node ``i`` while it runs, else None."""
        proc = self._liftbridge[i]
        return proc.pid if proc.running else None

    def nats_pid(self) -> int | None:
        """Process id of the nats-server while it runs, else None."""
        return self._nats.pid if self._nats is not None and self._nats.running else None

    async def restart_node(self, i: int) -> None:
        """Start node ``i`` again (same id, port and data) and wait until it is back.

        A node that is still running is killed first.
        """
        self._require_started()
        proc = self._liftbridge[i]
        proc.kill()
        proc.start()
        await self.wait_ready()

    async def kill_nats(self) -> None:
        """SIGKILL the nats-server and reap it."""
        self._require_started()
        assert self._nats is not None
        self._nats.kill()

    async def restart_nats(self) -> None:
        """Start the nats-server again on the same port and wait until every running
        Liftbridge node has reconnected (clients reconnect to the same URL)."""
        self._require_started()
        assert self._nats is not None
        self._nats.kill()
        self._nats.start()
        await self._wait_nats_port()
        await self.wait_ready()

    # ------------------------------------------------------------------ readiness

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every running node is usable.

        Usable means: its NATS connections are up, it lists every running node in
        FetchMetadata, and it reaches a live metadata leader (details in
        ``liftbridge_nats.testing._readiness``). Nodes stopped through this object are
        left out. Raises :class:`~liftbridge_nats.ServerStartError` with the
        log tail when a process exits by itself, when NATS is down, or when
        ``timeout`` (default ``start_timeout``) passes.
        """
        self._require_started()
        limit = self.start_timeout if timeout is None else timeout
        await wait_ready(self._probe, limit=limit, logs=self.log_tail, heading="Process logs")

    def _probe(self, rpc_timeout: float) -> str | None:
        self._check_alive()
        return probe(self._readiness_target(rpc_timeout))

    async def _wait_nats_port(self) -> None:
        assert self._nats is not None
        deadline = time.monotonic() + self.start_timeout
        while not await asyncio.to_thread(port_open, self._nats_port):
            self._check_nats_alive()
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"nats-server did not listen on port {self._nats_port} within "
                    f"{self.start_timeout:.0f} s. Process logs:\n{self.log_tail()}"
                )
            await asyncio.sleep(0.05)

    def _check_alive(self) -> None:
        self._check_nats_alive()
        crashed = [p for p in self._liftbridge if p.crashed]
        if crashed:
            how = "; ".join(f"{p.name}: {p.exit_summary()}" for p in crashed)
            raise ServerStartError(
                f"{', '.join(p.name for p in crashed)} exited by itself ({how}; see the "
                "log below; a port taken by another process shows as 'address already in "
                f"use'). Process logs:\n{self.log_tail()}"
            )
        if not any(p.running for p in self._liftbridge):
            raise ServerStartError(
                "no Liftbridge node is running: every node was killed or stopped; "
                "restart_node() brings one back."
            )

    def _check_nats_alive(self) -> None:
        assert self._nats is not None
        if self._nats.crashed:
            raise ServerStartError(
                f"nats-server exited by itself ({self._nats.exit_summary()}; see its log "
                f"below). Process logs:\n{self.log_tail()}"
            )
        if not self._nats.running:
            raise ServerStartError(
                "nats-server is not running: call restart_nats() after kill_nats()."
            )

    def _running_nodes(self) -> list[int]:
        return [i for i, p in enumerate(self._liftbridge) if p.running]

    def _node_nats_url(self) -> str:
        if self._nats_userinfo:
            return f"nats://{self._nats_userinfo}@127.0.0.1:{self._nats_port}"
        return self.nats_url

    def _readiness_target(self, rpc_timeout: float) -> ReadinessTarget:
        tls = None
        if self._grpc_tls is not None:
            tls = GrpcTls(
                root_certificates=self._grpc_tls.ca_cert.read_bytes(),
                private_key=self._grpc_tls.client_key.read_bytes(),
                certificate_chain=self._grpc_tls.client_cert.read_bytes(),
            )
        return ReadinessTarget(
            brokers={self._node_ids[i]: self.brokers[i] for i in self._running_nodes()},
            namespace=self._namespace,
            monitor_url=self.nats_monitor_url,
            cursors_enabled=self._cursors_enabled,
            tls=tls,
            rpc_timeout=rpc_timeout,
        )

    def _require_started(self) -> None:
        if not self._started or self._runtime.workdir is None:
            raise RuntimeError("the LocalCluster is not started (use `async with` or start())")


def _running_threads(pid: int) -> list[str]:
    """The threads of ``pid`` that are not stopped, as ``tid:state`` (empty: all are, or
    there is no procfs to tell: then the signal is all there is)."""
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return []
    running = []
    for task in tasks.iterdir():
        try:
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread exited meanwhile
        state = stat.rsplit(")", 1)[1].split()[0]  # the name in parentheses may hold spaces
        if state not in ("T", "t"):
            running.append(f"{task.name}:{state}")
    return running
