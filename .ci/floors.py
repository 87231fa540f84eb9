"""Print pip constraints that pin every runtime dependency to its declared floor.

Read from pyproject.toml, so that a floor raised or added there is the one CI installs:
each requirement of ``[project] dependencies`` (and of the extras named on the command
line) with a ``>=`` lower bound becomes ``name==floor``. A requirement without a floor
is an error: a floor that is not declared cannot be tested.

    python .ci/floors.py otel msgspec > constraints.txt
    python .ci/floors.py --verify otel msgspec   # in the venv: each is at its floor
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_FLOOR = re.compile(r">=\s*([0-9][^,;\s]*)")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def floors(extras: list[str]) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    pins = []
    for requirement in requirements:
        name = _NAME.match(requirement)
        floor = _FLOOR.search(requirement.split(";")[0])
        if name is None or floor is None:
            raise SystemExit(f"floors: {requirement!r} declares no lower bound")
        marker = requirement.split(";", 1)[1].strip() if ";" in requirement else ""
        pin = f"{name.group(1)}=={floor.group(1)}"
        pins.append(f"{pin}; {marker}" if marker else pin)
    return pins


def verify(pins: list[str]) -> list[str]:
    """What is not installed at its floor in this interpreter (markers that do not apply
    to it are passed over)."""
    # Here, not at the top: the constraints are printed before anything is installed.
    from packaging.markers import Marker
    from packaging.version import Version

    wrong = []
    for pin in pins:
        requirement, _, marker = pin.partition(";")
        if marker and not Marker(marker).evaluate():
            continue
        name, floor = requirement.strip().split("==")
        try:
            found = version(name)
        except PackageNotFoundError:
            wrong.append(f"{name}: not installed, floor {floor}")
            continue
        if Version(found) != Version(floor):
            wrong.append(f"{name}: {found}, floor {floor}")
    return wrong


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--verify"]:
        wrong = verify(floors(args[1:]))
        if wrong:
            raise SystemExit("floors: not at the declared floor: " + "; ".join(wrong))
        python = sys.version.split()[0]
        print(f"floors: every runtime dependency is at its declared floor (Python {python})")
    else:
        print("\n".join(floors(args)))
