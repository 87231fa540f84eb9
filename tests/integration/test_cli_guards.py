"""The command line as a new user meets it: names checked before connecting, hints in
CLI words, counts from interrupted load runs, a real health check in ``servers
status``, ``--partition all`` for cursors, and pause states that are not stale."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import test_cli

from liftbridge_nats import Client
from liftbridge_nats.cli import main
from liftbridge_nats.cli._common import pid_alive

# The CLI tests' in-process runner (a fixture: main(argv) against the session cluster).
cli = test_cli.cli
Run = test_cli.Run
SCRIPT = test_cli.SCRIPT

# What a Python call looks like in a message: name(...) or name=value.
_PYTHON_CALL = re.compile(r"\b[a-z_]+\((\.\.\.|[a-z_]*=|\))|\b[a-z_]+=(True|False|\d)")


def _env(
    nats_url: str | None, brokers: list[str] | None, state_file: Path | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIFTBRIDGE_")}
    env["NO_COLOR"] = "1"
    env["LIFTBRIDGE_NATS_STATE_FILE"] = str(state_file or "/nonexistent/dev-cluster.json")
    if nats_url is not None and brokers is not None:
        env["LIFTBRIDGE_NATS_URL"] = nats_url
        env["LIFTBRIDGE_BROKERS"] = ",".join(brokers)
    return env


def _script(
    *argv: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *argv], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


# ------------------------------------------------------------------ names and hints


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("..", "'.' and '..'"),
        ("a/b", "'/'"),
        ("a b", "whitespace"),
        ("é" * 128, "bytes in UTF-8"),
        ("orders.", "empty part between dots"),
        ("orders.*", "wildcard"),
    ],
)
def test_stream_create_refuses_names_before_connecting(
    capsys: pytest.CaptureFixture[str], name: str, words: str
) -> None:
    # Nothing listens on port 1: a name that got through would fail to connect instead.
    code = main(["stream", "create", name, "--subject", "s", "--brokers", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 1 and words in err and "unavailable" not in err, err
    code = main(["stream", "delete", name, "--brokers", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 1 and words in err, err


def test_max_partitions_is_an_option(cli: Run, unique_name: Callable[[str], str]) -> None:
    name = unique_name("maxp")
    code, _, err = cli("stream", "create", name, "-p", "3", "--max-partitions", "2")
    assert code == 1 and "--max-partitions" in err and not _PYTHON_CALL.search(err), err
    code, out, err = cli("stream", "create", name, "-p", "3", "--max-partitions", "3")
    assert code == 0 and "3 partitions" in out, err
    cli("stream", "delete", name)


def test_error_hints_name_cli_options_not_python_calls(
    cli: Run, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("hints")
    code, _, err = cli("stream", "delete", name)  # NOT_FOUND from the server
    assert code == 1 and "liftbridge-nats stream list" in err, err
    assert not _PYTHON_CALL.search(err), err
    assert cli("stream", "create", name)[0] == 0
    assert cli("stream", "readonly", name)[0] == 0
    code, _, err = cli("publish", name, "v", "--ack-timeout", "1")
    assert code == 1 and "readonly" in err and "stream readonly" in err and "--off" in err, err
    assert not _PYTHON_CALL.search(err), err
    code, _, err = cli("publish", name, "v", "--ack-timeout", "1", "--subject")
    assert code == 1 and "readonly" in err and "--ack-timeout" in err, err
    assert not _PYTHON_CALL.search(err), err
    code, _, err = cli("stream", "create", name, "--retention-max-age", "999999999999d")
    assert code == 2 and "far too long" in err, err
    cli("stream", "delete", name)


# ------------------------------------------------------------------ interrupted runs


def _wait_for_progress(stream: str, cluster: Any, at_least: int) -> None:
    async def newest() -> int:
        async with Client(cluster.brokers) as client:
            return (await client.fetch_partition_metadata(stream, 0)).newest_offset

    deadline = time.monotonic() + 60
    while asyncio.run(newest()) < at_least:
        assert time.monotonic() < deadline, "the load run stored nothing"
        time.sleep(0.2)


def test_interrupted_load_run_reports_its_counts(
    liftbridge_cluster: Any, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("ctrlc")
    env = _env(liftbridge_cluster.nats_url, liftbridge_cluster.brokers)
    assert _script("stream", "create", name, env=env).returncode == 0
    proc = subprocess.Popen(
        [str(SCRIPT), "publish", name, "--count", "50000000", "--size", "10"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_progress(name, liftbridge_cluster, 1000)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    found = re.search(
        r"interrupted: sent ([\d,]+) of 50,000,000: ([\d,]+) acked, ([\d,]+) failed", err
    )
    assert found, err
    sent, acked, failed = (int(g.replace(",", "")) for g in found.groups())
    assert sent >= 1000 and acked >= 1000 and acked + failed <= sent, err
    assert "nothing was sent" not in err
    assert f"{sent} messages" in out  # the throughput line covers what was sent


@pytest.mark.slow
async def test_load_run_that_loses_nats_reports_its_counts(
    unique_name: Callable[[str], str], liftbridge_cluster_factory: Callable[..., Any]
) -> None:
    name = unique_name("natslost")
    # On containers: host networking, as for every test whose nats-py client lives through
    # a NATS kill (docker-proxy accepts and drops its reconnect attempts, which nats-py
    # answers with unclosed transports).
    async with liftbridge_cluster_factory(1, container_network="host") as cluster:
        env = _env(cluster.nats_url, cluster.brokers)
        async with Client(cluster.brokers) as client:
            await client.create_stream(name, name)
        proc = await asyncio.create_subprocess_exec(
            str(SCRIPT), "publish", name, "--count", "50000000", "--size", "10",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            await asyncio.to_thread(_wait_for_progress, name, cluster, 1000)
            await cluster.kill_nats()
            out_b, err_b = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    err = err_b.decode()
    assert proc.returncode == 1, err
    found = re.search(
        r"stopped: .*\. sent ([\d,]+) of 50,000,000: ([\d,]+) acked, ([\d,]+) failed", err
    )
    assert found, err
    sent, acked, failed = (int(g.replace(",", "")) for g in found.groups())
    # The node had stored 1,000 when NATS went, but the acks of the newest of them may have
    # been on the wire: those count as failed (maybe stored), never as lost from the report.
    assert sent >= 1000 and acked > 0 and acked + failed == sent, err
    assert "nothing was sent" not in err and "that message was not sent" in err, err
    assert not _PYTHON_CALL.search(err), err
    assert out_b.decode().startswith(f"{sent} messages")


# ------------------------------------------------------------------ cursors, groups, pauses


def test_cursor_get_reads_every_partition(cli: Run, unique_name: Callable[[str], str]) -> None:
    name = unique_name("cursors-all")
    assert cli("stream", "create", name, "--partitions", "3")[0] == 0
    assert cli("cursor", "set", "reader", name, "7", "--partition", "0")[0] == 0
    assert cli("cursor", "set", "reader", name, "9", "--partition", "2")[0] == 0
    code, out, err = cli("cursor", "get", "reader", name, "--partition", "all", "--json")
    assert code == 0, err
    assert [(d["partition"], d["offset"]) for d in map(json.loads, out.splitlines())] == [
        (0, 7),
        (1, -1),
        (2, 9),
    ]
    code, out, _ = cli("cursor", "get", "reader", name, "--partition", "all")
    assert code == 0 and out.split() == ["PARTITION", "OFFSET", "0", "7", "1", "-1", "2", "9"]
    code, out, _ = cli("cursor", "get", "reader", name, "--partition", "2")
    assert code == 0 and out == "9\n"
    code, out, _ = cli("cursor", "get", "reader", name, "-p", "0,2", "--json")
    assert [json.loads(line)["offset"] for line in out.splitlines()] == [7, 9]


def test_group_describe_explains_group_cursors(cli: Run, unique_name: Callable[[str], str]) -> None:
    group = unique_name("g")
    code, _, err = cli("group", "describe", group)
    assert code == 0 and f"__group:{group}" in err, err
    code, out, _ = cli("group", "describe", group, "--json")
    assert json.loads(out)["cursor_id"] == f"__group:{group}"
    code, out, _ = cli("group", "describe", "--help")
    assert "__group:" in " ".join(out.split())


def _states(cli: Run, name: str) -> tuple[list[str], list[bool]]:
    code, out, err = cli("stream", "describe", name)
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    code, out, err = cli("stream", "describe", name, "--json")
    assert code == 0, err
    return [row[-1] for row in rows], [p["paused"] for p in json.loads(out)["partitions"]]


def test_stream_describe_tells_paused_from_resumed(
    cli: Run, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("pause-state")
    assert cli("stream", "create", name, "--partitions", "2")[0] == 0
    assert _states(cli, name) == (["active", "active"], [False, False])
    assert cli("stream", "pause", name, "--partitions", "0")[0] == 0
    assert _states(cli, name) == (["paused", "active"], [True, False])
    assert cli("stream", "resume", name, "--partitions", "0")[0] == 0
    # The server's metadata still says paused here; the timestamps and the leader do not.
    assert _states(cli, name) == (["resumed", "active"], [False, False])
    assert cli("stream", "pause", name, "--partitions", "0")[0] == 0
    assert _states(cli, name) == (["paused", "active"], [True, False])
    cli("stream", "delete", name)


# ------------------------------------------------------------------ servers status


@pytest.mark.slow
def test_servers_status_names_a_crashed_node_and_dead_nats(tmp_path: Path) -> None:
    state_file = tmp_path / "dev-cluster.json"
    env = _env(None, None, state_file)
    done = _script("servers", "start", "--nodes", "3", "--json", env=env, timeout=200)
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout)
    try:
        assert state["healthy"] is True and state["problems"] == []
        done = _script("servers", "status", env=env)
        assert done.returncode == 0 and "running" in done.stdout, done.stderr

        node = next(p for p in state["processes"] if p["name"] == "n1")
        os.kill(node["pid"], signal.SIGKILL)
        done = _script("servers", "status", env=env)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "unhealthy" in done.stdout
        assert "Liftbridge node n1" in done.stderr and node["log"] in done.stderr

        nats = next(p for p in state["processes"] if p["name"] == "nats-server")
        os.kill(nats["pid"], signal.SIGKILL)
        done = _script("servers", "status", "--json", env=env)
        report = json.loads(done.stdout)
        assert done.returncode == 1 and report["healthy"] is False
        assert {p["problem"].split(" (pid")[0] for p in report["problems"]} == {
            "nats-server",
            "Liftbridge node n1",
        }
        assert {p["log"] for p in report["problems"]} == {node["log"], nats["log"]}
    finally:
        done = _script("servers", "stop", env=env)
    assert done.returncode == 0, done.stderr
    assert not any(pid_alive(p["pid"]) for p in state["processes"])
