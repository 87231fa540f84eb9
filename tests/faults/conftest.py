"""Fault-suite fixtures: ``fault_report`` records one line of figures per test, printed
in the terminal summary (``FAULT <test>: sent=... acked=... raised=... lost=...``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

_STASH = pytest.StashKey[list[str]]()


@pytest.fixture
def fault_report(request: pytest.FixtureRequest) -> Iterator[Callable[[str], None]]:
    """Record one line of figures for the terminal summary."""
    lines = request.config.stash.setdefault(_STASH, [])

    def record(text: str) -> None:
        lines.append(f"FAULT {request.node.name}: {text}")

    yield record


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """Print the figures of every fault test that ran."""
    lines = config.stash.get(_STASH, [])
    if lines:
        terminalreporter.section("fault suite figures")
        for line in lines:
            terminalreporter.write_line(line)
