"""The ``liftbridge-nats`` CLI against real servers: in-process ``main([...])`` for most
commands, the installed console script as a subprocess where exit codes, stdin, signals
and the background dev cluster matter."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from liftbridge_nats.cli import build_parser, main
from liftbridge_nats.cli._common import pid_alive

SCRIPT = Path(sys.executable).with_name("liftbridge-nats")

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(
    liftbridge_cluster: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Run:
    """Run ``main(argv)`` in-process against the session cluster; -> (status, out, err).

    The addresses come from the environment variables the CLI documents, so every call
    also checks that they are honoured. A state file that does not exist keeps a
    developer's own dev cluster out of the tests.
    """
    monkeypatch.setenv("LIFTBRIDGE_NATS_URL", liftbridge_cluster.nats_url)
    monkeypatch.setenv("LIFTBRIDGE_BROKERS", ",".join(liftbridge_cluster.brokers))
    monkeypatch.setenv("LIFTBRIDGE_NATS_STATE_FILE", "/nonexistent/dev-cluster.json")
    monkeypatch.delenv("NO_COLOR", raising=False)

    def run(*argv: str, stdin: bytes | None = None) -> tuple[int, str, str]:
        capsys.readouterr()
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def _env(cluster: Any | None, state_file: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIFTBRIDGE_")}
    env.pop("NO_COLOR", None)
    env["LIFTBRIDGE_NATS_STATE_FILE"] = str(state_file or "/nonexistent/dev-cluster.json")
    if cluster is not None:
        env["LIFTBRIDGE_NATS_URL"] = cluster.nats_url
        env["LIFTBRIDGE_BROKERS"] = ",".join(cluster.brokers)
    return env


def _script(
    *argv: str, env: dict[str, str], stdin: bytes = b"", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *argv],
        input=stdin.decode(),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def _json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# ------------------------------------------------------------------ parser


def _command_paths() -> Iterator[list[str]]:
    def walk(parser: argparse.ArgumentParser, path: list[str]) -> Iterator[list[str]]:
        yield path
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield from walk(child, [*path, name])

    yield from walk(build_parser(), [])


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    paths = list(_command_paths())
    names = {" ".join(p) for p in paths}
    for expected in (
        "servers install",
        "servers start",
        "servers stop",
        "servers status",
        "stream create",
        "stream delete",
        "stream list",
        "stream describe",
        "stream pause",
        "stream resume",
        "stream readonly",
        "publish",
        "subscribe",
        "tail",
        "cursor get",
        "cursor set",
        "group describe",
        "activity",
        "bench",
    ):
        assert expected in names
    for path in paths:
        assert main([*path, "--help"]) == 0, path
        out = capsys.readouterr().out
        assert out.startswith("usage: liftbridge-nats"), path


def test_documented_command_lines_parse() -> None:
    """Every ``$ ... liftbridge-nats ...`` line of the README and of the guides (the CLI's
    own, docs/cli.md, among them) is a valid command line."""
    import shlex

    root = Path(__file__).resolve().parents[2]
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    assert root / "docs/cli.md" in pages
    lines = [
        # `eval "$(liftbridge-nats servers env)"`: the command inside the substitution.
        line.split("liftbridge-nats", 1)[1].split(")", 1)[0]
        if "$(liftbridge-nats " in line
        else line.split("liftbridge-nats", 1)[1]
        for page in pages
        if "_build" not in page.parts
        for line in page.read_text().splitlines()
        if line.startswith("$ ") and "liftbridge-nats " in line
    ]
    assert len(lines) >= 20
    parser = build_parser()
    for line in lines:
        # A drifted line makes argparse exit (SystemExit), which fails the test.
        parser.parse_args(shlex.split(line, comments=True))


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nonsense"],
        ["stream"],
        ["stream", "create"],
        ["stream", "create", "s", "--partitions", "0"],
        ["stream", "create", "s", "--retention-max-age", "soon"],
        ["publish", "s", "--count", "0"],
        ["publish", "s", "v", "--header", "novalue"],
        ["subscribe", "s", "--offset", "1", "--since", "5m"],
        ["servers", "start", "--nodes", "2"],
    ],
)
def test_argument_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "usage:" in capsys.readouterr().err


def test_value_parsers() -> None:
    from datetime import UTC, datetime, timedelta

    from liftbridge_nats.cli._common import parse_duration, parse_size, parse_time

    assert parse_duration("90") == 90.0
    assert parse_duration("250ms") == 0.25
    assert parse_duration("1h30m") == 5400.0
    assert parse_duration("7d") == 7 * 86400.0
    for bad in ("", "soon", "5 m", "-3s", "1h-2m"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_duration(bad)
    assert parse_size("512") == 512
    assert parse_size("1KiB") == 1024
    assert parse_size("10MB") == 10_000_000
    assert parse_size("1.5k") == 1500
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size("lots")
    assert parse_time("2026-01-31T12:00:00Z") == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert parse_time("2026-01-31T12:00:00") == datetime(2026, 1, 31, 12, tzinfo=UTC)
    ago = datetime.now(UTC) - parse_time("10m")
    assert timedelta(minutes=9) < ago < timedelta(minutes=11)


def test_output_helpers() -> None:
    from liftbridge_nats.cli._output import bytes_to_json, hexdump, latency_summary

    assert hexdump(b"hello") == ["  00000000  68 65 6c 6c 6f" + " " * 33 + "  |hello|"]
    assert hexdump(b"") == ["  (empty)"]
    assert len(hexdump(bytes(33))) == 3
    assert bytes_to_json(b"caf\xc3\xa9") == "café"
    assert bytes_to_json(b"\xff") == {"base64": "/w=="}
    assert bytes_to_json(None) is None
    summary = latency_summary([i / 1000 for i in range(1, 101)])  # 1..100 ms
    assert round(summary["p50_ms"]) == 50 and round(summary["p99_ms"]) == 99
    assert round(summary["max_ms"]) == 100


def test_nothing_to_publish_is_a_usage_error(cli: Run) -> None:
    code, _, err = cli("publish", "whatever", stdin=b"")
    assert code == 2 and "nothing to publish" in err
    code, _, err = cli("publish", "whatever", "v", "--size", "10")
    assert code == 2 and "--size" in err


def test_server_error_is_one_line_exit_1(liftbridge_cluster: Any, unique_name: Any) -> None:
    # A short deadline: the client retries an unknown stream (metadata may lag) until it.
    done = _script(
        "stream", "delete", unique_name("missing"), "--timeout", "1", env=_env(liftbridge_cluster)
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: ")
    assert "does not exist" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_unreachable_servers_exit_1() -> None:
    env = _env(None)
    done = _script("stream", "list", "--brokers", "127.0.0.1:1", "--timeout", "1", env=env)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    done = _script("publish", "s", "v", "--subject", "--nats", "nats://127.0.0.1:1", env=env)
    assert done.returncode == 1, done.stderr
    assert "cannot connect to NATS at nats://127.0.0.1:1" in done.stderr
    assert "Traceback" not in done.stderr


# ------------------------------------------------------------------ streams


def test_stream_lifecycle(cli: Run, unique_name: Any) -> None:
    name = unique_name("cli")
    code, out, _ = cli(
        "stream", "create", name,
        "--subject", f"{name}.subj",
        "--partitions", "2",
        "--retention-max-messages", "1000",
        "--retention-max-age", "1h",
        "--segment-max-bytes", "1MiB",
        "--compact", "--occ", "--auto-pause-time", "10m",
    )  # fmt: skip
    assert code == 0 and f"created stream {name}" in out
    code, _, err = cli("stream", "create", name)
    assert code == 1 and "already exists" in err
    assert cli("stream", "create", name, "--if-not-exists")[0] == 0

    code, out, _ = cli("stream", "list", "--json")
    listed = {s["name"]: s for s in _json_lines(out)}
    assert code == 0 and listed[name]["subject"] == f"{name}.subj"
    assert len(listed[name]["partitions"]) == 2
    assert not any(n.startswith("__") for n in listed)
    code, out, _ = cli("stream", "list", "--all", "--json")
    assert "__cursors" in {s["name"] for s in _json_lines(out)}
    code, out, _ = cli("stream", "list")
    assert code == 0 and out.splitlines()[0].split()[:3] == ["NAME", "SUBJECT", "PARTITIONS"]

    code, out, _ = cli("stream", "describe", name)
    assert code == 0 and f"{name}.subj" in out and "PARTITION" in out

    assert cli("stream", "pause", name, "--partitions", "1")[0] == 0
    code, out, _ = cli("stream", "describe", name, "--json")
    parts = json.loads(out)["partitions"]
    assert [p["paused"] for p in parts] == [False, True]

    code, out, _ = cli("stream", "readonly", name, "--partitions", "0")
    assert code == 0 and "readonly" in out
    parts = json.loads(cli("stream", "describe", name, "--json")[1])["partitions"]
    assert [p["readonly"] for p in parts] == [True, False]
    assert cli("stream", "readonly", name, "--off")[0] == 0
    parts = json.loads(cli("stream", "describe", name, "--json")[1])["partitions"]
    assert [p["readonly"] for p in parts] == [False, False]
    assert cli("stream", "resume", name, "--partitions", "1")[0] == 0

    code, out, _ = cli("stream", "delete", name)
    assert code == 0 and f"deleted stream {name}" in out
    code, out, _ = cli("stream", "list", "--json")
    assert name not in {s["name"] for s in _json_lines(out)}


# ------------------------------------------------------------------ publish / read


def test_publish_value_key_headers_then_subscribe(cli: Run, unique_name: Any) -> None:
    name = unique_name("pubsub")
    assert cli("stream", "create", name, "--partitions", "3")[0] == 0
    code, out, _ = cli(
        "publish", name, "hello", "--key", "cust-7", "-H", "trace=abc", "-H", "n=1",
        "--ack-policy", "all", "--json",
    )  # fmt: skip
    assert code == 0, out
    (ack,) = _json_lines(out)
    # The Go clients' key partitioning: CRC-32 (IEEE) of the key modulo the count.
    import zlib

    partition = zlib.crc32(b"cust-7") % 3
    assert ack["stream"] == name and ack["partition"] == partition and ack["offset"] == 0
    assert ack["subject"] == (name if partition == 0 else f"{name}.{partition}")

    code, out, _ = cli("subscribe", name, "-p", str(partition), "-o", "json")
    assert code == 0
    (msg,) = _json_lines(out)
    assert msg["value"] == "hello" and msg["key"] == "cust-7" and msg["offset"] == 0
    assert msg["headers"]["trace"] == "abc" and msg["headers"]["n"] == "1"
    assert msg["partition"] == partition

    code, out, _ = cli("subscribe", name, "-p", str(partition))
    assert (
        code == 0 and "key=cust-7" in out and "trace=abc" in out and out.rstrip().endswith("hello")
    )
    code, out, _ = cli("subscribe", name, "-p", str(partition), "-o", "hex")
    assert code == 0 and "68 65 6c 6c 6f" in out and "|hello|" in out
    code, out, _ = cli("subscribe", name, "-p", str(partition), "-o", "raw")
    assert code == 0 and out == "hello\n"


def test_replicated_stream_on_three_nodes(
    liftbridge_cluster3: Any,
    unique_name: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LIFTBRIDGE_NATS_STATE_FILE", "/nonexistent/dev-cluster.json")
    # Flags instead of the environment; one broker is enough to find the others.
    conn = ["--nats", liftbridge_cluster3.nats_url, "--brokers", liftbridge_cluster3.brokers[2]]

    def run(*argv: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main([*argv, *conn])
        return code, capsys.readouterr().out

    name = unique_name("rf3")
    assert run("stream", "create", name, "--replication-factor", "3", "--min-isr", "2")[0] == 0
    code, out = run("publish", name, "--count", "200", "--ack-policy", "all", "--ack-timeout", "30")
    assert code == 0 and out.startswith("200 messages")
    code, out = run("stream", "describe", name, "--json")
    (partition,) = json.loads(out)["partitions"]
    assert sorted(partition["replicas"]) == ["n0", "n1", "n2"]
    assert partition["leader"] in partition["replicas"] and partition["newest_offset"] == 199
    code, out = run("subscribe", name, "--read-isr-replica", "-o", "raw")
    assert code == 0 and len(out.splitlines()) == 200


def test_publish_lines_from_stdin_and_file(cli: Run, unique_name: Any, tmp_path: Path) -> None:
    name = unique_name("lines")
    assert cli("stream", "create", name)[0] == 0
    code, out, _ = cli("publish", name, "--lines", stdin=b"one\ntwo\nthree\n")
    assert code == 0 and len(out.splitlines()) == 3
    blob = bytes(range(256))
    path = tmp_path / "blob.bin"
    path.write_bytes(blob)
    assert cli("publish", name, "--file", str(path), "-q") == (0, "", "")
    code, out, _ = cli("subscribe", name, "-o", "json")
    msgs = _json_lines(out)
    assert [m["value"] for m in msgs[:3]] == ["one", "two", "three"]
    import base64

    assert base64.b64decode(msgs[3]["value"]["base64"]) == blob
    # --subject publishes to a NATS subject directly (partition 0 = the stream subject).
    assert cli("publish", name, "direct", "--subject")[0] == 0
    code, out, _ = cli("tail", name, "-n", "1", "-o", "raw")
    assert out == "direct\n"


def test_publish_load_run_then_read_everything(cli: Run, unique_name: Any) -> None:
    name = unique_name("load")
    assert cli("stream", "create", name, "--partitions", "2")[0] == 0
    code, out, _ = cli("publish", name, "--count", "3000", "--size", "64", "--ack-policy", "all")
    assert code == 0
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("3000 messages, 187.5 KiB in ")
    assert "msg/s" in summary and "ack latency p50" in summary and "p99" in summary
    code, out, _ = cli("subscribe", name, "--partition", "all", "-o", "raw")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3000 and all(len(v) == 64 for v in lines)
    # Round-robin: both partitions got half.
    code, out, _ = cli("stream", "describe", name, "--json")
    assert [p["newest_offset"] for p in json.loads(out)["partitions"]] == [1499, 1499]


def test_subscribe_positions_and_tail(cli: Run, unique_name: Any) -> None:
    name = unique_name("pos")
    assert cli("stream", "create", name)[0] == 0
    stdin = "".join(f"m{i}\n" for i in range(20)).encode()
    assert cli("publish", name, "--lines", "-q", stdin=stdin)[0] == 0

    def offsets(*argv: str) -> list[int]:
        code, out, _ = cli("subscribe", name, "-o", "json", *argv)
        assert code == 0
        return [m["offset"] for m in _json_lines(out)]

    assert offsets() == list(range(20))
    assert offsets("--offset", "15") == list(range(15, 20))
    assert offsets("--offset", "5", "--to-offset", "7") == [5, 6, 7]
    assert offsets("--latest") == [19]
    assert offsets("--max-messages", "3") == [0, 1, 2]
    assert offsets("--since", "1h") == list(range(20))
    assert offsets("--until", "1h") == []
    code, out, _ = cli("tail", name, "-n", "3", "-o", "raw")
    assert code == 0 and out.split() == ["m17", "m18", "m19"]
    assert cli("tail", name, "-n", "0") == (0, "", "")


def test_subscribe_follow_until_interrupted(liftbridge_cluster: Any, unique_name: Any) -> None:
    name = unique_name("follow")
    env = _env(liftbridge_cluster)
    assert _script("stream", "create", name, env=env).returncode == 0
    proc = subprocess.Popen(
        [str(SCRIPT), "subscribe", name, "--follow", "-o", "raw"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        # Give the subscriber time to reach the (empty) end first, so that --follow
        # is what delivers the message (it would be read from the start either way).
        time.sleep(1.0)
        assert _script("publish", name, "late", env=env).returncode == 0
        assert proc.stdout is not None
        assert proc.stdout.readline() == "late\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    assert "Traceback" not in err


def test_tail_follow_with_max_messages(liftbridge_cluster: Any, unique_name: Any) -> None:
    name = unique_name("tailf")
    env = _env(liftbridge_cluster)
    assert _script("stream", "create", name, env=env).returncode == 0
    assert _script("publish", name, "old", env=env).returncode == 0
    proc = subprocess.Popen(
        [str(SCRIPT), "tail", name, "-f", "-n", "1", "-m", "2", "-o", "raw"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert proc.stdout is not None
        # Only once the old message is out is the new one surely published after it.
        assert proc.stdout.readline() == "old\n"
        assert _script("publish", name, "new", env=env).returncode == 0
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out == "new\n"


# ------------------------------------------------------------------ cursors, groups, activity


def test_cursor_get_set(cli: Run, unique_name: Any) -> None:
    name = unique_name("cur")
    assert cli("stream", "create", name, "--partitions", "2")[0] == 0
    assert cli("cursor", "get", "reader", name) == (0, "-1\n", "")
    code, out, _ = cli("cursor", "set", "reader", name, "41", "--partition", "1")
    assert code == 0 and "41" in out
    assert cli("cursor", "get", "reader", name, "-p", "1")[1] == "41\n"
    code, out, _ = cli("cursor", "get", "reader", name, "-p", "1", "--json")
    assert json.loads(out) == {"cursor_id": "reader", "stream": name, "partition": 1, "offset": 41}


async def test_group_describe_shows_coordinator_and_lag(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    from liftbridge_nats import Client

    name = unique_name("grp")
    group = unique_name("g")
    env = _env(liftbridge_cluster)

    async def script(*argv: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            str(SCRIPT),
            *argv,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        for i in range(5):
            await client.publish_to_stream(name, f"v{i}".encode())
        async with client.consumer(group, [name], assignment_interval=0.5) as consumer:
            seen = 0
            async for msg in consumer:
                seen += 1
                if msg.offset == 2:
                    break
            await consumer.checkpoint()
            code, out, err = await script("group", "describe", group, "--stream", name, "--json")
            assert code == 0, err
            described = json.loads(out)
            assert described["known"] is True
            assert described["coordinator"] in liftbridge_cluster.node_ids
            assert described["epoch"] >= 0
            assert described["partitions"] == [
                {"stream": name, "partition": 0, "committed": 2, "newest": 4, "lag": 2}
            ]
            code, out, _ = await script("group", "describe", group, "-s", name)
            assert code == 0 and "coordinator:" in out and "LAG" in out


def test_activity_lists_stream_operations(cli: Run, unique_name: Any) -> None:
    name = unique_name("act")
    assert cli("stream", "create", name)[0] == 0
    assert cli("stream", "pause", name)[0] == 0
    expected = [("CREATE_STREAM", name), ("PAUSE_STREAM", name)]
    # The metadata leader appends to the activity stream after it answers the RPC, so
    # the newest event may land a moment after `stream pause` returns.
    deadline = time.monotonic() + 10
    while True:
        code, out, _ = cli("activity", "--no-follow", "--json")
        assert code == 0
        ops = [(e["op"], e["stream"]) for e in _json_lines(out) if e["stream"] == name]
        if ops == expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ops == expected
    code, out, _ = cli("activity", "--no-follow", "-m", "1")
    assert code == 0 and len(out.splitlines()) == 1 and "CREATE_STREAM" in out


# ------------------------------------------------------------------ output


def test_colour_only_when_asked_and_never_with_no_color(
    cli: Run, unique_name: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique_name("col")
    assert cli("stream", "create", name)[0] == 0
    # Captured output is not a terminal: no colour by default.
    assert "\x1b[" not in cli("stream", "describe", name)[1]
    assert "\x1b[" in cli("--color", "always", "stream", "describe", name)[1]
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in cli("--color", "always", "stream", "describe", name)[1]
    code, _, err = cli(
        "--color", "always", "stream", "delete", unique_name("nope"), "--timeout", "1"
    )
    assert code == 1 and err.startswith("error: ")


# ------------------------------------------------------------------ bench


def test_bench_builtin(cli: Run) -> None:
    code, out, err = cli(
        "bench",
        "--builtin",
        "--count",
        "500",
        "--size",
        "32",
        "--policies",
        "leader,none",
        "--json",
    )
    assert code == 0, err
    rows = _json_lines(out)
    assert [r["ack_policy"] for r in rows] == ["leader", "none"]
    assert all(r["messages"] == 500 and r["failed"] == 0 and r["msg_per_s"] > 0 for r in rows)
    assert rows[0]["p99_ms"] is not None and rows[1]["p99_ms"] is None
    code, out, _ = cli("stream", "list", "--json")
    assert not any(s["name"].startswith("lbn-bench-") for s in _json_lines(out))


def test_bench_delegates_to_the_suite_in_a_checkout(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    env = _env(None)
    done = subprocess.run(
        [str(SCRIPT), "bench", "--", "--help"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m bench")
    # Elsewhere there is no suite: arguments meant for it are an error.
    done = subprocess.run(
        [str(SCRIPT), "bench", "--", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "not here" in done.stderr


# ------------------------------------------------------------------ dev cluster


@pytest.mark.processes_only("`servers start` runs the dev cluster as local processes")
def test_servers_start_status_stop(tmp_path: Path) -> None:
    state_file = tmp_path / "dev-cluster.json"
    env = _env(None, state_file)
    done = _script("servers", "install", env=env, timeout=1800)
    assert done.returncode == 0, done.stderr
    paths = dict(line.split(":", 1) for line in done.stdout.splitlines())
    assert {k: Path(v.strip()).is_file() for k, v in paths.items()} == {
        "liftbridge": True,
        "nats-server": True,
    }
    done = _script("servers", "status", env=env)
    assert done.returncode == 3 and "no dev cluster" in done.stdout

    done = _script("servers", "start", "--json", env=env, timeout=200)
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout)
    try:
        assert state["running"] is True and state["nodes"] == 1
        assert state["nats_url"].startswith("nats://127.0.0.1:")
        assert json.loads(state_file.read_text())["pid"] == state["pid"]

        done = _script("servers", "start", env=env)
        assert done.returncode == 1 and "already running" in done.stderr

        done = _script("servers", "status", env=env)
        assert done.returncode == 0 and state["nats_url"] in done.stdout
        # Every other command finds the dev cluster through the state file.
        done = _script("stream", "create", "devstream", env=env)
        assert done.returncode == 0, done.stderr
        done = _script("publish", "devstream", "from-dev", "--json", env=env)
        assert done.returncode == 0, done.stderr
        done = _script("subscribe", "devstream", "-o", "raw", env=env)
        assert done.stdout == "from-dev\n"
    finally:
        done = _script("servers", "stop", env=env)
    assert done.returncode == 0, done.stderr
    assert not state_file.exists()
    assert not any(pid_alive(pid) for pid in [state["pid"], *state["server_pids"]])
    done = _script("servers", "status", "--json", env=env)
    assert done.returncode == 3 and json.loads(done.stdout)["running"] is False
