"""A producer process for the chaos test:
``python -m tests.chaos.producer FIRST COUNT BATCH PAUSE ACKS``.

Enqueues ``chaos_work(n)`` for n in ``[FIRST, FIRST + COUNT)`` with ``enqueue_many``, BATCH calls
at a time, on ``$JOBYARD_URL``, pausing about PAUSE seconds between batches so that enqueueing
spans the run. Around every call it appends a line to the ACKS file, written
with one ``write(2)`` on an O_APPEND descriptor so a SIGKILL never leaves half a line:

    begin <first n> <count>          before enqueue_many
    ack <first n> <json [[n, id], ...]>   after it returned: these jobs are accepted
    error <first n> <message>        it raised (the store was down): the batch is sent again
    done

A batch without its ``ack`` line was never accepted, whatever the store holds of it. Every other
batch is one workflow (``chaos_app.workflow_batch``: a group of two-step chains and a join); its
``ack`` line lists the ``chaos_work`` ids, as a plain batch's does.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from tests.chaos.chaos_app import chaos_join, chaos_work, workflow_batch


def main(argv: list[str]) -> int:
    first, count, batch = (int(a) for a in argv[:3])
    pause = float(argv[3])
    fd = os.open(argv[4], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def say(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    for start in range(first, first + count, batch):
        ns = list(range(start, min(start + batch, first + count)))
        deadline = time.monotonic() + 120.0
        while True:
            say(f"begin {start} {len(ns)}")
            try:
                if (start // batch) % 2:
                    flow = workflow_batch(ns).then(chaos_join.s(start)).enqueue()
                    ids = flow.ids[0:-1:2]
                else:
                    ids = [h.id for h in chaos_work.enqueue_many([((n,), {}) for n in ns])]
            except Exception as exc:  # the store may be restarting: send the batch again
                say(f"error {start} {type(exc).__name__}: {exc}".replace("\n", " "))
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
                continue
            say(f"ack {start} {json.dumps([[n, i] for n, i in zip(ns, ids, strict=True)])}")
            break
        # Pacing, so that enqueueing overlaps the run (load, not correctness).
        time.sleep(random.uniform(0.5 * pause, 1.5 * pause))
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
