"""The README's code runs as pasted, and ``servers env`` points it at a dev cluster.

The Quick look is cut out of README.md as it stands and run in a fresh interpreter
against the session cluster, found the two ways the README gives: the environment
variables, and ``eval "$(liftbridge-nats servers env)"`` for a dev cluster. The TLS
testing example runs too, on a cluster of its own.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from liftbridge_nats import Metadata
from liftbridge_nats.cli import main
from liftbridge_nats.testing import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).with_name("liftbridge-nats")

pytestmark = pytest.mark.timeout(120)


def readme_python(heading: str) -> str:
    """The one Python block of the README section under ``heading``."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(heading + "\n") + len(heading) :]
    section = section[: section.index("\n#")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, f"{heading} has one Python block"
    return str(blocks[0])


def quick_look() -> str:
    return readme_python("## Quick look")


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIFTBRIDGE_")}
    env["LIFTBRIDGE_NATS_STATE_FILE"] = "/nonexistent/dev-cluster.json"
    return env


def _check_output(out: str) -> None:
    # KeyPartitioner puts b"cust-7" on partition 1 (CRC-32 of the key mod 3).
    match = re.search(r"^stored in partition 1 at offset (\d+)$", out, re.M)
    assert match, out
    assert f"1 {match.group(1)} b'cust-7' b'2 x espresso'" in out.splitlines(), out


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("readme") / "quicklook.py"
    path.write_text(quick_look())
    return path


def test_quick_look_runs_with_the_environment_variables(
    script: Path, liftbridge_cluster: LocalCluster
) -> None:
    env = _clean_env()
    env["LIFTBRIDGE_NATS_URL"] = liftbridge_cluster.nats_url
    env["LIFTBRIDGE_BROKERS"] = ",".join(liftbridge_cluster.brokers)
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    _check_output(done.stdout)


def _dev_state_file(tmp_path: Path, cluster: LocalCluster) -> Path:
    """A dev-cluster state file, as ``servers start`` writes it, for the session cluster
    (its supervisor pid is this test process, which is alive)."""
    path = tmp_path / "dev-cluster.json"
    state = {
        "pid": os.getpid(),
        "nodes": 1,
        "nats_url": cluster.nats_url,
        "brokers": list(cluster.brokers),
    }
    path.write_text(json.dumps(state))
    return path


def test_servers_env_points_the_quick_look_at_the_dev_cluster(
    script: Path, liftbridge_cluster: LocalCluster, tmp_path: Path
) -> None:
    env = _clean_env()
    env["LIFTBRIDGE_NATS_STATE_FILE"] = str(_dev_state_file(tmp_path, liftbridge_cluster))
    line = (
        f'eval "$({shlex.quote(str(CLI))} servers env)" && '
        f"exec {shlex.quote(sys.executable)} -W error {shlex.quote(str(script))}"
    )
    done = subprocess.run(["sh", "-c", line], env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    _check_output(done.stdout)


def test_servers_env_formats(
    liftbridge_cluster: LocalCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = _dev_state_file(tmp_path, liftbridge_cluster)
    monkeypatch.setenv("LIFTBRIDGE_NATS_STATE_FILE", str(state))
    brokers = ",".join(liftbridge_cluster.brokers)
    expected = {
        "sh": [
            f"export LIFTBRIDGE_NATS_URL={liftbridge_cluster.nats_url}",
            f"export LIFTBRIDGE_BROKERS={brokers}",
        ],
        "fish": [
            f"set -gx LIFTBRIDGE_NATS_URL {liftbridge_cluster.nats_url};",
            f"set -gx LIFTBRIDGE_BROKERS {brokers};",
        ],
        "dotenv": [
            f"LIFTBRIDGE_NATS_URL={liftbridge_cluster.nats_url}",
            f"LIFTBRIDGE_BROKERS={brokers}",
        ],
    }
    for fmt, lines in expected.items():
        capsys.readouterr()
        assert main(["servers", "env", "--format", fmt]) == 0
        out, err = capsys.readouterr()
        assert out.splitlines() == lines and not err


def test_servers_env_without_a_dev_cluster_prints_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LIFTBRIDGE_NATS_STATE_FILE", "/nonexistent/dev-cluster.json")
    assert main(["servers", "env"]) == 3
    out, err = capsys.readouterr()
    assert out == "" and "servers start" in err


@pytest.mark.processes_only(
    "the README's TLS example starts a LocalCluster with certificate files from the host"
)
async def test_the_tls_testing_example_runs(tmp_path: Path) -> None:
    block = readme_python("### Testing a TLS set-up").rstrip()
    assert block.endswith("...")
    # The example leaves the work to the reader ("..."): here, one metadata call.
    body = block[:-3] + "checked.append(await client.fetch_metadata())\n"
    namespace: dict[str, Any] = {}  # what exec() defines: the README's code, untyped
    exec(
        compile(
            "async def run(tmp_path, checked):\n" + textwrap.indent(body, "    "),
            "README.md",
            "exec",
        ),
        namespace,
    )
    checked: list[Metadata] = []
    await namespace["run"](tmp_path, checked)
    assert len(checked) == 1 and len(checked[0].brokers) == 1
