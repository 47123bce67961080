"""Show the chaos summary lines at the end of the session, whatever the capture mode."""

from __future__ import annotations

import pytest

from tests.chaos.harness import SUMMARY_KEY


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = terminalreporter.config.stash.get(SUMMARY_KEY, [])
    if lines:
        terminalreporter.section("chaos summary")
        for line in lines:
            terminalreporter.write_line(line)
