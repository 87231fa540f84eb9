"""One server process with its output in a log file (never a pipe that can fill up)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct free TCP ports on 127.0.0.1, chosen by the OS."""
    sockets: list[socket.socket] = []
    try:
        # Hold every socket until all are bound so the OS cannot hand out a port twice.
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_open(port: int, timeout: float = 0.5) -> bool:
    """Return whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int) -> str:
    """Return the last ``lines`` lines of a text file ("" if it does not exist)."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            return "".join(deque(fh, maxlen=lines))
    except FileNotFoundError:
        return ""


_START_MARK = b"===== liftbridge-nats: starting "
# How a Go server says why it died: a panic, a runtime fatal error, or a logrus Fatal.
_DEATH_MARKS = (b"panic: ", b"fatal error: ", b"level=fatal ")
_REASON_WINDOW = 1 << 20


def death_line(output: bytes) -> str | None:
    """The first line of one run's ``output`` in which a Go server says why it died
    (a panic, a runtime fatal error, a logged fatal), cut at 500 characters; None if
    there is none.

    A Go panic ends with its goroutine dump, hundreds of lines long, so a log tail
    shows stack frames and not the panic: the reason is this line.
    """
    for line in output.splitlines():
        if any(mark in line for mark in _DEATH_MARKS):
            text = line.decode("utf-8", "replace").strip()
            return text if len(text) <= 500 else text[:500] + "..."
    return None


def last_words(path: Path) -> str | None:
    """The line in which the last run logged to ``path`` says why it died, if any
    (see :func:`death_line`), looked for from the last start mark on, within the
    log's last MiB."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - _REASON_WINDOW))
            data = fh.read()
    except FileNotFoundError:
        return None
    start = data.rfind(_START_MARK)
    return death_line(data[max(start, 0) :])


class ServerProcess:
    """A child process whose stdout and stderr go to ``log_path``.

    ``env`` replaces the environment the child gets (the parent's when None). Every
    method reaps the child it stops, so no zombie is left behind.
    """

    def __init__(
        self, name: str, argv: list[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = None if env is None else dict(env)
        self._popen: subprocess.Popen[bytes] | None = None
        # True from start() until kill()/terminate(): a process that is wanted but not
        # running exited by itself, which readiness checks report as an error.
        self.wanted = False

    @property
    def pid(self) -> int | None:
        """The OS process id of the current (or last) run, if started."""
        return self._popen.pid if self._popen is not None else None

    @property
    def running(self) -> bool:
        """Whether the process is started and has not exited."""
        return self._popen is not None and self._popen.poll() is None

    @property
    def crashed(self) -> bool:
        """Whether the process exited although nobody stopped it."""
        return self.wanted and not self.running

    @property
    def returncode(self) -> int | None:
        """Exit status of the last run, or None while running / never started."""
        return self._popen.poll() if self._popen is not None else None

    def exit_summary(self) -> str:
        """How the last run exited and, when it logged one, why.

        For example ``exit status 2: panic: ...`` or ``signal 9``; "" while running.
        """
        code = self.returncode
        if code is None:
            return ""
        status = f"signal {-code}" if code < 0 else f"exit status {code}"
        reason = last_words(self.log_path)
        return f"{status}: {reason}" if reason else status

    def start(self) -> None:
        """Start the process (appending to its log file)."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self.reap()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(_START_MARK + f"{self.name} at {time.ctime()}\n".encode())
            log.flush()
            # A new session keeps a terminal's Ctrl-C away from the servers: the
            # harness stops them itself, in order.
            self.wanted = True
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env,
            )

    def kill(self) -> None:
        """SIGKILL the process (if running) and reap it."""
        self.wanted = False
        popen = self._popen
        if popen is None:
            return
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                popen.kill()
        popen.wait()

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the running process (no-op when it is not running)."""
        if self._popen is not None and self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(signum)

    def reap(self) -> None:
        """Collect the exit status of an exited process (no-op when running)."""
        if self._popen is not None:
            self._popen.poll()

    async def terminate(self, grace: float = 10.0) -> None:
        """SIGTERM the process, wait up to ``grace`` seconds, then SIGKILL it."""
        self.wanted = False
        popen = self._popen
        if popen is None or popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            popen.terminate()
        deadline = time.monotonic() + grace
        try:
            # Polling: asyncio has no portable child-exit notification for Popen.
            while popen.poll() is None and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        finally:
            self.kill()
