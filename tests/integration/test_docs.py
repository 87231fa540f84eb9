"""``make docs`` builds the API reference without a single warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)


def test_api_reference_builds_without_warnings(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "build_api.py"), "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    pages = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.html")}
    assert {"index.html", "liftbridge_nats.html", "liftbridge_nats/errors.html"} <= pages
    assert not any("/_" in page for page in pages), "a private module was documented"
    errors_page = (tmp_path / "liftbridge_nats" / "errors.html").read_text()
    assert "maybe_stored" in errors_page and "for_grpc_status" in errors_page
