"""The chaos suites' hook: the partition tests made required where CI says so (the chaos
summary at the end of the session is written by tests/conftest.py, which the controller of a
pytest-xdist run loads too).

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

REQUIRED_ENV = "JOBYARD_REQUIRE_PARTITION"


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
