-- 0008_limits: flow control in the claim (docs/backend-contract.md, the gate of jobs_claim).
--
-- A job's limit key (NewJob.key) and its turn in a fair queue (0 in any other queue, from 1 in
-- a fair one: start-time fair queueing, given at insert). A queue's limits sit on its row, a
-- job name's in job_limits; the rate buckets (GCRA, base.Rate) in limit_buckets, one row per
-- bucket started from recently: store_tidy deletes a row once its tat is past, so the table
-- holds the keys active in the last burst window, not every key ever seen.
ALTER TABLE jobs ADD COLUMN limit_key text;
ALTER TABLE jobs ADD COLUMN turn int8 NOT NULL DEFAULT 0;

ALTER TABLE queues
    ADD COLUMN rate_count int4,
    ADD COLUMN rate_per float8,
    ADD COLUMN rate_burst int4,
    ADD COLUMN key_concurrency int4,
    ADD COLUMN key_rate_count int4,
    ADD COLUMN key_rate_per float8,
    ADD COLUMN key_rate_burst int4,
    ADD COLUMN fair bool NOT NULL DEFAULT false,
    -- A fair queue's current round: the highest turn claimed so far (a new key joins it).
    ADD COLUMN turn_round int8 NOT NULL DEFAULT 1;

CREATE TABLE job_limits (
    queue           text NOT NULL,
    name            text NOT NULL,
    rate_count      int4,
    rate_per        float8,
    rate_burst      int4,
    key_concurrency int4,
    key_rate_count  int4,
    key_rate_per    float8,
    key_rate_burst  int4,
    PRIMARY KEY (queue, name)
);

-- job '' is the queue's own scope, key '' no key (names and keys are never empty). A bucket
-- keeps the rate it was last taken under (interval, burst), so the gate reads one row.
CREATE TABLE limit_buckets (
    queue    text   NOT NULL,
    job      text   NOT NULL,
    key      text   NOT NULL,
    tat      float8 NOT NULL,
    interval float8 NOT NULL,
    burst    int4   NOT NULL,
    PRIMARY KEY (queue, job, key)
);

-- The claim's index gains the turn between priority and run_at (0 outside fair queues, so the
-- order there is the one it always was).
DROP INDEX jobs_pending_claim;
CREATE INDEX jobs_pending_claim ON jobs_pending (queue, priority DESC, turn, run_at, id);
-- A key's latest turn in a fair queue (read by an insert there), keyless jobs taking theirs as
-- one more key. Partial: the jobs of other queues (turn 0) never enter it.
CREATE INDEX jobs_pending_turns ON jobs_pending (queue, limit_key, turn) WHERE turn > 0;
-- Running jobs per key (key_concurrency); running jobs are few.
CREATE INDEX jobs_running_keys ON jobs_running (queue, limit_key, name) WHERE limit_key IS NOT NULL;
