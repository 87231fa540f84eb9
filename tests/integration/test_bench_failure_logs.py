"""The benchmark keeps the servers' logs when cases fail, before the cluster's directory
(and its logs) is deleted at the end of the run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from liftbridge_nats.testing import LocalCluster

REPO = Path(__file__).resolve().parents[2]
# bench/ is a top-level package of the repository, not part of the installed SDK.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.cluster import FailureLogs, restart_stopped, stopped_servers  # noqa: E402

pytestmark = pytest.mark.processes_only(
    "the benchmark's cluster is a LocalCluster: its logs are files of local processes"
)


async def test_failed_cases_keep_the_log_tails_once_per_change_of_stopped_servers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "out" / "cluster-logs.txt"
    path.parent.mkdir()
    path.write_text("an earlier run's logs\n")
    async with LocalCluster() as cluster:
        logs = FailureLogs(cluster, path)
        assert not path.exists()  # an earlier run's file does not pass for this run's

        logs.case_failed("LEADER p1-rf1 100 B / ours", "RuntimeError: first")
        first = path.read_text()
        assert "after the failed case LEADER p1-rf1 100 B / ours: RuntimeError: first" in first
        assert "stopped servers: none" in first
        node = cluster.node_ids[0]
        assert f"----- liftbridge {node} [running]" in first
        assert "----- nats-server [running]" in first

        # Nothing changed: the same tails are not written again.
        logs.case_failed("LEADER p1-rf1 100 B / bare", "RuntimeError: second")
        assert path.read_text() == first

        await cluster.kill_node(0)
        assert stopped_servers(cluster) == [node]
        logs.case_failed("ALL p1-rf1 100 B / ours", "RuntimeError: third")
        after = path.read_text()
        assert after.startswith(first)
        added = after[len(first) :]
        assert "after the failed case ALL p1-rf1 100 B / ours: RuntimeError: third" in added
        assert f"stopped servers: {node}" in added
        assert f"----- liftbridge {node} [exited with status" in added

        # Still the same node down: written once for the whole run of failures after it.
        logs.case_failed("ALL p1-rf1 100 B / bare", "RuntimeError: fourth")
        assert path.read_text() == after

        # The run goes on with the node started again.
        assert await restart_stopped(cluster) == [node]
        assert cluster.is_running(0)
        assert stopped_servers(cluster) == []
        assert await restart_stopped(cluster) == []


async def test_a_stopped_nats_server_is_restarted() -> None:
    async with LocalCluster() as cluster:
        await cluster.kill_nats()
        assert stopped_servers(cluster) == ["nats-server"]
        assert await restart_stopped(cluster) == ["nats-server"]
        assert stopped_servers(cluster) == []
        # restart_stopped returned once the node was back on NATS: the cluster serves.
        await cluster.wait_ready(timeout=20)
