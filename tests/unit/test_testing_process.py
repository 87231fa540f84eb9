"""How the test harness tells why a server died, from its log alone: a process's log
file, or a container's output since its last start."""

from __future__ import annotations

import sys
from pathlib import Path

from liftbridge_nats.testing._containers import _unix_time
from liftbridge_nats.testing._process import _START_MARK, ServerProcess, death_line, last_words

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


def test_death_line_takes_the_first_reason_of_one_run() -> None:
    output = (
        b'time="x" level=info msg="Server became metadata leader"\n'
        b"panic: runtime error: invalid memory address or nil pointer dereference\n"
        b"[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0xc789b5]\n\n"
        b"goroutine 84 [running]:\n" + _goroutine_dump(300).encode() + b"exit status 2\n"
    )
    assert death_line(output) == (
        "panic: runtime error: invalid memory address or nil pointer dereference"
    )
    assert death_line(b'time="x" level=info msg="serving"\n') is None
    assert death_line(b"") is None


def test_docker_times_become_unix_times() -> None:
    # 2026-11-28T16:00:00Z is 1,795,881,600 s after the epoch; Docker gives nanoseconds.
    assert _unix_time("2026-11-28T16:00:00Z") == 1_795_881_600
    started = _unix_time("2026-11-28T16:00:00.250000000Z")
    assert started is not None and abs(started - 1_795_881_600.25) < 1e-6
    # A container never started has the zero time; no time, or none Docker would give.
    assert _unix_time("0001-01-01T00:00:00Z") is None
    assert _unix_time(None) is None and _unix_time("") is None
    assert _unix_time("yesterday") is None
