"""Long fuzzing run of the decoders of network input (not part of the test suite).

    .venv/bin/python -m tests.fuzz.run --inputs 1000000            # every engine, target
    .venv/bin/python -m tests.fuzz.run --inputs 1000000 --engine atheris --target h2

Targets: ``wire`` (the envelope and wire decoders: a value or EnvelopeError), ``h2``
(our HTTP/2 client's receive side) and ``hpack`` (its HPACK decoder, against the hpack
package); tests/fuzz/_targets.py and tests/fuzz/_h2_targets.py state each contract.
Engines: ``mutation`` (seeded mutations of valid inputs plus random ones),
``hypothesis`` (generated structured and unstructured inputs), ``atheris``
(coverage-guided libFuzzer, in a subprocess, when the package is installed).
``--inputs`` applies to each engine and target. Exit status 0 means no contract was
broken; findings are printed and written to ``--out`` (hex, one a line).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from . import _h2_targets
from ._targets import Tally, check, run_mutations, seeds

ENGINES = ("mutation", "hypothesis", "atheris")
TARGETS = ("wire", "h2", "hpack")


def run_hypothesis(count: int, seed: int, target: str = "wire") -> Tally:
    """Run ``count`` hypothesis examples of ``target``."""
    if target != "wire":
        return _run_hypothesis_on(
            _h2_targets.strategy(target), _h2_targets.TARGETS[target][0], count, seed
        )
    return _run_hypothesis_wire(count, seed)


def _run_hypothesis_wire(count: int, seed: int) -> Tally:
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
    return _run_hypothesis_on(inputs, check, count, seed)


def _run_hypothesis_on(
    inputs: object, checker: Callable[[bytes, Tally], None], count: int, seed: int
) -> Tally:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    assert isinstance(inputs, st.SearchStrategy)
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
        checker(data, tally)

    import random

    random.seed(seed)
    one()
    return tally


def run_atheris(count: int, seed: int, target: str = "wire") -> Tally:
    """Run ``count`` libFuzzer iterations of ``target`` in a subprocess; parse its summary."""
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("atheris: not installed (pip install atheris); skipped", file=sys.stderr)
        return Tally()
    with tempfile.TemporaryDirectory(prefix="lbn-fuzz-corpus-") as tmp:
        corpus = Path(tmp)
        pool = seeds() if target == "wire" else _h2_targets.TARGETS[target][1]()
        for i, data in enumerate(pool):
            (corpus / f"seed-{i}").write_bytes(data)
        return _atheris_subprocess(count, seed, corpus, target)


# libFuzzer's largest input per target: h2 streams need room for several frames.
_MAX_LEN = {"wire": 1024, "h2": 4096, "hpack": 1024}


def _atheris_subprocess(count: int, seed: int, corpus: Path, target: str = "wire") -> Tally:
    cmd = [
        sys.executable,
        "-m",
        "tests.fuzz._atheris_main",
        f"-runs={count}",
        f"-seed={seed or 1}",
        f"-max_len={_MAX_LEN[target]}",
        "-print_final_stats=1",
        # Crash inputs go beside the corpus, not into the working directory.
        f"-artifact_prefix={corpus}/",
        str(corpus),
    ]
    # The entry point is imported as tests.fuzz._atheris_main: run from the repository root.
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "LBN_FUZZ_TARGET": target}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=root, env=env)
    tally = Tally()
    done = re.search(r"Done (\d+) runs", proc.stderr)
    tally.inputs = int(done.group(1)) if done else 0
    # libFuzzer's last coverage line: edges and features reached, inputs kept.
    covered = re.findall(r"cov: (\d+) ft: (\d+) corp: (\d+)", proc.stderr)
    if covered:
        edges, features, corpus_size = covered[-1]
        tally.outcomes[f"atheris {target}: coverage edges"] = int(edges)
        tally.outcomes[f"atheris {target}: coverage features"] = int(features)
        tally.outcomes[f"atheris {target}: corpus inputs"] = int(corpus_size)
    tally.calls = tally.inputs * (3 if target == "wire" else 1)
    if proc.returncode != 0:
        print(proc.stderr[-4000:], file=sys.stderr)
        tally.outcomes["atheris: crashed"] += 1
        from ._targets import Finding

        crashes = sorted(corpus.glob("crash-*"))
        data = crashes[0].read_bytes() if crashes else b""
        tally.findings.append(Finding(f"atheris {target}", data, f"exit status {proc.returncode}"))
    else:
        tally.outcomes[f"atheris {target}: clean"] += 1
    return tally


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the engines, print a summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="inputs per engine")
    parser.add_argument("--engine", choices=(*ENGINES, "all"), default="all")
    parser.add_argument("--target", choices=(*TARGETS, "all"), default="all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("fuzz-findings.txt"))
    args = parser.parse_args(argv)
    engines = ENGINES if args.engine == "all" else (args.engine,)
    targets = TARGETS if args.target == "all" else (args.target,)
    total = Tally()
    for target, name in [(t, e) for t in targets for e in engines]:
        started = time.monotonic()
        if name == "mutation":
            tally = (
                run_mutations(args.inputs, args.seed)
                if target == "wire"
                else _h2_targets.run_mutations(target, args.inputs, args.seed)
            )
        elif name == "hypothesis":
            tally = run_hypothesis(args.inputs, args.seed, target)
        else:
            tally = run_atheris(args.inputs, args.seed, target)
        elapsed = time.monotonic() - started
        rate = tally.inputs / elapsed if elapsed else 0.0
        print(
            f"{target:5s} {name:10s} inputs={tally.inputs:>9,d} decoder calls={tally.calls:>9,d} "
            f"findings={len(tally.findings)} time={elapsed:.1f}s ({rate:,.0f} inputs/s)",
            flush=True,
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
