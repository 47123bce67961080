"""The backend's SQL, read once from the package: ``queries/*.sql`` (named blocks, a file per
noun) and the versioned ``migrations/NNNN_name.sql`` files."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from .._sqlfiles import read_migrations, read_queries

_COMMENT = re.compile(r"^\s*--.*$\n?", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Queries:
    """Every statement of ``queries/*.sql``, by name. A block missing from the file, or a block
    no field names, fails at import: a typo cannot wait for the code path that uses it."""

    jobs_insert_lock: str
    jobs_insert: str
    jobs_insert_one: str
    jobs_insert_workflow: str
    jobs_replace: str
    jobs_get: str
    jobs_list: str
    jobs_list_status: str
    jobs_list_workflow: str
    jobs_list_ids: str
    jobs_cancel: str
    jobs_cancel_many: str
    jobs_retry: str
    jobs_resume_lock: str
    jobs_resume: str
    purge_fence: str
    jobs_purge: str
    jobs_claim_lock: str
    jobs_claim: str
    jobs_claim_open: str
    jobs_claim_whole: str
    jobs_claim_capped: str
    jobs_ack: str
    leases_renew: str
    leases_lapsed: str
    leases_reap: str
    queues_configure: str
    queues_list: str
    job_limits_sync: str
    job_limits_list: str
    limits_walk: str
    limit_buckets_list: str
    limit_buckets_forget: str
    vacuum_limit_buckets: str
    queues_names: str
    workers_beat: str
    workers_list: str
    stats_get: str
    jobs_search: str
    jobs_search_end: str
    dead_groups: str
    jobs_retry_many: str
    jobs_purge_ids: str
    jobs_search_status: str
    jobs_search_status_end: str
    jobs_search_key: str
    jobs_search_key_end: str
    throughput_get: str
    throughput_prune: str
    clock_now: str
    autovacuum_setting: str
    tidy_lock: str
    tidy_unlock: str
    tidy_dead: str
    vacuum_jobs_waiting: str
    vacuum_jobs_pending: str
    vacuum_jobs_running: str
    vacuum_job_keys: str
    vacuum_job_counts: str
    vacuum_throughput: str
    vacuum_workers: str
    schedules_sync: str
    schedules_list: str
    schedules_advance: str
    schedules_skip: str
    schedules_pause: str
    schema_create: str
    migrations_lock: str
    migrations_unlock: str
    migrations_table: str
    migrations_applied: str
    migrations_record: str
    current_schema: str
    listen: str
    ping: str
    lend: str
    lent_reset: str
    savepoint: str
    savepoint_release: str
    savepoint_rollback: str
    search_path_save: str
    search_path_set: str
    search_path_restore: str


def load_queries() -> Queries:
    """Read and check ``queries/*.sql``. Comment lines are dropped: psycopg would count a
    ``%(name)s`` inside one as a parameter."""
    blocks = {
        name: _COMMENT.sub("", sql).strip() for name, sql in read_queries(__package__).items()
    }
    expected = {f.name for f in fields(Queries)}
    if set(blocks) != expected:
        missing, extra = sorted(expected - set(blocks)), sorted(set(blocks) - expected)
        raise ValueError(f"queries/*.sql: missing blocks {missing}, unknown blocks {extra}")
    return Queries(**blocks)


Q = load_queries()
MIGRATIONS = read_migrations(__package__)  # (name, sql), oldest first
