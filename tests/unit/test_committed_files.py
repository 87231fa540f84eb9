"""Committed files speak of the project only: no tracker numbers, no development
sessions, no machine paths, no documents that are not in the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Built from pieces so that this file does not match itself.
_FORBIDDEN = {
    "a tracker issue number": re.compile(r"\bissue" + r" ?#\d+", re.IGNORECASE),
    "a development session": re.compile(r"\bsession" + r" \d+\b|end of " + r"session\b"),
    "a machine path": re.compile(r"(?<![\w.])/" + r"work/|/" + r"root/(?!go/pkg)"),
    "a design note outside the repository": re.compile(r"\bDESIGN" + r"\.md\b"),
}
_BINARY_SUFFIXES = {".png", ".sum", ".pyc"}


def _committed_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        listed = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()]
    return [ROOT / name for name in listed if Path(name).suffix not in _BINARY_SUFFIXES]


def test_committed_files_speak_of_the_project_only() -> None:
    found = []
    for path in _committed_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for what, pattern in _FORBIDDEN.items():
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {what} ({match.group(0)!r})")
    assert not found, "\n".join(found)
