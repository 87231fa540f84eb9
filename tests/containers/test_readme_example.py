"""The ContainerCluster example of the testing guide (docs/testing.md) passes as pasted,
in an empty folder, with the guide's pytest.ini."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TESTING_GUIDE = Path(__file__).resolve().parents[2] / "docs/testing.md"

pytestmark = pytest.mark.timeout(300)


def _section(heading: str) -> str:
    text = TESTING_GUIDE.read_text()
    section = text[text.index(heading + "\n") + len(heading) :]
    return section.split("\n## ", 1)[0]


def test_guide_container_example_passes(docker_engine: Any, tmp_path: Path) -> None:
    ini = re.findall(r"```ini\n(.*?)```", _section("## The pytest plugin"), re.S)[0]
    code = re.findall(r"```python\n(.*?)```", _section("## In Docker containers"), re.S)
    assert len(code) == 1, "the guide's container section has one Python block"
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
