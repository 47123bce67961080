"""Closing the store while another thread of this process is inside a call on its connection
(a worker's maintenance finishing its tidy as the App closes) must not crash the interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

RACE = textwrap.dedent(
    """
    import os, sys, threading
    from jobyard.backends.sqlite._connection import Connections
    from jobyard.errors import JobyardError

    for n in range(10):
        conns = Connections(os.path.join(sys.argv[1], f"race{n}.db"))
        conns.get().execute("CREATE TABLE IF NOT EXISTS t (x)")
        busy, closed, seen = threading.Event(), threading.Event(), []

        def tidy() -> None:
            conn = conns.get()
            i = after = 0
            while after < 2000:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                conn.execute("SELECT count(*) FROM t").fetchone()
                i += 1
                if i == 200:
                    busy.set()
                if closed.is_set():
                    after += 1
            try:
                conns.get()
            except JobyardError as exc:
                seen.append(str(exc))

        thread = threading.Thread(target=tidy)
        thread.start()
        assert busy.wait(30)
        conns.close()
        closed.set()
        thread.join(60)
        assert not thread.is_alive()
        assert seen and "is closed" in seen[0], seen
    print("ok")
    """
)


def test_closing_while_another_thread_runs_a_statement_does_not_crash(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", RACE, str(tmp_path)], capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-2000:]}"
    assert done.stdout.strip() == "ok"
