"""The app the CLI end-to-end tests drive: ``tests.e2e.cli_app:app`` on ``$JOBYARD_URL``."""

from __future__ import annotations

import jobyard

app = jobyard.App()
not_an_app = 42


@app.job(queue="mail")
def greet(name: str, punctuation: str = "!") -> str:
    """Say hello."""
    return f"hello {name}{punctuation}"


@app.job(queue="mail", max_attempts=1)
def explode(reason: str) -> None:
    """Always fail, so a job reaches the dead letter on its first attempt."""
    raise RuntimeError(f"kaboom: {reason}")


@app.job(queue="reports")
def report(month: str) -> dict[str, str]:
    """A job on a second queue."""
    return {"month": month}


app.schedule("0 9 * * 1-5", report, ["daily"], name="daily-report")
