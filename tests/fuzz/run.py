"""Long fuzzing run of the wire decoders (not part of the test suite).

    .venv/bin/python -m tests.fuzz.run --inputs 1000000            # every engine
    .venv/bin/python -m tests.fuzz.run --inputs 1000000 --engine atheris

Engines: ``mutation`` (seeded mutations of valid envelopes plus random bytes),
``hypothesis`` (generated structured and unstructured inputs), ``atheris``
(coverage-guided libFuzzer, in a subprocess, when the package is installed).
``--inputs`` applies to each engine. Exit status 0 means no decoder raised anything
but EnvelopeError; findings are printed and written to ``--out`` (hex, one a line).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._targets import Tally, check, run_mutations, seeds

ENGINES = ("mutation", "hypothesis", "atheris")


def run_hypothesis(count: int, seed: int) -> Tally:
    """Run ``count`` hypothesis examples through every decoder."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    from liftbridge_nats.envelope import MAGIC

    pool = seeds()
    header = st.tuples(
        st.sampled_from((0, 0, 0, 1, 255)),
        st.sampled_from((0, 7, 8, 8, 12, 12, 13, 255)),
        st.integers(0, 255),
        st.integers(0, 20),
    ).map(bytes)
    inputs = st.one_of(
        st.binary(max_size=512),
        st.builds(lambda h, body: MAGIC + h + body, header, st.binary(max_size=256)),
        st.builds(
            lambda s, cut, junk: s[:cut] + junk + s[cut:],
            st.sampled_from(pool),
            st.integers(0, 400),
            st.binary(max_size=16),
        ),
    )
    tally = Tally()

    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(inputs)
    def one(data: bytes) -> None:
        check(data, tally)

    import random

    random.seed(seed)
    one()
    return tally


def run_atheris(count: int, seed: int) -> Tally:
    """Run ``count`` libFuzzer iterations in a subprocess; parse its summary."""
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("atheris: not installed (pip install atheris); skipped", file=sys.stderr)
        return Tally()
    with tempfile.TemporaryDirectory(prefix="lbn-fuzz-corpus-") as tmp:
        corpus = Path(tmp)
        for i, data in enumerate(seeds()):
            (corpus / f"seed-{i}").write_bytes(data)
        return _atheris_subprocess(count, seed, corpus)


def _atheris_subprocess(count: int, seed: int, corpus: Path) -> Tally:
    cmd = [
        sys.executable,
        "-m",
        "tests.fuzz._atheris_main",
        f"-runs={count}",
        f"-seed={seed or 1}",
        "-max_len=1024",
        "-print_final_stats=1",
        # Crash inputs go beside the corpus, not into the working directory.
        f"-artifact_prefix={corpus}/",
        str(corpus),
    ]
    # The entry point is imported as tests.fuzz._atheris_main: run from the repository root.
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=root)
    tally = Tally()
    done = re.search(r"Done (\d+) runs", proc.stderr)
    tally.inputs = int(done.group(1)) if done else 0
    tally.calls = tally.inputs * 3
    if proc.returncode != 0:
        print(proc.stderr[-4000:], file=sys.stderr)
        tally.outcomes["atheris: crashed"] += 1
        from ._targets import Finding

        crashes = sorted(corpus.glob("crash-*"))
        data = crashes[0].read_bytes() if crashes else b""
        tally.findings.append(Finding("atheris", data, f"exit status {proc.returncode}"))
    else:
        tally.outcomes["atheris: clean"] += 1
    return tally


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the engines, print a summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="inputs per engine")
    parser.add_argument("--engine", choices=(*ENGINES, "all"), default="all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("fuzz-findings.txt"))
    args = parser.parse_args(argv)
    engines = ENGINES if args.engine == "all" else (args.engine,)
    runners = {"mutation": run_mutations, "hypothesis": run_hypothesis, "atheris": run_atheris}
    total = Tally()
    for name in engines:
        started = time.monotonic()
        tally = runners[name](args.inputs, args.seed)
        elapsed = time.monotonic() - started
        rate = tally.inputs / elapsed if elapsed else 0.0
        print(
            f"{name:10s} inputs={tally.inputs:>9,d} decoder calls={tally.calls:>9,d} "
            f"findings={len(tally.findings)} time={elapsed:.1f}s ({rate:,.0f} inputs/s)"
        )
        for outcome, n in sorted(tally.outcomes.items()):
            print(f"    {outcome:45s} {n:>9,d}")
        total.merge(tally)
    print(
        f"TOTAL      inputs={total.inputs:,d} decoder calls={total.calls:,d} findings={len(total.findings)}"
    )
    if total.findings:
        with args.out.open("w") as fh:
            for f in total.findings:
                fh.write(f"{f.decoder}\t{f.error}\t{f.data.hex()}\n")
        for f in total.findings[:10]:
            print(f"FINDING {f.decoder}: {f.error} input={f.data.hex()}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
