"""The program of the blocking API's guide (docs/sync.md) runs as the plain script it
is, with no event loop, against the session cluster; its other snippets run with the
other guides' (test_docs_examples.py)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from test_docs_examples import RUN_BY, snippets

from liftbridge_nats import NoSuchStreamError
from liftbridge_nats.sync import Client

PAGE = Path(__file__).resolve().parents[2] / "docs/sync.md"


def test_the_guide_program_runs_without_an_event_loop(liftbridge_cluster: Any) -> None:
    (program,) = [s for s in snippets(PAGE) if s.kind == RUN_BY]
    assert program.note == "tests/integration/test_sync_docs.py"
    env = dict(os.environ)
    env.update(
        LIFTBRIDGE_NATS_URL=liftbridge_cluster.nats_url,
        LIFTBRIDGE_BROKERS=",".join(liftbridge_cluster.brokers),
    )
    with Client(liftbridge_cluster.brokers) as client:
        with contextlib.suppress(NoSuchStreamError):
            client.delete_stream("page-views")  # left by an earlier run
        try:
            done = subprocess.run(
                [sys.executable, "-W", "error", "-c", program.code],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            with contextlib.suppress(NoSuchStreamError):
                client.delete_stream("page-views")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:4] == [
        "stored at offset 0",
        "acked 100",
        "partitions [0, 1]",
        "read 105 views of partition 0",
    ]
    assert re.fullmatch(r"got [1-9]\d* messages", lines[4]), lines
