"""``make docs`` builds the site without a single warning, and its API reference documents
every public name.

The names are taken from the package, not from the docs: the ``__all__`` of the root and
of every public module (no part of its name starts with ``_``), so a name added later
fails this test until the reference documents it.
"""

from __future__ import annotations

import html
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import FunctionType, ModuleType

import pytest

import liftbridge_nats

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _public_modules() -> list[ModuleType]:
    found = [liftbridge_nats]
    for info in pkgutil.walk_packages(liftbridge_nats.__path__, "liftbridge_nats."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.append(importlib.import_module(info.name))
    return found


def _expected_ids() -> dict[str, str]:
    """The HTML id of each public name -> where it is exported from.

    A class or function is documented under the public module its ``__module__`` names
    (``liftbridge_nats.Publisher``, which claims the root; ``liftbridge_nats.envelope.Envelope``,
    which the root re-exports), anything else under the module that exports it.
    """
    expected = {}
    for module in _public_modules():
        expected[f"module-{module.__name__}"] = module.__name__
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            home = value.__module__ if isinstance(value, type | FunctionType) else None
            if not home or any(part.startswith("_") for part in home.split(".")):
                home = module.__name__
            expected[f"{home}.{name}"] = f"{module.__name__}.{name}"
    return expected


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs")
    # What `make docs` runs, into a folder of its own.
    command = ["-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "docs", str(out)]
    done = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr
    return out


def test_the_reference_documents_every_public_name(site: Path) -> None:
    reference = "".join(p.read_text() for p in sorted((site / "reference").glob("*.html")))
    ids = set(re.findall(r'id="([^"]+)"', reference))
    expected = _expected_ids()
    assert len(expected) > 120
    missing = {where for html_id, where in expected.items() if html_id not in ids}
    assert not missing, f"not in the API reference: {sorted(missing)}"
    # Documented once, as the root's: no page or entry under a private module.
    assert not [i for i in ids if _private_module(i)]


def _private_module(html_id: str) -> bool:
    if html_id.startswith("module-"):
        modules = html_id.removeprefix("module-").split(".")
    else:  # the last part names the object (``__version__``)
        modules = html_id.split(".")[:-1]
    return modules[:1] == ["liftbridge_nats"] and any(part.startswith("_") for part in modules)


def test_the_reference_reads_the_private_modules_sources(site: Path) -> None:
    publishing = (site / "reference" / "publishing.html").read_text()
    # A dataclass field's docstring, from the private module that implements Ack.
    assert "The stream that stored the message." in publishing
    # An enum member's docstring.
    assert "After every replica in the in-sync replica set has it." in publishing
    errors = (site / "reference" / "errors.html").read_text()
    assert "maybe_stored" in errors and "for_grpc_status" in errors
    # A constant of the root, documented where it is implemented.
    client = (site / "reference" / "client.html").read_text()
    assert "that asks for one replica on every broker" in client


def test_every_guide_is_in_the_site(site: Path) -> None:
    guides = {p.stem for p in (ROOT / "docs").glob("*.md")}
    assert {"index", "publishing", "reading", "errors", "testing", "cli"} <= guides
    built = {p.stem for p in site.glob("*.html")}
    assert guides <= built
    # The benchmark chart is copied in, and links to repository files leave the site
    # for the repository.
    assert (site / "_images" / "results.png").is_file()
    benchmarks = (site / "benchmarks.html").read_text()
    assert re.search(r'href="https://github\.com/[^"]+/blob/main/bench/RESULTS\.md"', benchmarks)


def test_the_examples_are_included_from_their_files(site: Path) -> None:
    page = (site / "examples.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    for path in sorted((ROOT / "examples").glob("[!_]*.py")):
        # The whole file, as it is today: its last line too.
        source = path.read_text().strip().splitlines()
        assert source[0] in text and source[-1].strip() in text, path.name
