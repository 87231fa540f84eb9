"""``python -m bench.chaos``: one chaos run (see the package documentation).

    python -m bench.chaos --duration 150 --seed 7 --out build/chaos/ci

``--duration`` defaults to ``CHAOS_DURATION`` (else 150 s), ``--seed`` to ``CHAOS_SEED``
(else one drawn from the clock, printed first so that the run can be repeated).
``--check HISTORY`` only checks a history file written by an earlier run; ``--page
bench/CHAOS.md --intro TEXT_FILE --run "TITLE=DIR/summary.json" ...`` writes the page of
several runs' figures. Exit status:
0 every rule held, 1 a rule broke, 2 the run itself failed, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from . import checker, logs, report
from .history import load
from .runner import Options, main_sync
from .schedule import FAULT_KINDS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos", description="A randomized fault run and its check."
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--duration", type=float, default=float(os.environ.get("CHAOS_DURATION", "150"))
    )
    parser.add_argument("--out", type=Path, default=None, help="default: build/chaos/<seed>")
    parser.add_argument("--rate", type=float, default=100.0, help="publishes a second")
    parser.add_argument("--ack-timeout", type=float, default=10.0)
    parser.add_argument(
        "--exclude",
        default="",
        metavar="KIND,...",
        help=f"fault kinds left out of the schedule (of {', '.join(FAULT_KINDS)})",
    )
    parser.add_argument("--check", type=Path, default=None, metavar="HISTORY")
    parser.add_argument("--deadline", type=float, default=15.0, help="with --check")
    parser.add_argument(
        "--page",
        type=Path,
        default=None,
        metavar="MARKDOWN",
        help="write a page of the summaries given with --run TITLE=SUMMARY_JSON",
    )
    parser.add_argument("--run", action="append", default=[], metavar="TITLE=SUMMARY_JSON")
    parser.add_argument("--intro", type=Path, default=None, help="with --page: its opening text")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line."""
    args = _parser().parse_args(argv)
    if args.page is not None:
        runs = []
        for given in args.run:
            title, _, path = given.partition("=")
            runs.append((title, json.loads(Path(path).read_text())))
        intro = args.intro.read_text() if args.intro else ""
        args.page.write_text(report.page(runs, intro=intro))
        return 0
    if args.check is not None:
        history = load(args.check)
        # Node logs kept beside the history: parse them again (a newer parser).
        node_logs = sorted(args.check.parent.glob("node-*.log"))
        stream = "chaos"
        if node_logs:
            history.truncations = [
                t
                for path in node_logs
                for t in logs.truncations(path.stem.removeprefix("node-"), path.read_text(), stream)
            ]
        deadline = float(history.meta.get("deadline", args.deadline))
        roles = logs.role_changes_in(args.check.parent, stream)
        verdict = checker.check(history, deadline=deadline, roles=roles)
        figures = report.summary(history, verdict)
        out = args.check.parent
        (out / "summary.json").write_text(json.dumps(figures, indent=2, default=str) + "\n")
        (out / "summary.md").write_text(report.markdown(figures))
        print(report.markdown(figures))
        return 0 if verdict.ok else 1
    seed = args.seed
    if seed is None:
        env = os.environ.get("CHAOS_SEED")
        seed = int(env) if env else random.Random(time.time_ns()).randrange(1_000_000)
    out = args.out or Path("build") / "chaos" / f"seed-{seed}"
    excluded = {k for k in args.exclude.split(",") if k}
    unknown = excluded - set(FAULT_KINDS)
    if unknown:
        raise SystemExit(f"--exclude: no fault kind {', '.join(sorted(unknown))}")
    options = Options(
        kinds=tuple(k for k in FAULT_KINDS if k not in excluded),
        seed=seed,
        duration=args.duration,
        out=out,
        rate=args.rate,
        ack_timeout=args.ack_timeout,
    )
    return main_sync(options)


if __name__ == "__main__":
    sys.exit(main())
