"""The README's ContainerCluster example passes as pasted, in an empty folder."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"

pytestmark = pytest.mark.timeout(300)


def _section(heading: str) -> str:
    text = README.read_text()
    section = text[text.index(heading + "\n") + len(heading) :]
    return section[: section.index("\n## ")]


def test_readme_container_example_passes(docker_engine: Any, tmp_path: Path) -> None:
    testing = _section("## Testing your own code")
    ini = re.findall(r"```ini\n(.*?)```", testing, re.S)[0]
    code = re.findall(r"```python\n(.*?)```", testing.split("### In Docker containers")[1], re.S)
    assert len(code) == 1, "the README's container section has one Python block"
    (tmp_path / "pytest.ini").write_text(ini)
    (tmp_path / "test_containers_example.py").write_text(code[0])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-W", "error", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
