"""Connections per Python process: reused across tasks and micro-batches, replaced once
closed, closed when the process exits, never shared with a forked child.

Counted on the server's side: nats-server's monitoring endpoint says how many
connections it accepted (``/varz``) and which are open, by name (``/connz``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import Record, create_stream, publish, read_all

from liftbridge_nats.spark._io import CONNECTION_NAME

pytestmark = pytest.mark.spark


def _monitor(cluster: Any, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{cluster.nats_monitor_url}{path}", timeout=5) as r:
        out: dict[str, Any] = json.load(r)
    return out


def _accepted(cluster: Any) -> int:
    """Connections nats-server has accepted since it started."""
    return int(_monitor(cluster, "/varz")["total_connections"])


def _ours_open(cluster: Any) -> int:
    """Open connections that the Spark source opened (by their name)."""
    conns = _monitor(cluster, "/connz?limit=1024")["connections"] or []
    return sum(1 for c in conns if c.get("name") == CONNECTION_NAME)


def test_micro_batches_reuse_one_set_of_connections(
    spark: Any, liftbridge_cluster: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, sink = unique_name("in"), unique_name("out")
    create_stream(liftbridge_cluster, source, 2)
    create_stream(liftbridge_cluster, sink, 2)
    brokers = ",".join(liftbridge_cluster.brokers)
    query = (
        spark.readStream.format("liftbridge")
        .option("brokers", brokers)
        .option("stream", source)
        .option("startingOffsets", "earliest")
        .load()
        .select("value")
        .writeStream.format("liftbridge")
        .option("nats_url", liftbridge_cluster.nats_url)
        .option("brokers", brokers)
        .option("stream", sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    sent: list[bytes] = []

    def through(prefix: str, wait: float = 60.0) -> None:
        """Publish 4 rows to the source and wait until the sink has them."""
        rows = [Record(i % 2, f"{prefix}{i}".encode()) for i in range(4)]
        publish(liftbridge_cluster, source, rows)
        sent.extend(r.value for r in rows)
        deadline = time.monotonic() + wait
        while len(read_all(liftbridge_cluster, sink)) < len(sent):
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "the rows did not reach the sink"
            time.sleep(0.1)

    try:
        # The first micro-batches start the Python workers; each connects once. (A
        # task's read and write take two pooled workers, in either order, so each
        # worker may do both before every one has its connections.)
        for r in range(3):
            # The first starts Python workers: seconds on a busy machine.
            through(f"warm{r}-", 180.0 if r == 0 else 60.0)
        before = _accepted(liftbridge_cluster)
        first = query.lastProgress["batchId"]
        for r in range(3):
            through(f"r{r}-")
        after = _accepted(liftbridge_cluster)
        batches = query.lastProgress["batchId"] - first
        # The connections stay open between micro-batches, for the next ones.
        open_now = _ours_open(liftbridge_cluster)
    finally:
        query.stop()
    assert batches >= 3
    # Connecting per call opened three per micro-batch (a check on the driver, the
    # task's, the commit's).
    assert after - before == 0, f"{after - before} NATS connection(s) opened in {batches} batches"
    assert open_now >= 1
    assert sorted(m.value for m in read_all(liftbridge_cluster, sink)) == sorted(sent)


# A process that uses the source's connections the way a Python worker does, through
# the shared background loop; it reports what the NATS server sees at each step.
_WORKER = textwrap.dedent(
    """
    import atexit, json, os, sys, urllib.request

    nats_url, monitor = sys.argv[1], sys.argv[2]

    def named():
        with urllib.request.urlopen(monitor + "/connz?limit=1024", timeout=5) as r:
            conns = json.load(r)["connections"] or []
        return sum(1 for c in conns if c.get("name") == "liftbridge-nats spark")

    # The server is shared with the session's Spark workers, which keep theirs open:
    # count this process's connections as the change from before it opened any.
    before = named()

    def ours():
        return named() - before

    # Registered first, so it runs last: after the loop's own exit hook, while this
    # process and its sockets are still alive.
    atexit.register(lambda: print("at exit", ours(), flush=True))

    from liftbridge_nats.spark import _connections, _io
    from liftbridge_nats.spark._security import NatsAuth

    servers, auth = (nats_url,), NatsAuth()

    async def publisher():
        return await _connections.publisher(servers, 5.0, auth, ack_timeout=5.0, max_inflight=8)

    async def nc():
        return await _connections.nats(servers, 5.0, auth)

    first = _io.run(publisher())
    assert _io.run(publisher()) is first and _io.run(nc()) is _io.run(nc())
    print("reused", ours(), _connections.opened(), flush=True)

    closed = _io.run(nc())
    _io.run(closed.close())
    again = _io.run(publisher())
    assert again is not first and _io.run(nc()) is not closed
    print("replaced", ours(), _connections.opened(), flush=True)

    pid = os.fork()
    if pid == 0:
        try:
            _io.run(nc())
            print("child", _connections.opened(), flush=True)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    _io.run(again.flush())  # the parent's connection survived the child
    print("parent", ours(), flush=True)
    """
)


def test_connections_are_replaced_kept_from_forks_and_closed_at_exit(
    liftbridge_cluster: Any,
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-c",
            _WORKER,
            liftbridge_cluster.nats_url,
            liftbridge_cluster.nats_monitor_url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # One NATS connection for every use in the process.
    assert lines[0] == "reused 1 {'nats': 1, 'publisher': 1}", done.stdout
    # A closed connection is replaced (and the Publisher on it) on next use.
    assert lines[1] == "replaced 1 {'nats': 2, 'publisher': 2}", done.stdout
    # A forked child opens its own, and the parent's goes on.
    assert lines[2] == "child {'nats': 1}", done.stdout
    assert lines[3] == "parent 1", done.stdout
    # Closed by the process on its way out, before the OS would close the socket.
    assert lines[4] == "at exit 0", done.stdout
