"""The README's code runs as pasted, and ``servers env`` points it at a dev cluster.

The README has one Python block, its first example. It is cut out of README.md as it
stands and run in a fresh interpreter against the session cluster, found the two ways
the README gives: the environment variables, and ``eval "$(liftbridge-nats servers
env)"`` for a dev cluster; what it prints is what the README shows after it. The
README's ``$ liftbridge-nats`` lines are checked in test_cli.py, the guides' snippets
in test_docs_examples.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from liftbridge_nats.cli import main
from liftbridge_nats.testing import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).with_name("liftbridge-nats")

pytestmark = pytest.mark.timeout(120)


def readme_section(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(heading + "\n") + len(heading) :]
    return section.split("\n## ", 1)[0]


def first_example() -> str:
    """The one Python block of the README, in its "A first example" section."""
    every = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    blocks = re.findall(r"```python\n(.*?)```", readme_section("## A first example"), re.S)
    assert len(every) == 1 and blocks == every, "the README has one Python block"
    return str(blocks[0])


def test_the_first_example_publishes_with_the_services_call() -> None:
    code = first_example()
    assert 'await pub.publish("orders", b"2 x espresso", ack_policy=AckPolicy.ALL)' in code
    # The README shows the install before the example, on the first screen.
    readme = (ROOT / "README.md").read_text()
    assert readme.index("$ pip install liftbridge-nats") < readme.index("```python")
    assert readme[: readme.index("$ pip install liftbridge-nats")].count("\n") < 40
    assert readme.count("\n") <= 250


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIFTBRIDGE_")}
    env["LIFTBRIDGE_NATS_STATE_FILE"] = "/nonexistent/dev-cluster.json"
    return env


def _shown_output() -> list[str]:
    """The lines the README shows under ``$ python first.py``."""
    console = readme_section("## A first example").split("$ python first.py\n", 1)[1]
    return console.split("\n$ ", 1)[0].splitlines()


def _check_output(out: str) -> None:
    # Other tests may have stored messages in "orders" before: the offset varies, the
    # shape does not.
    shown = _shown_output()
    assert shown == ["stored at offset 0", "0 b'2 x espresso'"]
    match = re.fullmatch(r"stored at offset (\d+)\n\1 b'2 x espresso'\n", out)
    assert match, out


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("readme") / "first.py"
    path.write_text(first_example())
    return path


def test_first_example_runs_with_the_environment_variables(
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


def test_servers_env_points_the_first_example_at_the_dev_cluster(
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
