"""SparkStandalone: a Spark standalone master and workers as local processes.

Each daemon is a JVM started with ``bin/spark-class`` from the pyspark package (no
separate Spark download) and the machine's Java, listening on 127.0.0.1 on ports the
OS picked, with its log in the cluster's temporary directory. Applications reach it at
:attr:`SparkStandalone.master_url`; their executors run in the workers' processes, so
driver and executors are separate processes, as on a real cluster. Readiness is
checked from outside, through the master's status page (``/json``): the master is
alive and every worker registered.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from types import TracebackType

from liftbridge_nats import ServerStartError
from liftbridge_nats.testing._cluster import _Runtime
from liftbridge_nats.testing._process import ServerProcess, free_ports, tail

__all__ = ["SparkStandalone"]


def _spark_home() -> Path:
    try:
        import pyspark
    except ImportError:  # pragma: no cover - the spark extra is missing
        raise ServerStartError(
            "a Spark standalone cluster needs pyspark: pip install 'liftbridge-nats[spark]'"
        ) from None
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").exists():
        raise ServerStartError(f"pyspark at {home} has no bin/spark-class to start daemons with")
    return home


class SparkStandalone:
    """A Spark standalone cluster: one master and ``workers`` workers, for tests.

    ``cores`` and ``memory`` are what each worker offers to executors (on a small
    machine, one core per worker keeps executors from competing for the same CPU).
    Use it as a context manager::

        with SparkStandalone(workers=2) as cluster:
            spark = SparkSession.builder.master(cluster.master_url).getOrCreate()

    :meth:`add_worker` and :meth:`stop_worker` change the cluster while it runs (a
    benchmark compares one worker with two).
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        cores: int = 1,
        memory: str = "1g",
        daemon_memory: str = "256m",
        start_timeout: float = 120.0,
    ) -> None:
        if workers < 0:
            raise ValueError("workers must be >= 0")
        self._workers_wanted = workers
        self._cores = cores
        self._memory = memory
        self._daemon_memory = daemon_memory
        self.start_timeout = start_timeout
        self._master_port = 0
        self._ui_port = 0
        self._workers: list[ServerProcess] = []
        self._master: ServerProcess | None = None
        self._runtime = _Runtime()
        self._finalizer = weakref.finalize(self, self._runtime.cleanup)

    # ------------------------------------------------------------------ addresses

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:PORT``, the address applications give as their master."""
        if self._master is None:
            raise RuntimeError("the Spark cluster is not started")
        return f"spark://127.0.0.1:{self._master_port}"

    @property
    def workdir(self) -> Path:
        """Temporary directory of logs and the workers' scratch space."""
        if self._runtime.workdir is None:
            raise RuntimeError("the Spark cluster is not started")
        return self._runtime.workdir

    @property
    def worker_count(self) -> int:
        """Workers started and not stopped."""
        return sum(1 for w in self._workers if w.running)

    def pids(self) -> list[int]:
        """Process ids of the running daemons (the master first)."""
        return [p.pid for p in self._runtime.processes if p.running and p.pid is not None]

    def log_tail(self, n: int = 30) -> str:
        """The last ``n`` lines of every daemon's log."""
        parts = []
        for proc in self._runtime.processes:
            state = "running" if proc.running else f"exited ({proc.returncode})"
            parts.append(f"----- {proc.name} [{state}] {proc.log_path}")
            parts.append(tail(proc.log_path, n).rstrip("\n") or "(empty)")
        return "\n".join(parts)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> SparkStandalone:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        home = _spark_home()
        conf_dir = self.workdir / "conf"
        conf_dir.mkdir(exist_ok=True)
        env.update(
            {
                "SPARK_HOME": str(home),
                # An empty configuration directory: nothing from the machine leaks in.
                "SPARK_CONF_DIR": str(conf_dir),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOG_DIR": str(self.workdir / "logs"),
                "SPARK_DAEMON_MEMORY": self._daemon_memory,
                # Executors start Python workers with this interpreter (the one with
                # liftbridge_nats installed) unless the application says otherwise.
                "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
            }
        )
        return env

    def _daemon(self, name: str, args: list[str]) -> ServerProcess:
        argv = [str(_spark_home() / "bin" / "spark-class"), *args]
        proc = ServerProcess(name, argv, self.workdir / "logs" / f"{name}.log", self._env())
        self._runtime.processes.append(proc)
        proc.start()
        return proc

    def start(self) -> SparkStandalone:
        """Start the master and the workers; return once every worker registered."""
        if self._master is not None:
            raise RuntimeError("the Spark cluster is already started")
        self._runtime.workdir = Path(tempfile.mkdtemp(prefix="liftbridge-nats-spark-"))
        self._master_port, self._ui_port = free_ports(2)
        try:
            self._master = self._daemon(
                "spark-master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host", "127.0.0.1",
                    "--port", str(self._master_port),
                    "--webui-port", str(self._ui_port),
                ],
            )  # fmt: skip
            for _ in range(self._workers_wanted):
                self._start_worker()
            self.wait_ready(self._workers_wanted)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_worker(self) -> None:
        index = len(self._workers)
        work = self.workdir / f"worker-{index}"
        work.mkdir()
        worker = self._daemon(
            f"spark-worker-{index}",
            [
                "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1",
                "--cores", str(self._cores),
                "--memory", self._memory,
                "--work-dir", str(work),
                "--webui-port", "0",
                self.master_url,
            ],
        )  # fmt: skip
        self._workers.append(worker)

    def add_worker(self) -> None:
        """Start one more worker and wait until it registered."""
        self._start_worker()
        self.wait_ready(self.worker_count)

    def stop_worker(self, index: int) -> None:
        """Kill worker ``index`` (-1: the newest running one); its executors die with it."""
        running = [w for w in self._workers if w.running]
        worker = running[index] if index < 0 else self._workers[index]
        worker.kill()

    def alive_workers(self) -> int:
        """Workers the master counts as alive (0 while the master does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self._ui_port}/json/", timeout=2) as r:
                status = json.load(r)
        except (OSError, urllib.error.URLError, ValueError):
            return 0
        if status.get("status") != "ALIVE":
            return 0
        return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")

    def wait_ready(self, workers: int) -> None:
        """Wait until the master is alive with ``workers`` registered workers."""
        deadline = time.monotonic() + self.start_timeout
        while self.alive_workers() < workers:
            crashed = [p.name for p in self._runtime.processes if p.crashed]
            if crashed or time.monotonic() > deadline:
                why = f"{', '.join(crashed)} exited" if crashed else "timed out"
                raise ServerStartError(
                    f"the Spark standalone cluster did not get ready ({why}; wanted "
                    f"{workers} worker(s), {self.alive_workers()} alive)\n{self.log_tail()}"
                )
            time.sleep(0.3)

    def stop(self) -> None:
        """Kill every daemon and remove the temporary directory (idempotent)."""
        self._runtime.cleanup()
        self._runtime.processes.clear()
        self._workers.clear()
        self._master = None
