"""An App whose worker consumes a poison list or stream: each delivery is recorded in
``$JOBYARD_SINK`` (a file ``delivery.<pid>``), then the handler SIGKILLs its own worker process,
as a crash mid-entry would. ``POISON_KIND`` is ``list`` or ``stream``, ``POISON_KEY`` the key,
``POISON_MAX`` the consumer's max_deliveries. Run as
``jobyard worker tests.redis.poison_app:app``."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import jobyard

app = jobyard.App()


@app.job(queue="poison-idle")
def idle() -> None:
    """Gives the worker a queue; never enqueued."""


def _die(value: Any) -> None:
    Path(os.environ["JOBYARD_SINK"], f"delivery.{os.getpid()}").write_text(repr(value))
    os.kill(os.getpid(), signal.SIGKILL)


_cap = int(os.environ["POISON_MAX"])
if os.environ["POISON_KIND"] == "list":
    app.consume_list(os.environ["POISON_KEY"], _die, min_idle=0.3, max_deliveries=_cap, block=0.2)
else:
    app.consume_stream(
        os.environ["POISON_KEY"], _die, group="g", min_idle=0.3, max_deliveries=_cap, block=0.2
    )
