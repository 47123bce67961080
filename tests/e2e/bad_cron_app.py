"""An app whose schedule has a bad cron expression: loading it must fail on one line."""

from __future__ import annotations

import jobyard

app = jobyard.App()


@app.job
def ping() -> None:
    """Nothing."""


app.schedule("61 * * * *", ping)
