-- 0009_limits: flow control in the claim (docs/backend-contract.md, the gate of jobs_claim).
--
-- A job's limit key (NewJob.key) and its turn in a fair queue (0 in any other queue, from 1 in
-- a fair one: start-time fair queueing, given at insert). A queue's limits sit on its row, a
-- job name's in job_limits; the rate buckets (GCRA, base.Rate) in limit_buckets, one row per
-- bucket started from recently: store_tidy deletes a row once its tat is past, so the table
-- holds the keys active in the last burst window, not every key ever seen.
ALTER TABLE jobs ADD COLUMN limit_key TEXT;
ALTER TABLE jobs ADD COLUMN turn INTEGER NOT NULL DEFAULT 0;

ALTER TABLE queues ADD COLUMN rate_count INTEGER;
ALTER TABLE queues ADD COLUMN rate_per REAL;
ALTER TABLE queues ADD COLUMN rate_burst INTEGER;
ALTER TABLE queues ADD COLUMN key_concurrency INTEGER;
ALTER TABLE queues ADD COLUMN key_rate_count INTEGER;
ALTER TABLE queues ADD COLUMN key_rate_per REAL;
ALTER TABLE queues ADD COLUMN key_rate_burst INTEGER;
ALTER TABLE queues ADD COLUMN fair INTEGER NOT NULL DEFAULT 0;
-- A fair queue's current round: the highest turn claimed so far (a new key joins it).
ALTER TABLE queues ADD COLUMN turn_round INTEGER NOT NULL DEFAULT 1;

CREATE TABLE job_limits (
    queue           TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    rate_count      INTEGER,
    rate_per        REAL,
    rate_burst      INTEGER,
    key_concurrency INTEGER,
    key_rate_count  INTEGER,
    key_rate_per    REAL,
    key_rate_burst  INTEGER,
    PRIMARY KEY (queue, name)
) STRICT, WITHOUT ROWID;

-- job '' is the queue's own scope, key '' no key (names and keys are never empty). A bucket
-- keeps the rate it was last taken under (interval, burst), so the gate reads one row.
CREATE TABLE limit_buckets (
    queue    TEXT NOT NULL,
    job      TEXT NOT NULL,
    key      TEXT NOT NULL,
    tat      REAL NOT NULL,
    interval REAL NOT NULL,
    burst    INTEGER NOT NULL,
    PRIMARY KEY (queue, job, key)
) STRICT, WITHOUT ROWID;

-- The claim's index gains the turn between priority and run_at (0 outside fair queues, so the
-- order there is the one it always was).
DROP INDEX jobs_pending;
CREATE INDEX jobs_pending ON jobs (queue, priority DESC, turn, run_at, id) WHERE status = 'pending';
-- A key's latest turn in a fair queue (read by an insert there), keyless jobs taking theirs as
-- one more key. Partial: the jobs of other queues (turn 0) never enter it.
CREATE INDEX jobs_pending_turns ON jobs (queue, limit_key, turn)
    WHERE status = 'pending' AND turn > 0;
-- Running jobs per key (key_concurrency); running jobs are few.
CREATE INDEX jobs_running_keys ON jobs (queue, limit_key, name)
    WHERE status = 'running' AND limit_key IS NOT NULL;
