"""Command line of the suite: ``python -m bench [--quick] [options]``."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from bench import report, runner
from bench.gobuild import ensure_go_peer
from bench.settings import Settings


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="liftbridge-nats benchmark suite: starts its own LocalCluster, "
        "measures our SDK beside the bare pipeline, gufo-liftbridge and go-liftbridge, "
        "and writes RESULTS.md, results.png and results.json.",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="small counts, 1 node, a subset of cases; writes to a temp dir",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="output directory (default: bench/ for a full run, a temp dir for --quick)",
    )
    p.add_argument("--count", type=int, help="messages per publish case")
    p.add_argument("--warmup", type=int, help="warm-up messages before each publish case")
    p.add_argument("--sizes", help="comma-separated value sizes in bytes (default 100,1024)")
    p.add_argument("--subscribe-count", type=int, help="messages read by each subscribe case")
    p.add_argument("--memory-count", type=int, help="publishes in the memory case (0 skips it)")
    p.add_argument("--fanout-count", type=int, help="messages per partition in the fan-out cases")
    p.add_argument(
        "--fanout-partitions", help="comma-separated partition counts of the fan-out cases"
    )
    p.add_argument("--latency-seconds", type=float, help="measured seconds per offered load")
    p.add_argument(
        "--e2e-seconds",
        type=float,
        help="measured seconds per offered load and client in the end-to-end latency cases",
    )
    p.add_argument(
        "--latency-rounds", type=int, help="alternating ours/bare rounds per offered load"
    )
    p.add_argument(
        "--e2e-rounds",
        type=int,
        help="alternating rounds per offered load in the end-to-end latency cases (pooled)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        help="alternating rounds per publish/subscribe configuration (median reported)",
    )
    p.add_argument(
        "--services-rounds",
        type=int,
        help="alternating rounds of the services' patterns, their bare ceilings and Go peer",
    )
    p.add_argument("--nodes", type=int, help="Liftbridge nodes (RF 3 cases need 3)")
    p.add_argument("--uvloop", action="store_true", help="run every Python client on uvloop")
    p.add_argument("--no-go", action="store_true", help="skip the go-liftbridge peer")
    p.add_argument("--no-gufo", action="store_true", help="skip the gufo-liftbridge peer")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark section")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="run only cases whose id contains TEXT (repeatable)",
    )
    p.add_argument(
        "--note",
        default=os.environ.get("LIFTBRIDGE_NATS_BENCH_NOTE", ""),
        help="a note printed in RESULTS.md, e.g. that the machine was shared "
        "(default: $LIFTBRIDGE_NATS_BENCH_NOTE)",
    )
    return p


def settings_from(args: argparse.Namespace) -> Settings:
    """Apply command-line overrides to the full or quick preset."""
    if args.quick:
        out = args.out or Path(tempfile.mkdtemp(prefix="liftbridge-nats-bench-quick-"))
        s = Settings.quick_preset(out)
    else:
        s = Settings.full()
        if args.out:
            s = s.with_(out_dir=args.out)
    changes: dict[str, object] = {}
    if args.count is not None:
        changes["count"] = args.count
    if args.warmup is not None:
        changes["warmup"] = args.warmup
    if args.sizes:
        changes["sizes"] = tuple(int(x) for x in args.sizes.split(","))
    if args.subscribe_count is not None:
        changes["subscribe_count"] = args.subscribe_count
    if args.memory_count is not None:
        changes["memory_count"] = args.memory_count
    if args.fanout_count is not None:
        changes["fanout_count"] = args.fanout_count
    if args.fanout_partitions:
        changes["fanout_partitions"] = tuple(int(x) for x in args.fanout_partitions.split(","))
    if args.latency_seconds is not None:
        changes["latency_seconds"] = args.latency_seconds
    if args.e2e_seconds is not None:
        changes["e2e_seconds"] = args.e2e_seconds
    if args.e2e_rounds is not None:
        changes["e2e_rounds"] = args.e2e_rounds
    if args.latency_rounds is not None:
        changes["latency_rounds"] = args.latency_rounds
    if args.rounds is not None:
        changes["rounds"] = max(1, args.rounds)
    if args.services_rounds is not None:
        changes["services_rounds"] = max(1, args.services_rounds)
    if args.nodes is not None:
        changes["nodes"] = args.nodes
    if args.uvloop:
        changes["uvloop"] = True
        changes["uvloop_compare"] = False  # everything is on uvloop already
    if args.no_go:
        changes["go"] = False
    if args.no_gufo:
        changes["gufo"] = False
    if args.no_spark:
        changes["spark"] = False
    if args.only:
        changes["case_filter"] = tuple(args.only)
    return s.with_(**changes)


def main(argv: list[str] | None = None) -> int:
    """Run the suite; exit status 0 unless the run itself could not happen."""
    args = _parser().parse_args(argv)
    settings = settings_from(args)
    missing: dict[str, str] = {}
    if settings.gufo and importlib.util.find_spec("gufo.liftbridge") is None:
        missing["gufo-liftbridge"] = (
            "not installed (pip install -e '.[bench]' installs it); its cases were skipped"
        )
        settings = settings.with_(gufo=False)
    if settings.uvloop and importlib.util.find_spec("uvloop") is None:
        print("--uvloop needs uvloop installed (pip install -e '.[bench]')", file=sys.stderr)
        return 2
    if settings.uvloop_compare and importlib.util.find_spec("uvloop") is None:
        missing["uvloop"] = "not installed; the uvloop comparison was skipped"
        settings = settings.with_(uvloop_compare=False)
    go_binary: Path | None = None
    go_missing = ""
    if settings.go:
        print("building the Go peer (bench/go) if needed ...", flush=True)
        go_binary, go_missing = ensure_go_peer()
        if go_binary is None:
            print(f"Go peer unavailable: {go_missing}", flush=True)
    record = asyncio.run(runner.run(settings, go_binary, go_missing))
    record["meta"]["note"] = args.note
    record["meta"]["peers_missing"].update(missing)
    report.write(record, settings.out_dir)
    print()
    for t in report.targets(record):
        ratio = "n/a" if t["ratio"] is None else f"{t['ratio']:.2f}x"
        print(f"target: {t['target']}: {ratio} (goal {t['goal']}x) {t['status']}")
    for c in report.ceilings(record):
        print(
            f"context (not a goal): {c['pattern']}: its bare ceiling / ours publish_async "
            f"{report.spread(c['ceiling_vs_publish_async'])}, ours / its bare ceiling "
            f"{report.spread(c['ours_vs_ceiling'])}"
        )
    public_api, _, _ = report.fast_path_ratio(record["cases"])
    if public_api is not None:
        print(f"context (not a goal): ours fast_path=False / fast path: {public_api:.2f}x")
    failed = sum(1 for c in record["cases"] if "error" in c["result"])
    print(
        f"\n{len(record['cases'])} cases, {failed} failed; wrote "
        f"{settings.out_dir / 'RESULTS.md'}, results.png, results.json"
    )
    return 0
