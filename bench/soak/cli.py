"""Command line of the soak: ``python -m bench.soak [--duration S] [--rate N] ...``."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

from bench.settings import BENCH_DIR, REPO_DIR
from bench.soak import report, runner
from bench.soak.workload import Load
from liftbridge_nats import AckPolicy


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    p.add_argument("--duration", type=float, default=1800.0, help="seconds (default 1800)")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    p.add_argument(
        "--warmup", type=float, default=0.2, help="share of the run left out of the fits"
    )
    p.add_argument("--rate", type=int, default=2000, help="offered msg/s, all tasks together")
    p.add_argument("--size", type=int, default=100, help="value bytes")
    p.add_argument("--publishers", type=int, default=4, help="publishing tasks")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--ack", choices=["LEADER", "ALL"], default="LEADER")
    p.add_argument("--nodes", type=int, default=1, help="Liftbridge nodes of the cluster")
    p.add_argument(
        "--tracemalloc",
        action="store_true",
        help="trace allocations after warm-up and report the sites that grew (slower)",
    )
    p.add_argument(
        "--out", type=Path, default=BENCH_DIR / "soak", help="directory of soak.json, soak.png"
    )
    p.add_argument(
        "--summary", type=Path, default=BENCH_DIR / "SOAK.md", help="the markdown summary"
    )
    p.add_argument(
        "--note", default="", help="a line added to the summary (say the machine was busy)"
    )
    return p


def _command(argv: list[str]) -> str:
    """The command as run, with output paths inside the repository made relative (the
    summary is committed, the machine's directories are not)."""
    words = ["python", "-m", "bench.soak"]
    for word in argv:
        path = Path(word)
        if path.is_absolute():
            try:
                word = str(path.resolve().relative_to(REPO_DIR))
            except ValueError:
                word = path.name
        words.append(word)
    return " ".join(words)


def _stop(signum: int, frame: object) -> None:
    # SIGTERM (from `timeout`, say) would end the process without clean-up; as an
    # exception it unwinds the run, which stops the LocalCluster's servers.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Run one soak, print a line per interval, write the JSON, chart and summary."""
    args = _parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    if args.duration <= 0 or args.interval <= 0 or args.duration < 2 * args.interval:
        print("the duration must cover at least two intervals", file=sys.stderr)
        return 2
    settings = runner.SoakSettings(
        duration=args.duration,
        interval=args.interval,
        warmup_fraction=args.warmup,
        load=Load(
            rate=args.rate,
            size=args.size,
            publishers=args.publishers,
            partitions=args.partitions,
            ack_policy=AckPolicy[args.ack],
        ),
        nodes=args.nodes,
        tracemalloc=args.tracemalloc,
    )
    print(
        f"soak: {settings.duration:.0f} s at {args.rate:,} msg/s, AckPolicy.{args.ack}, "
        f"process {os.getpid()}",
        flush=True,
    )
    record = asyncio.run(
        runner.run(
            settings,
            echo=lambda line: print(line, flush=True),
            command=_command(argv if argv is not None else sys.argv[1:]),
        )
    )
    if args.note:
        record["meta"]["note"] = args.note
    report.write(record, args.out, args.summary)
    failing = [
        name
        for name, g in record["growth"].items()
        if isinstance(g, dict) and "error" not in g and not g["passed"]
    ]
    print(
        f"summary: {args.summary}  (series over the growth limit: {', '.join(failing) or 'none'})"
    )
    return 0
