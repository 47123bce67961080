"""The dead letter's line of each failed job, kept in its hash as it fails (to_finished in
_lib.lua): a job that failed before lines were stored is grouped by its error all the same."""

from __future__ import annotations

from typing import Any

from jobyard.backends.base import DeadGroupsParams
from jobyard.backends.redis.backend import RedisBackend
from jobyard.backends.redis.keys import parse_job_id
from tests.contract.test_search import fail_all


def test_a_job_failed_before_lines_were_stored_is_grouped_by_its_error(
    backend: RedisBackend, raw: Any
) -> None:
    # given failed jobs, one of them without a stored line (failed by an older version)
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\n{}\n'
    ids = fail_all(backend, "q", [tb.format("KeyError: 'x'")] * 2 + ["\t ValueError: é  \r\n"])
    parsed = parse_job_id(ids[0])
    assert parsed is not None
    queue, number = parsed
    assert raw.hget(backend.keys.job(queue, number), "dead_line") == "KeyError: 'x'"
    raw.hdel(backend.keys.job(queue, number), "dead_line")
    # then the dead letter groups it with the others of its line
    got = backend.dead_groups(DeadGroupsParams())
    assert [(g.error_line, g.count) for g in got.groups] == [
        ("KeyError: 'x'", 2),
        ("ValueError: é", 1),
    ]
