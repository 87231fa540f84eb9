"""How the test harness tells why a server process died, from its log file alone."""

from __future__ import annotations

import sys
from pathlib import Path

from liftbridge_nats.testing._process import _START_MARK, ServerProcess, last_words

_START = _START_MARK.decode() + "liftbridge n1 at Sat Nov 28 12:32:13 2026\n"


def _goroutine_dump(frames: int) -> str:
    return "".join(f"main.f{i}()\n\t/src/server/x.go:{i} +0x1f\n" for i in range(frames))


def test_a_panic_is_found_above_its_goroutine_dump(tmp_path: Path) -> None:
    log = tmp_path / "n1.log"
    log.write_text(
        _START
        + 'time="2026-11-28 12:32:14" level=info msg="Server became metadata leader"\n'
        + "panic: No replicator for partition [subject=__cursors] and replica n2\n\n"
        + "goroutine 57 [running]:\n"
        + _goroutine_dump(500)
    )
    assert last_words(log) == (
        "panic: No replicator for partition [subject=__cursors] and replica n2"
    )


def test_only_the_last_run_counts(tmp_path: Path) -> None:
    log = tmp_path / "n1.log"
    log.write_text(_START + "panic: an earlier run\n" + _START + 'level=info msg="serving"\n')
    assert last_words(log) is None
    log.write_text(log.read_text() + "fatal error: concurrent map writes\n")
    assert last_words(log) == "fatal error: concurrent map writes"


def test_a_logged_fatal_counts_and_long_lines_are_cut(tmp_path: Path) -> None:
    log = tmp_path / "n1.log"
    log.write_text(_START + 'time="x" level=fatal msg="' + "y" * 2000 + '"\n')
    reason = last_words(log)
    assert reason is not None and reason.startswith('time="x" level=fatal msg="yyy')
    assert len(reason) == 503 and reason.endswith("...")


def test_a_missing_log_gives_no_reason(tmp_path: Path) -> None:
    assert last_words(tmp_path / "never-written.log") is None


def test_exit_summary_names_the_status_and_the_reason(tmp_path: Path) -> None:
    script = "import sys; print('panic: it broke', flush=True); sys.exit(2)"
    proc = ServerProcess("fake", [sys.executable, "-c", script], tmp_path / "fake.log")
    assert proc.exit_summary() == ""
    proc.start()
    assert proc._popen is not None
    proc._popen.wait()
    assert proc.exit_summary() == "exit status 2: panic: it broke"

    quiet = ServerProcess(
        "quiet", [sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "q.log"
    )
    quiet.start()
    assert quiet._popen is not None
    quiet._popen.wait()
    assert quiet.exit_summary() == "exit status 3"
