"""What importing the package loads, and where its public names live."""

from __future__ import annotations

import importlib.util
import os
import pickle
import re
import subprocess
import sys
import typing
from pathlib import Path
from types import FunctionType

import pytest

import liftbridge_nats


def test_a_publishing_process_never_loads_grpc() -> None:
    code = (
        "import sys\n"
        "from liftbridge_nats import Ack, AckPolicy, Publisher, PublishRecord, envelope, wire\n"
        "assert 'grpc' not in sys.modules, 'the publisher pulled in grpc'\n"
        "from liftbridge_nats import Client\n"
        "assert 'grpc' in sys.modules and Client.__name__ == 'Client'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# The modules behind the root's names; private since 0.1 (``_publisher``...).
PRIVATE_NOW = [
    "acks",
    "activity",
    "client",
    "consumer",
    "cursors",
    "errors",
    "lag",
    "messages",
    "metadata",
    "partitioning",
    "publisher",
    "subscription",
]
ROOT = Path(__file__).resolve().parents[2]
# The module of each ``from liftbridge_nats... import`` and ``import liftbridge_nats...``.
_IMPORT = re.compile(r"^\s*(?:from|import) (liftbridge_nats[\w.]*)", re.M)


@pytest.mark.parametrize("name", PRIVATE_NOW)
def test_the_implementing_modules_are_private(name: str) -> None:
    assert importlib.util.find_spec(f"liftbridge_nats.{name}") is None
    assert importlib.util.find_spec(f"liftbridge_nats._{name}") is not None


def test_every_public_name_shows_as_the_roots() -> None:
    claimed = 0
    for name in liftbridge_nats.__all__:
        value = getattr(liftbridge_nats, name)
        if isinstance(value, type | FunctionType):
            # A name of a private module shows as the root's; one of a public module
            # (``envelope.Envelope``) keeps its module.
            assert not any(p.startswith("_") for p in value.__module__.split(".")), name
            # Pickles and reprs name the root, and a pickled class comes back itself.
            assert pickle.loads(pickle.dumps(value)) is value, name
            claimed += value.__module__ == "liftbridge_nats"
        if isinstance(value, type):
            # Annotations still resolve though the module they name is the root.
            typing.get_type_hints(value)
    assert claimed > 50
    assert repr(liftbridge_nats.AckPolicy.ALL).startswith("<AckPolicy.ALL")
    assert typing.get_type_hints(liftbridge_nats.Message)["offset"] is int


def test_examples_readme_and_guides_import_public_modules_only() -> None:
    sources = {p.name: p.read_text() for p in sorted((ROOT / "examples").glob("*.py"))}
    sources["README.md"] = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").rglob("*.md")):
        if "_build" not in page.parts:
            sources[str(page.relative_to(ROOT))] = page.read_text()
    assert "docs/publishing.md" in sources
    imports = 0
    for where, text in sources.items():
        for module in _IMPORT.findall(text):
            parts = module.split(".")
            assert not any(p.startswith("_") for p in parts), (where, module)
            assert len(parts) == 1 or parts[1] not in PRIVATE_NOW, (where, module)
            imports += 1
    assert imports > 20


def test_grpc_fork_handlers_are_off_unless_the_application_chose() -> None:
    # Read once when grpc is imported: the package must set it before any import of it.
    code = (
        "import os, sys\n"
        "import liftbridge_nats\n"
        "from liftbridge_nats import Client\n"
        "assert 'grpc' in sys.modules\n"
        "print(os.environ['GRPC_ENABLE_FORK_SUPPORT'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    default = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert default.stdout.strip() == "false", default.stderr
    chosen = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "GRPC_ENABLE_FORK_SUPPORT": "true"},
        capture_output=True,
        text=True,
    )
    assert chosen.stdout.strip() == "true", chosen.stderr
