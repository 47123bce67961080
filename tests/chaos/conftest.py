"""The chaos suites' hooks: the summary lines at the end of the session, whatever the capture
mode, and the partition tests made required where CI says so.

A test marked ``required_where_ci`` (tests/chaos/test_partition.py: fencing under a real
network partition, which needs root and network namespaces) skips, saying why, where it cannot
run, so ``make test`` stays usable by a developer who is not root. With
``JOBYARD_REQUIRE_PARTITION=1`` in the environment (``.ci/run`` sets it) such a skip, from
whichever fixture or check it comes, is a failure instead: a CI that lost root cannot drop
these tests with a green run."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from tests.chaos.harness import SUMMARY_KEY

REQUIRED_ENV = "JOBYARD_REQUIRE_PARTITION"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = terminalreporter.config.stash.get(SUMMARY_KEY, [])
    if lines:
        terminalreporter.section("chaos summary")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    required = (
        os.environ.get(REQUIRED_ENV) == "1"
        and item.get_closest_marker("required_where_ci") is not None
    )
    if required and report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        why = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        report.outcome = "failed"
        report.longrepr = f"{REQUIRED_ENV}=1 requires this test, and it would skip: {why}"
    return report
