"""The pytest plugin, run as a user runs it: pytester writes a project's tests and runs them in
a fresh pytest session (in this process), where the plugin comes from the pytest11 entry point."""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

PROJECT = """
import jobyard

app = jobyard.App("sqlite:///never-opened.db")  # the project's own App and store


@app.job(queue="emails")
def send_welcome(email: str) -> str:
    return f"welcome {email}"


def signup(email: str) -> None:
    send_welcome.options(delay=60).enqueue(email)
"""


def test_jobyard_app_stands_in_for_the_projects_app(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(myproject=PROJECT)
    pytester.makeini("[pytest]\njobyard_app = myproject:app\n")
    pytester.makepyfile(
        test_signup="""
        import jobyard
        import myproject as shop

        def test_signup(jobyard_app, jobyard_drain, jobyard_enqueued):
            assert jobyard_app is shop.app and jobyard_app.url == "memory://"
            assert isinstance(jobyard_app.clock, jobyard.FrozenClock)
            shop.signup("a@example.com")
            [job] = jobyard_enqueued("send_welcome")
            assert job.args == ("a@example.com",) and job.queue == "emails"
            assert jobyard_drain() == 0  # delayed: not due on a frozen clock
            jobyard_app.clock.advance(60)
            assert jobyard_drain() == 1
            assert jobyard_app.get(job.id).result == "welcome a@example.com"

        def test_each_test_starts_empty(jobyard_enqueued):
            assert jobyard_enqueued() == []

        def test_the_app_is_given_back():
            assert shop.app.url == "sqlite:///never-opened.db"
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_a_marked_test_runs_on_every_configured_store(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(myproject=PROJECT)
    pytester.makeini(
        textwrap.dedent(
            """\
            [pytest]
            jobyard_app = myproject:app
            jobyard_stores =
                memory://
                sqlite:///{tmp_path}/jobs.db
            """
        )
    )
    pytester.makepyfile(
        test_stores="""
        import pytest
        import myproject as shop

        @pytest.mark.jobyard_stores
        def test_signup(jobyard_app, jobyard_drain):
            shop.signup("a@example.com")
            jobyard_app.clock.advance(60)
            assert jobyard_drain() == 1
            print("STORE", jobyard_app.url.split(":")[0])

        def test_unmarked(jobyard_app):
            assert jobyard_app.url == "memory://"
        """
    )
    # The plugin declares its marker: an unknown one would be an error here.
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-v", "-s", "-W", "error::pytest.PytestUnknownMarkWarning"
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_signup?memory:/*", "*test_signup?sqlite:/*"])
    assert {word for line in result.outlines for word in line.split("STORE ")[1:]} == {
        "memory",
        "sqlite",
    }


def test_the_command_line_store_wins_and_a_fixed_store_is_emptied(
    pytester: pytest.Pytester,
) -> None:
    db = pytester.path / "shared.db"
    pytester.makepyfile(
        test_shared="""
        import pytest

        @pytest.mark.jobyard_stores
        def test_one(jobyard_app):
            jobyard_app.enqueue("anything", 1)

        @pytest.mark.jobyard_stores
        def test_two(jobyard_app, jobyard_enqueued):
            assert jobyard_app.url.startswith("sqlite")
            assert jobyard_enqueued() == []  # the job test_one left was cleared
        """
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", f"--jobyard-store=sqlite:///{db}"
    )
    result.assert_outcomes(passed=2)
