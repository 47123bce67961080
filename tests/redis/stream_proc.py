"""A stream consumer in a process of its own, for the test that kills one mid-entry:
``python -m tests.redis.stream_proc URL STREAM GROUP SINK``. Its handler announces each entry by
creating ``SINK/started.<entry>`` and then never returns."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import jobyard


def main() -> None:
    url, stream, group, sink = sys.argv[1:5]

    def handler(fields: Any) -> None:
        (Path(sink) / f"started.{fields['n']}").write_text("x")
        threading.Event().wait()  # stuck until killed

    app = jobyard.App(url)
    consumer = app.consume_stream(stream, handler, group=group, consumer="doomed")
    while True:
        consumer.run_once(block=1.0)


if __name__ == "__main__":
    main()
