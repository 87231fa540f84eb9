"""``make docs`` builds the API reference without a single warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import liftbridge_nats

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
    assert {"index.html", "liftbridge_nats.html", "liftbridge_nats/wire.html"} <= pages
    assert not any("/_" in page for page in pages), "a private module was documented"
    # The root's page documents every public name, with what the private modules say.
    root = (tmp_path / "liftbridge_nats.html").read_text()
    for name in liftbridge_nats.__all__:
        assert f'<section id="{name}">' in root, name
    assert "maybe_stored" in root and "for_grpc_status" in root
    assert "The stream that stored the message." in root  # a field's docstring, from its source
