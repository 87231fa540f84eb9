"""Run an example script against a running cluster, as a user would."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from liftbridge_nats.testing import LocalCluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def run_example(name: str, cluster: LocalCluster, *args: str, timeout: float = 90) -> str:
    """Run ``examples/<name>`` with the cluster's addresses; return its stdout."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-W",
        "error",
        str(EXAMPLES / name),
        "--brokers",
        ",".join(cluster.brokers),
        "--nats",
        cluster.nats_url,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()
    return out.decode()
