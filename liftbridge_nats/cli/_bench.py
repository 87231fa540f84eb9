"""``bench``: a quick publish benchmark.

When the project's ``bench`` suite is importable or in the current directory (a source
checkout), ``liftbridge-nats bench`` runs ``python -m bench --quick``: the full comparison
suite, quick settings. Otherwise (or with ``--builtin``) it runs a small built-in
Publisher run: N messages per ack policy to a throwaway stream, pipelined, and prints
throughput and ack latency per policy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from liftbridge_nats import AckPolicy

from ._common import (
    EXIT_ERROR,
    EXIT_OK,
    CliError,
    add_connection_options,
    parse_size,
    positive_int,
)
from ._output import Console, human_bytes, latency_summary, table
from ._publish import add_publish_options, publish_run


def register(commands: Any) -> None:
    """Add the ``bench`` command."""
    bench = commands.add_parser(
        "bench",
        help="quick publish benchmark",
        description="Run `python -m bench --quick` when the project's bench suite is "
        "importable or in the current directory (a source checkout); otherwise (or with "
        "--builtin) publish --count messages of --size bytes per ack policy to a throwaway "
        "stream and print throughput and ack latency.",
    )
    bench.add_argument(
        "--builtin", action="store_true", help="always run the small built-in benchmark"
    )
    bench.add_argument("--count", "-n", type=positive_int, default=20_000, help="default 20000")
    bench.add_argument("--size", type=parse_size, default=100, metavar="BYTES", help="default 100")
    bench.add_argument(
        "--policies",
        default="leader,all,none",
        metavar="LIST",
        help="ack policies to run, in order (default leader,all,none)",
    )
    bench.add_argument(
        "--partitions", type=positive_int, default=1, help="partitions of the stream (default 1)"
    )
    bench.add_argument(
        "--local",
        action="store_true",
        help="start a temporary local cluster for the run instead of connecting",
    )
    bench.add_argument("--json", action="store_true", help="one JSON object per policy")
    bench.add_argument(
        "suite_args",
        nargs=argparse.REMAINDER,
        metavar="-- SUITE-ARGS",
        help="arguments after -- go to python -m bench (e.g. -- --count 300)",
    )
    add_publish_options(bench)
    add_connection_options(bench, nats=True, brokers=True)
    bench.set_defaults(handler=_bench)


def suite_root() -> Path | None:
    """The directory from which ``python -m bench`` (the project's suite) runs, if any.

    The suite is a top-level package of a source checkout, not part of the installed
    SDK: it is found on ``sys.path`` or in the current directory.
    """
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec("bench.__main__")
        if spec is not None and spec.origin:
            return Path(spec.origin).resolve().parent.parent
    here = Path.cwd()
    if (here / "bench" / "__main__.py").is_file():
        return here
    return None


async def _bench(args: argparse.Namespace, console: Console) -> int:
    policies = [p.strip().upper() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in AckPolicy.__members__]
    if unknown or not policies:
        raise CliError(f"unknown ack policy {', '.join(unknown)}: use leader, all, none", 2)
    root = None if args.builtin else suite_root()
    extra = [a for a in args.suite_args if a != "--"]
    if root is None and extra:
        raise CliError("arguments after -- are for the bench suite, which is not here", 2)
    if root is not None:
        argv = [sys.executable, "-m", "bench", "--quick", *extra]
        console.info(
            f"running the bench suite in {root}: {' '.join(argv[1:])} (--builtin: small run)"
        )
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
        done = await asyncio.to_thread(subprocess.run, argv, cwd=root, env=env, check=False)
        return done.returncode
    async with _endpoints(args):
        return await _builtin(args, console, policies)


@contextlib.asynccontextmanager
async def _endpoints(args: argparse.Namespace) -> AsyncIterator[None]:
    """With --local, point ``args`` at a temporary cluster for the duration."""
    if not args.local:
        yield
        return
    from liftbridge_nats.testing import LocalCluster

    async with LocalCluster(1, log_level="warn") as cluster:
        args.nats = cluster.nats_url
        args.brokers = ",".join(cluster.brokers)
        yield


async def _builtin(args: argparse.Namespace, console: Console, policies: list[str]) -> int:
    from ._common import open_client, open_nats

    stream = f"lbn-bench-{uuid.uuid4().hex[:8]}"
    values = [bytes(args.size)]
    rows: list[dict[str, Any]] = []
    status = EXIT_OK
    async with open_nats(args) as nc, open_client(args) as client:
        await client.create_stream(stream, stream, partitions=args.partitions)
        try:
            for policy in policies:
                run_args = argparse.Namespace(
                    stream=stream,
                    partition=None,
                    key=None,
                    header=[],
                    expected_offset=None,
                    ack_policy=policy.lower(),
                    ack_timeout=args.ack_timeout,
                    max_inflight=args.max_inflight,
                    subject=False,
                    quiet=True,
                    json=False,
                )
                run = await publish_run(
                    console, nc, client, run_args, values, args.count, load=True
                )
                elapsed = max(run.elapsed, 1e-9)
                latency = latency_summary(run.latencies) if run.latencies else None
                row = {
                    "ack_policy": policy.lower(),
                    "messages": run.sent,
                    "failed": run.failed,
                    "seconds": round(elapsed, 3),
                    "msg_per_s": round(run.sent / elapsed),
                    "bytes_per_s": round(run.nbytes / elapsed),
                    "p50_ms": round(latency["p50_ms"], 3) if latency else None,
                    "p99_ms": round(latency["p99_ms"], 3) if latency else None,
                }
                rows.append(row)
                if args.json:
                    console.json(row)
                if run.failed:
                    console.error(f"{policy}: {run.failed} messages failed: {run.first_error}")
                    status = EXIT_ERROR
        finally:
            await client.delete_stream(stream)
    if not args.json:
        table(
            console,
            ["ACK POLICY", "MESSAGES", "MSG/S", "THROUGHPUT", "ACK P50", "ACK P99"],
            [
                (
                    r["ack_policy"],
                    r["messages"],
                    f"{r['msg_per_s']:,}",
                    human_bytes(r["bytes_per_s"]) + "/s",
                    f"{r['p50_ms']:.2f} ms" if r["p50_ms"] is not None else "-",
                    f"{r['p99_ms']:.2f} ms" if r["p99_ms"] is not None else "-",
                )
                for r in rows
            ],
        )
        console.info(
            f"{args.size} B values, stream with {args.partitions} partition(s), 1 run each"
        )
    return status
