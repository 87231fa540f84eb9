"""Build the Go peer (bench/go, using go-liftbridge) into the per-user cache.

The binary lives outside the repository, beside the cached Liftbridge server, under a
digest of bench/go's files: it is rebuilt when they change, and clones holding different
versions of the peer (and its flags) never run each other's binary. A first build downloads go-liftbridge and its
dependencies through the Go module proxy (seconds when the module cache has them).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from bench.settings import BENCH_DIR
from liftbridge_nats.testing import cache_dir

GO_SOURCE = BENCH_DIR / "go"


def _source_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in GO_SOURCE.iterdir() if p.is_file()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def binary_path() -> Path:
    """Where the Go peer's binary for the current bench/go sources is cached."""
    return cache_dir() / "bench-go" / _source_digest() / "bench-go"


def _stale(binary: Path) -> bool:
    return not binary.exists()


def ensure_go_peer() -> tuple[Path | None, str]:
    """Return (binary, "") when it is built and current, else (None, why not)."""
    binary = binary_path()
    if not _stale(binary):
        return binary, ""
    go = shutil.which("go")
    if go is None:
        return None, "the `go` command is not on PATH, so the Go peer cannot be built"
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # go.sum is committed; -mod=readonly fails loudly rather than editing it.
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -mod=readonly").strip()
    try:
        proc = subprocess.run(
            [go, "build", "-o", str(binary), "."],
            cwd=GO_SOURCE,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, "building the Go peer took more than 10 minutes"
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        return None, f"building the Go peer failed: {tail}"
    return binary, ""


def main() -> int:
    """``python -m bench.gobuild``: build (or confirm) the Go peer, print its path."""
    binary, why = ensure_go_peer()
    if binary is None:
        print(why)
        return 1
    print(binary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
