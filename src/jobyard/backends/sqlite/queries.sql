-- Every statement of the SQLite backend, as named blocks that backend.py loads once.
--
-- "now" is always coalesce(:now, <SQLite's clock in epoch seconds>): :now is the App's Clock,
-- NULL unless a test froze it. SQLite 3.40 has no unixepoch('subsec'), hence julianday.
-- Statements that are part of a longer write transaction receive the instant the transaction
-- resolved once (clock_now), so one transaction sees one "now".
--
-- The literal status = 'pending' / 'running' in WHERE clauses is deliberate: SQLite uses a
-- partial index only when the query's WHERE repeats the index's condition literally, and a
-- bound parameter does not count.

-- name: clock_now
SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)

-- name: data_version
PRAGMA data_version

-- name: wal_checkpoint
-- From maintenance (store_tidy): copy the WAL into the database without waiting for anyone;
-- returns (busy, frames in the WAL, frames checkpointed).
PRAGMA wal_checkpoint(PASSIVE)

-- name: wal_restart
-- A WAL that readers kept from being reused has grown: checkpoint it all and make the next
-- writer start it over (waits for readers, writers included, up to the busy timeout).
PRAGMA wal_checkpoint(RESTART)

-- name: busy_timeout_short
PRAGMA busy_timeout = 100

-- name: busy_timeout_default
PRAGMA busy_timeout = 10000


-- schema --------------------------------------------------------------------------------------

-- name: migrations_init
CREATE TABLE IF NOT EXISTS jobyard_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at REAL    NOT NULL
) STRICT

-- name: migrations_table
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobyard_migrations'

-- name: migrations_applied
SELECT version FROM jobyard_migrations ORDER BY version

-- name: migrations_record
INSERT INTO jobyard_migrations (version, name, applied_at)
VALUES (:version, :name, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0))


-- producer side ---------------------------------------------------------------------------------

-- name: jobs_insert
-- One job. A key held by a pending or running job of the queue hits the partial unique index
-- jobs_idempotency and inserts nothing (no row returned): the caller then looks up the holder.
-- The queue's defaults are read only when the job sets none (coalesce stops at the first
-- non-NULL argument). A workflow step that runs after others is inserted 'waiting' with
-- waits = fanin (its inputs are new jobs of the same batch); fanout counts the batch's jobs that
-- run after this one (0007_workflows.sql), and they all hold it (holds, 0008_workflow_holds.sql).
INSERT INTO jobs (
    queue, name, status, priority, attempts, max_attempts, backoff, timeout, lease, delivery,
    run_at, created_at, idempotency_key, parent_id, workflow_id, fanin, fanout, waits, holds,
    limit_key, turn, payload
)
VALUES (
    :queue, :name, CASE WHEN :fanin > 0 THEN 'waiting' ELSE 'pending' END, :priority, 0,
    coalesce(:max_attempts, (SELECT q.max_attempts FROM queues AS q WHERE q.name = :queue),
             :default_max_attempts),
    coalesce(:backoff, (SELECT q.backoff FROM queues AS q WHERE q.name = :queue)),
    :timeout, :lease, :delivery,
    coalesce(:run_at, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) + :delay),
    coalesce(:now, (julianday('now') - 2440587.5) * 86400.0),
    :idempotency_key, :parent_id, :workflow_id, :fanin, :fanout, :fanin, :fanout, :key,
    -- A fair queue's turn (start-time fair queueing): one after the key's latest pending job,
    -- never before the queue's current turn r (turn_round: the highest turn claimed); keyless
    -- jobs take theirs as one more key. The claim goes by rounds of 4 turns (0013).
    -- Only a pending turn >= r can matter (max(p + 1, r) = r for any p < r), so the key's
    -- entries in jobs_turns (every status, turn <> 0: 0011_turns_index.sql) are walked down
    -- from its highest turn to r at most: its backlog's latest job, as a rule the first one
    -- read, or the few claimed at turn r.
    CASE WHEN (SELECT q.fair FROM queues AS q WHERE q.name = :queue) = 1 THEN coalesce(
        CASE WHEN :key IS NULL
            THEN (SELECT t.turn + 1 FROM jobs AS t INDEXED BY jobs_turns
                  WHERE t.queue = :queue AND t.limit_key IS NULL AND t.turn <> 0
                    AND t.turn >= (SELECT q.turn_round FROM queues AS q WHERE q.name = :queue)
                    AND t.status = 'pending'
                  ORDER BY t.turn DESC LIMIT 1)
            ELSE (SELECT t.turn + 1 FROM jobs AS t INDEXED BY jobs_turns
                  WHERE t.queue = :queue AND t.limit_key = :key AND t.turn <> 0
                    AND t.turn >= (SELECT q.turn_round FROM queues AS q WHERE q.name = :queue)
                    AND t.status = 'pending'
                  ORDER BY t.turn DESC LIMIT 1)
        END,
        (SELECT q.turn_round FROM queues AS q WHERE q.name = :queue))
    ELSE 0 END,
    :payload
)
ON CONFLICT (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running')
    DO NOTHING
RETURNING id

-- name: job_links_insert
-- A waiting step's inputs (:inputs, a JSON array of ids, in depends_on order), one row each.
INSERT INTO job_links (job_id, position, input_id)
SELECT :job_id, key, value FROM json_each(:inputs)

-- name: jobs_holder
-- The pending or running job holding an idempotency key (reads the unique partial index).
SELECT id FROM jobs
WHERE queue = :queue AND idempotency_key = :idempotency_key AND status IN ('pending', 'running')

-- name: jobs_replace
-- on_conflict='replace': the pending job holding a key takes the new job's payload, and its
-- run_at when the new job sets one (:moved). A running holder is left as it is (no row).
UPDATE jobs
SET payload = :payload,
    run_at = CASE WHEN :moved
                  THEN coalesce(:run_at,
                                coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) + :delay)
                  ELSE run_at END
WHERE id = :id AND status = 'pending'
RETURNING id

-- name: queues_over_max_pending
-- The queue's max_pending if its waiting and pending jobs (counted inside the insert's write
-- transaction, so after this batch) exceed it; no row otherwise, and no count at all without a
-- max_pending. Waiting workflow steps count: they will run in this queue.
SELECT q.max_pending FROM queues AS q
WHERE q.name = :queue
  AND q.max_pending IS NOT NULL
  AND (SELECT count(*) FROM jobs AS j
       WHERE j.queue = :queue AND j.status IN ('waiting', 'pending'))
      > q.max_pending

-- name: _job_record
-- The columns of a job record (the fragment every statement returning records uses). Wide
-- text columns come back as BLOB so that bytes that are not UTF-8 (a corrupt row) reach Python
-- undecoded instead of raising inside sqlite3; the backend decodes them leniently. depends_on
-- and dependents come from job_links as JSON arrays, read only for a job that has links.
id, name, queue, CAST(payload AS BLOB), status, priority, attempts, max_attempts,
       run_at, created_at, started_at, finished_at, worker_id, CAST(result AS BLOB),
       CAST(error AS BLOB), parent_id, idempotency_key, delivery, cancel_requested_at,
       CAST(cancelled_by AS BLOB), progress, CAST(progress_note AS BLOB), workflow_id,
       CASE WHEN fanin > 0 THEN (
           SELECT json_group_array(input_id) FROM (
               SELECT l.input_id FROM job_links AS l WHERE l.job_id = jobs.id ORDER BY l.position
           )
       ) END,
       CASE WHEN fanout > 0 THEN (
           SELECT json_group_array(job_id) FROM (
               SELECT l.job_id FROM job_links AS l WHERE l.input_id = jobs.id ORDER BY l.job_id
           )
       ) END,
       limit_key

-- name: jobs_get
SELECT {{_job_record}}
FROM jobs WHERE id = :id

-- name: jobs_list
-- Newest first. Walking the primary key backwards and filtering stops after limit + offset
-- matches, which beats sorting an index range for the dashboard's small pages.
SELECT {{_job_record}}
FROM jobs
WHERE (:queue IS NULL OR queue = :queue)
  AND (:status IS NULL OR status = :status)
  AND (:name IS NULL OR name = :name)
ORDER BY id DESC
LIMIT :limit OFFSET :offset

-- name: jobs_search
-- A page by cursor (JobsSearchParams): the walk is the newest :scan jobs below the cursor by
-- primary key, whatever they are (so a page costs at most :scan rows, however rare its
-- matches); the filters apply within it. The walk is a co-routine (a subquery with a LIMIT
-- under a WHERE is never flattened nor materialized), so a page that fills up stops reading
-- there; its order is the walk's. Returns the hits' ids, newest first.
SELECT id FROM (
    SELECT id, queue, status, name, idempotency_key, payload, error FROM jobs
    WHERE id < :before
    ORDER BY id DESC
    LIMIT :scan
)
WHERE 1
      AND (:queue IS NULL OR queue = :queue)
      AND (:status IS NULL OR status = :status)
      AND (:name IS NULL OR name = :name)
      AND (:key IS NULL OR idempotency_key = :key)
      AND (:contains IS NULL OR instr(payload, :contains) > 0)
      AND (:error_contains IS NULL OR instr(coalesce(error, ''), :error_contains) > 0)
LIMIT :limit

-- name: jobs_search_end
-- How many jobs the walk of jobs_search went through, and the lowest id of them (where a walk
-- that stopped at :scan goes on): ids only, down to :low (the last hit of a full page, else 0).
SELECT count(*), min(id) FROM (
    SELECT id FROM jobs
    WHERE id < :before AND id >= :low
    ORDER BY id DESC
    LIMIT :scan
)

-- name: jobs_search_dead
-- jobs_search of failed or cancelled jobs: the walk is the partial index jobs_dead (only those
-- jobs, by id), which the planner uses only when the query states its condition word for word.
SELECT id FROM (
    SELECT id, queue, status, name, idempotency_key, payload, error FROM jobs INDEXED BY jobs_dead
    WHERE status IN ('failed', 'cancelled') AND status = :status
      AND id < :before
    ORDER BY id DESC
    LIMIT :scan
)
WHERE 1
      AND (:queue IS NULL OR queue = :queue)
      AND (:status IS NULL OR status = :status)
      AND (:name IS NULL OR name = :name)
      AND (:key IS NULL OR idempotency_key = :key)
      AND (:contains IS NULL OR instr(payload, :contains) > 0)
      AND (:error_contains IS NULL OR instr(coalesce(error, ''), :error_contains) > 0)
LIMIT :limit

-- name: jobs_search_dead_end
-- jobs_search_end of jobs_search_dead.
SELECT count(*), min(id) FROM (
    SELECT id FROM jobs INDEXED BY jobs_dead
    WHERE status IN ('failed', 'cancelled') AND status = :status
      AND id < :before AND id >= :low
    ORDER BY id DESC
    LIMIT :scan
)

-- name: jobs_search_key
-- jobs_search with an idempotency key: the walk is the partial index jobs_key (the jobs of that
-- key, whatever their status), by id.
SELECT id FROM (
    SELECT id, queue, status, name, idempotency_key, payload, error FROM jobs INDEXED BY jobs_key
    WHERE idempotency_key IS NOT NULL AND idempotency_key = :key
      AND id < :before
    ORDER BY id DESC
    LIMIT :scan
)
WHERE 1
      AND (:queue IS NULL OR queue = :queue)
      AND (:status IS NULL OR status = :status)
      AND (:name IS NULL OR name = :name)
      AND (:key IS NULL OR idempotency_key = :key)
      AND (:contains IS NULL OR instr(payload, :contains) > 0)
      AND (:error_contains IS NULL OR instr(coalesce(error, ''), :error_contains) > 0)
LIMIT :limit

-- name: jobs_search_key_end
-- jobs_search_end of jobs_search_key.
SELECT count(*), min(id) FROM (
    SELECT id FROM jobs INDEXED BY jobs_key
    WHERE idempotency_key IS NOT NULL AND idempotency_key = :key
      AND id < :before AND id >= :low
    ORDER BY id DESC
    LIMIT :scan
)

-- name: dead_groups
-- The dead letter grouped (Backend.dead_groups): the newest :scan failed jobs (of :queue),
-- from the partial index jobs_dead_lines alone, grouped by queue, name and the line stored
-- when each failed (dead_line, 0012_dead_lines.sql: base.error_line of the error's last 1,000
-- characters), so no row and no error is read. Returns (queue, name, line, count, latest, earliest
-- finished_at, the newest job's id, walked); walked is one more than :scan when the walk did
-- not reach the end.
WITH walk AS (
    SELECT id, queue, name, finished_at, dead_line FROM jobs INDEXED BY jobs_dead_lines
    WHERE status = 'failed'
      AND (:queue IS NULL OR queue = :queue)
    ORDER BY id DESC
    LIMIT :scan + 1
)
SELECT queue, name, coalesce(dead_line, '') AS line, count(*),
       max(finished_at), min(finished_at), max(id), (SELECT count(*) FROM walk)
FROM walk
WHERE (SELECT count(*) FROM walk) <= :scan OR id > (SELECT min(id) FROM walk)
GROUP BY queue, name, line

-- name: jobs_list_dead
-- Failed or cancelled jobs, newest first: the partial index jobs_dead, which the planner uses
-- only when the query states its condition word for word.
SELECT {{_job_record}}
FROM jobs INDEXED BY jobs_dead
WHERE status IN ('failed', 'cancelled')
  AND status = :status
  AND (:queue IS NULL OR queue = :queue)
  AND (:name IS NULL OR name = :name)
ORDER BY id DESC
LIMIT :limit OFFSET :offset

-- name: jobs_list_workflow
-- One workflow's jobs, newest first: the partial index jobs_workflow, whose condition the query
-- repeats so that the planner may use it.
SELECT {{_job_record}}
FROM jobs INDEXED BY jobs_workflow
WHERE workflow_id IS NOT NULL
  AND workflow_id = :workflow_id
  AND (:queue IS NULL OR queue = :queue)
  AND (:status IS NULL OR status = :status)
  AND (:name IS NULL OR name = :name)
ORDER BY id DESC
LIMIT :limit OFFSET :offset

-- name: jobs_list_ids
-- The jobs among :ids (a JSON array of distinct ids; unknown ones match nothing), newest first:
-- one primary key seek each.
SELECT {{_job_record}}
FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (:workflow_id IS NULL OR workflow_id = :workflow_id)
  AND (:queue IS NULL OR queue = :queue)
  AND (:status IS NULL OR status = :status)
  AND (:name IS NULL OR name = :name)
ORDER BY id DESC
LIMIT :limit OFFSET :offset

-- name: jobs_status
SELECT status FROM jobs WHERE id = :id

-- name: jobs_cancel
-- A waiting or pending job (base.CANCELLABLE) is cancelled now. A running one keeps running with a request recorded (the first
-- request's time and author stay): its worker reads it back at its next lease renewal.
-- Every SET expression reads the row as it was before the update.
WITH clock (now) AS (
    SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
)
UPDATE jobs
SET status = CASE WHEN status IN ('waiting', 'pending') THEN 'cancelled' ELSE status END,
    finished_at = CASE WHEN status IN ('waiting', 'pending') THEN (SELECT now FROM clock) ELSE finished_at END,
    token = CASE WHEN status IN ('waiting', 'pending') THEN NULL ELSE token END,
    lease_expires_at = CASE WHEN status IN ('waiting', 'pending') THEN NULL ELSE lease_expires_at END,
    cancelled_by = CASE WHEN status IN ('waiting', 'pending') OR cancel_requested_at IS NULL THEN :by
                        ELSE cancelled_by END,
    cancel_requested_at = CASE WHEN status IN ('waiting', 'pending') OR cancel_requested_at IS NULL
                               THEN (SELECT now FROM clock) ELSE cancel_requested_at END
WHERE id = :id
  AND (status IN ('waiting', 'pending') OR (status = 'running' AND NOT :pending_only))
RETURNING {{_job_record}}

-- name: jobs_cancel_many
-- jobs_cancel for many jobs in one statement (:ids a JSON array of numbers); the jobs it would
-- refuse (finished, or running with :pending_only) are left out, as are unknown ids. Returns
-- (id, queue, status) of each job changed.
WITH clock (now) AS (
    SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
)
UPDATE jobs
SET status = CASE WHEN status IN ('waiting', 'pending') THEN 'cancelled' ELSE status END,
    finished_at = CASE WHEN status IN ('waiting', 'pending') THEN (SELECT now FROM clock) ELSE finished_at END,
    token = CASE WHEN status IN ('waiting', 'pending') THEN NULL ELSE token END,
    lease_expires_at = CASE WHEN status IN ('waiting', 'pending') THEN NULL ELSE lease_expires_at END,
    cancelled_by = CASE WHEN status IN ('waiting', 'pending') OR cancel_requested_at IS NULL THEN :by
                        ELSE cancelled_by END,
    cancel_requested_at = CASE WHEN status IN ('waiting', 'pending') OR cancel_requested_at IS NULL
                               THEN (SELECT now FROM clock) ELSE cancel_requested_at END
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (status IN ('waiting', 'pending') OR (status = 'running' AND NOT :pending_only))
RETURNING id, queue, status

-- name: jobs_retry
-- Re-drive the failed or cancelled jobs of :ids (a JSON array; jobs_retry sends one): pending
-- now, attempts reset, the error kept for history. OR IGNORE: a job whose idempotency key
-- another pending or running job holds (one re-driven before it in this statement included)
-- would break the unique index jobs_idempotency, and is skipped, left as it is. Returns the
-- ids and queues re-driven.
UPDATE OR IGNORE jobs
SET status = 'pending',
    {{_redrive}}
RETURNING id, queue

-- name: _redrive
-- (a fragment) What jobs_retry and jobs_resume set alike on the failed or cancelled jobs of
-- :ids, and their WHERE: attempts reset, due now, the last run's traces cleared (the error
-- kept for history).
attempts = 0,
    run_at = coalesce(:now, (julianday('now') - 2440587.5) * 86400.0),
    finished_at = NULL,
    result = NULL,
    token = NULL,
    lease_expires_at = NULL,
    cancel_requested_at = NULL,
    cancelled_by = NULL,
    progress = NULL,
    progress_note = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('failed', 'cancelled')

-- name: jobs_retry_was
-- The statuses the jobs of :ids had before jobs_retry (its counts), in the same transaction.
SELECT id, status FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('failed', 'cancelled')

-- name: jobs_resume_targets
-- The jobs of :ids (a JSON array of numbers) that jobs_resume moves: failed or cancelled,
-- without an idempotency key, each with the number of its inputs not completed (an input that
-- is gone counts as not completed). Read in jobs_resume's write transaction: no completion
-- comes between this count and the move.
SELECT jobs.id, jobs.queue, jobs.status, {{_inputs_left}} AS waits
FROM jobs
WHERE jobs.id IN (SELECT value FROM json_each(:ids))
  AND jobs.status IN ('failed', 'cancelled') AND jobs.idempotency_key IS NULL

-- name: jobs_resume
-- Re-drive the jobs of :ids (a JSON array of the numbers jobs_resume_targets found) as
-- jobs_retry does, each pending if no input is left to complete, else waiting for them. The
-- count is that of jobs_resume_targets: none of this statement's own jobs is completed before
-- or after it. By id through the primary key (an UPDATE ... FROM a JSON table was planned as
-- a scan of that table per job: 241 s for a group of 10,000).
UPDATE jobs
SET status = CASE WHEN {{_inputs_left}} > 0 THEN 'waiting' ELSE 'pending' END,
    waits = {{_inputs_left}},
    {{_redrive}}

-- name: _inputs_left
-- The inputs of job jobs.id that have not completed (one that is gone counts), by job_links'
-- primary key.
(SELECT count(*)
 FROM job_links AS l LEFT JOIN jobs AS i ON i.id = l.input_id
 WHERE l.job_id = jobs.id AND (i.id IS NULL OR i.status <> 'completed'))

-- name: jobs_purge_queues
-- The queues that hold finished jobs of :statuses (a JSON array): job_counts, one row each.
SELECT DISTINCT queue FROM job_counts
WHERE status IN (SELECT value FROM json_each(:statuses)) AND n > 0

-- name: jobs_purge
-- Finished jobs of one queue past the cutoff, but the held ones (a completed job a workflow step
-- that has not completed still needs: 0008_workflow_holds.sql). The queue is one plain equality,
-- so each status is one range of jobs_status (status, queue, finished_at) that ends at the
-- cutoff: what is kept is never read but the held jobs past it (`(:queue IS NULL OR ...)` read
-- every finished job of the status instead, 24 ms per call with 400,000 completed jobs).
-- Returns what jobs_purge_waiting and jobs_unhold need next: the ids of jobs that waited on
-- inputs (fanin) or were waited on. :now is the transaction's instant (clock_now), so every
-- statement of a purge cuts alike.
DELETE FROM jobs
WHERE status IN (SELECT value FROM json_each(:statuses))
  AND queue = :queue
  AND finished_at <= :now - :older_than
  AND NOT (status = 'completed' AND holds > 0)
RETURNING queue, status, id, fanin, fanout

-- name: jobs_purge_ids
-- jobs_purge of the jobs among :only (a JSON array of ids: the dead letter's bulk purge, a batch
-- at a time): one primary key seek each.
DELETE FROM jobs
WHERE id IN (SELECT value FROM json_each(:only))
  AND status IN (SELECT value FROM json_each(:statuses))
  AND (:queue IS NULL OR queue = :queue)
  AND finished_at <= :now - :older_than
  AND NOT (status = 'completed' AND holds > 0)
RETURNING queue, status, id, fanin, fanout

-- name: jobs_purge_freed
-- The purge again, over the completed jobs among :ids (a JSON array) that it freed itself.
DELETE FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids))
  AND status = 'completed'
  AND holds <= 0
  AND finished_at <= :now - :older_than
  AND (:queue IS NULL OR queue = :queue)
  AND (:only IS NULL OR id IN (SELECT value FROM json_each(:only)))
RETURNING queue, status, id, fanin, fanout

-- name: jobs_downstream
-- The waiting steps that wait, transitively, on the jobs of :ids (a JSON array, being purged):
-- none of them can ever run. Walks job_links_input one link at a time; a step reached twice is
-- listed once (UNION).
WITH RECURSIVE down (id) AS (
    SELECT value FROM json_each(:ids)
    UNION
    SELECT l.job_id
    FROM down
    JOIN job_links AS l ON l.input_id = down.id
    JOIN jobs AS w ON w.id = l.job_id
    WHERE w.status = 'waiting'
)
SELECT id FROM down WHERE id NOT IN (SELECT value FROM json_each(:ids))

-- name: jobs_purge_waiting
-- Delete the waiting steps of :ids (a JSON array, from jobs_downstream).
DELETE FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'waiting'
RETURNING queue, status, id, fanin, fanout

-- name: jobs_held_count
-- The held completed jobs a purge of completed jobs kept (the partial index jobs_held, whose
-- condition the query repeats so that the planner may use it).
SELECT count(*) FROM jobs INDEXED BY jobs_held
WHERE status = 'completed' AND holds > 0
  AND finished_at <= :now - :older_than
  AND (:queue IS NULL OR queue = :queue)
  AND (:only IS NULL OR id IN (SELECT value FROM json_each(:only)))

-- name: jobs_unhold
-- The jobs of :ids (a JSON array) completed, or were deleted before they completed, in this
-- write transaction: each of their inputs loses that many holds. Returns the inputs now free
-- (completed, no hold left). Found through job_links' primary key, a seek per step.
WITH gone (input_id, n) AS (
    SELECT l.input_id, count(*)
    FROM json_each(:ids) AS d
    JOIN job_links AS l ON l.job_id = d.value
    GROUP BY l.input_id
)
UPDATE jobs
SET holds = holds - gone.n
FROM gone
WHERE jobs.id = gone.input_id
RETURNING CASE WHEN jobs.status = 'completed' AND jobs.holds <= 0 THEN jobs.id END

-- name: job_links_delete
-- The links of purged workflow steps (:ids, a JSON array). The links to a purged input stay
-- with the step that ran after it, as its history, until that step is purged too.
DELETE FROM job_links WHERE job_id IN (SELECT value FROM json_each(:ids))

-- name: throughput_add
-- Completed and failed jobs of a queue in the current minute (0010_throughput.sql), added in the
-- transaction of the ack or reap that settled them.
INSERT INTO throughput (queue, minute, completed, failed)
VALUES (
    :queue,
    CAST(coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) / 60 AS INTEGER) * 60,
    :completed,
    :failed
)
ON CONFLICT (queue, minute) DO UPDATE
SET completed = completed + excluded.completed, failed = failed + excluded.failed

-- name: throughput_get
-- The minutes that end after now - since, by queue then minute: a range of the primary key.
SELECT queue, minute, completed, failed FROM throughput
WHERE minute > coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) - :since - 60
  AND (json_array_length(:queues) = 0 OR queue IN (SELECT value FROM json_each(:queues)))
ORDER BY queue, minute

-- name: throughput_prune
-- Minutes older than the history keeps (jobs_expire, run by the workers' maintenance).
DELETE FROM throughput
WHERE minute < coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) - :keep

-- name: counts_add
-- Finished jobs per queue and status (0005_counts.sql), adjusted in the transaction of a move.
INSERT INTO job_counts (queue, status, n) VALUES (:queue, :status, :n)
ON CONFLICT (queue, status) DO UPDATE SET n = n + excluded.n


-- worker side -----------------------------------------------------------------------------------

-- name: _gate_queues
-- The gate, per queue (a fragment: the rows of `gate`, used by jobs_claim and jobs_due alike):
-- each queue of :queues that is not paused, with the starts it has room for, before counting
-- this claim's own: the least of :limit, what max_concurrency leaves and what the queue's rate
-- bucket admits (GCRA, base.Rate: floor((now - max(tat, now)) / interval + burst); no bucket
-- row: a full burst). Needs the CTE clock (now).
SELECT w.queue,
       min(
           :limit,
           CASE WHEN q.max_concurrency IS NULL THEN :limit
                ELSE max(0, q.max_concurrency - (
                    SELECT count(*) FROM jobs AS r
                    WHERE r.queue = w.queue AND r.status = 'running'
                )) END,
           CASE WHEN q.rate_count IS NULL THEN :limit
                ELSE coalesce((
                    SELECT max(0, CAST((clock.now - max(b.tat, clock.now)) / b.interval
                                       + b.burst + 1e-9 AS INTEGER))
                    FROM limit_buckets AS b
                    WHERE b.queue = w.queue AND b.job = '' AND b.key = ''
                ), q.rate_burst) END
       ) AS room,
       q.key_concurrency, q.key_rate_count, q.key_rate_burst,
       coalesce(q.fair, 0) AS fair,
       EXISTS (SELECT 1 FROM job_limits AS jl WHERE jl.queue = w.queue) AS named
FROM (SELECT DISTINCT value AS queue FROM json_each(:queues)) AS w
CROSS JOIN clock
LEFT JOIN queues AS q ON q.name = w.queue
WHERE coalesce(q.paused, 0) = 0

-- name: _gate
-- The gate, per job (a fragment): whether the pending job p of the queue row g (from
-- _gate_queues) is held back by no limit as of now, before counting this claim's own starts:
-- its key has a free slot and an open bucket under the queue's key limits, and its name's
-- limits in the queue (job_limits) hold neither its name's bucket nor its key. A bucket is
-- closed while tat - (burst - 1) * interval > now. Each test is an index seek, and none runs
-- for a queue without that limit (g.named: the queue has job limits at all).
(p.limit_key IS NULL OR (
    (g.key_concurrency IS NULL OR g.key_concurrency > (
        SELECT count(*) FROM jobs AS r INDEXED BY jobs_running_keys
        WHERE r.queue = p.queue AND r.status = 'running' AND r.limit_key IS NOT NULL
          AND r.limit_key = p.limit_key
    ))
    AND (g.key_rate_count IS NULL OR NOT EXISTS (
        SELECT 1 FROM limit_buckets AS b
        WHERE b.queue = p.queue AND b.job = '' AND b.key = p.limit_key
          AND b.tat - (b.burst - 1) * b.interval > clock.now
    ))
))
AND (NOT g.named OR NOT EXISTS (
    SELECT 1 FROM job_limits AS jl
    WHERE jl.queue = p.queue AND jl.name = p.name AND (
        (jl.rate_count IS NOT NULL AND EXISTS (
            SELECT 1 FROM limit_buckets AS b
            WHERE b.queue = p.queue AND b.job = p.name AND b.key = ''
              AND b.tat - (b.burst - 1) * b.interval > clock.now
        ))
        OR (p.limit_key IS NOT NULL AND jl.key_concurrency IS NOT NULL AND jl.key_concurrency <= (
            SELECT count(*) FROM jobs AS r INDEXED BY jobs_running_keys
            WHERE r.queue = p.queue AND r.status = 'running' AND r.limit_key IS NOT NULL
              AND r.limit_key = p.limit_key AND r.name = p.name
        ))
        OR (p.limit_key IS NOT NULL AND jl.key_rate_count IS NOT NULL AND EXISTS (
            SELECT 1 FROM limit_buckets AS b
            WHERE b.queue = p.queue AND b.job = p.name AND b.key = p.limit_key
              AND b.tat - (b.burst - 1) * b.interval > clock.now
        ))
    )
))

-- name: _bucket_admits
-- (a fragment) The starts the rate bucket b admits now (GCRA, base.Rate); a bucket with no
-- row admits a full burst, hence coalesce((SELECT <this> ...), burst).
max(0, CAST((clock.now - max(b.tat, clock.now)) / b.interval + b.burst + 1e-9 AS INTEGER))

-- name: jobs_claim
-- Claim up to :limit due jobs of the queues in :queues (a JSON array), in priority DESC, fair
-- round, run_at, id order, through the gate: never more per queue than its room (_gate_queues), and
-- only jobs no limit holds back (_gate); then, among them, never more per key, per name and
-- per name and key than their slots and buckets admit (the windows below, applied one after
-- the other: each keeps a prefix of the claim order, so what survives all respects each).
--
-- Run inside BEGIN IMMEDIATE: the write lock is taken before anything is read, so counting
-- the running jobs, reading the buckets, choosing the candidates and marking them running are
-- one atomic step across every connection and process (SQLite has a single writer; no SKIP
-- LOCKED needed). The buckets move on in the same transaction (limit_buckets_take).
--
-- Planner notes. `gate` is one row per queue. `top` takes at most :limit candidates per queue
-- through a correlated IN subquery whose ORDER BY is exactly the jobs_pending index order, so
-- each queue costs an index seek plus :limit steps past the held back jobs, however many jobs
-- wait (a single ORDER BY across several queues would sort them all).
WITH
    clock (now) AS (
        SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
    ),
    gate AS (
        {{_gate_queues}}
    ),
    top AS (
        -- A fair queue's round (base.fair_round: rounds of FAIR_TURN = 4 turns per key);
        -- 0 in any other queue.
        SELECT c.id, c.queue, c.name, c.limit_key, c.priority, (c.turn - 1) / 4 AS fair_round,
               c.run_at, g.room,
               -- The starts the job's key may take in the queue's limits, and its name's.
               CASE WHEN c.limit_key IS NULL THEN :limit ELSE min(
                   CASE WHEN g.key_concurrency IS NULL THEN :limit ELSE g.key_concurrency - (
                       SELECT count(*) FROM jobs AS r INDEXED BY jobs_running_keys
                       WHERE r.queue = c.queue AND r.status = 'running'
                         AND r.limit_key IS NOT NULL AND r.limit_key = c.limit_key
                   ) END,
                   CASE WHEN g.key_rate_count IS NULL THEN :limit ELSE coalesce((
                       SELECT {{_bucket_admits}} FROM limit_buckets AS b
                       WHERE b.queue = c.queue AND b.job = '' AND b.key = c.limit_key
                   ), g.key_rate_burst) END
               ) END AS key_room,
               CASE WHEN jl.rate_count IS NULL THEN :limit ELSE coalesce((
                   SELECT {{_bucket_admits}} FROM limit_buckets AS b
                   WHERE b.queue = c.queue AND b.job = c.name AND b.key = ''
               ), jl.rate_burst) END AS name_room,
               CASE WHEN c.limit_key IS NULL OR jl.name IS NULL THEN :limit ELSE min(
                   CASE WHEN jl.key_concurrency IS NULL THEN :limit ELSE jl.key_concurrency - (
                       SELECT count(*) FROM jobs AS r INDEXED BY jobs_running_keys
                       WHERE r.queue = c.queue AND r.status = 'running'
                         AND r.limit_key IS NOT NULL AND r.limit_key = c.limit_key
                         AND r.name = c.name
                   ) END,
                   CASE WHEN jl.key_rate_count IS NULL THEN :limit ELSE coalesce((
                       SELECT {{_bucket_admits}} FROM limit_buckets AS b
                       WHERE b.queue = c.queue AND b.job = c.name AND b.key = c.limit_key
                   ), jl.key_rate_burst) END
               ) END AS name_key_room
        FROM gate AS g
        CROSS JOIN clock
        JOIN jobs AS c ON c.id IN (
            SELECT p.id FROM jobs AS p
            WHERE p.queue = g.queue
              AND p.status = 'pending'
              AND p.run_at <= clock.now
              AND g.room > 0
              AND {{_gate}}
            ORDER BY p.priority DESC, (p.turn - 1) / 4, p.run_at, p.id
            LIMIT :limit
        )
        LEFT JOIN job_limits AS jl ON jl.queue = c.queue AND jl.name = c.name
    ),
    by_key AS (
        SELECT *, row_number() OVER (
            PARTITION BY queue, limit_key ORDER BY priority DESC, fair_round, run_at, id) AS n
        FROM top
    ),
    by_name_key AS (
        SELECT *, row_number() OVER (
            PARTITION BY queue, name, limit_key ORDER BY priority DESC, fair_round, run_at, id) AS n2
        FROM by_key WHERE n <= key_room
    ),
    by_name AS (
        SELECT *, row_number() OVER (
            PARTITION BY queue, name ORDER BY priority DESC, fair_round, run_at, id) AS n3
        FROM by_name_key WHERE n2 <= name_key_room
    ),
    by_queue AS (
        SELECT *, row_number() OVER (
            PARTITION BY queue ORDER BY priority DESC, fair_round, run_at, id) AS n4
        FROM by_name WHERE n3 <= name_room
    ),
    picked (id) AS (
        SELECT id FROM by_queue WHERE n4 <= room
        ORDER BY priority DESC, fair_round, run_at, id LIMIT :limit
    )
UPDATE jobs
SET status = 'running',
    attempts = attempts + 1,
    started_at = (SELECT now FROM clock),
    worker_id = :worker_id,
    token = lower(hex(randomblob(16))),
    lease_expires_at = (SELECT now FROM clock) + lease
WHERE id IN (SELECT id FROM picked)
RETURNING id, name, queue, CAST(payload AS BLOB), attempts, max_attempts, backoff, timeout,
          lease, token, delivery, parent_id, priority, run_at, turn

-- name: limit_buckets_take
-- In the claim's transaction, after it: every rate bucket of the jobs claimed (:ids, a JSON
-- array) moves on by their count, tat = max(tat, now) + n * interval (GCRA, base.Rate), with
-- the rate it was taken under. Nothing to do (no row) for jobs of unlimited queues.
WITH
    clock (now) AS (
        SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
    ),
    claimed AS (
        SELECT j.queue, j.name, j.limit_key FROM jobs AS j
        WHERE j.id IN (SELECT value FROM json_each(:ids))
    ),
    takes (queue, job, key, n, count, per, burst) AS (
        SELECT c.queue, '', '', count(*), q.rate_count, q.rate_per, q.rate_burst
        FROM claimed AS c JOIN queues AS q ON q.name = c.queue
        WHERE q.rate_count IS NOT NULL
        GROUP BY c.queue
        UNION ALL
        SELECT c.queue, '', c.limit_key, count(*), q.key_rate_count, q.key_rate_per,
               q.key_rate_burst
        FROM claimed AS c JOIN queues AS q ON q.name = c.queue
        WHERE q.key_rate_count IS NOT NULL AND c.limit_key IS NOT NULL
        GROUP BY c.queue, c.limit_key
        UNION ALL
        SELECT c.queue, c.name, '', count(*), jl.rate_count, jl.rate_per, jl.rate_burst
        FROM claimed AS c JOIN job_limits AS jl ON jl.queue = c.queue AND jl.name = c.name
        WHERE jl.rate_count IS NOT NULL
        GROUP BY c.queue, c.name
        UNION ALL
        SELECT c.queue, c.name, c.limit_key, count(*), jl.key_rate_count, jl.key_rate_per,
               jl.key_rate_burst
        FROM claimed AS c JOIN job_limits AS jl ON jl.queue = c.queue AND jl.name = c.name
        WHERE jl.key_rate_count IS NOT NULL AND c.limit_key IS NOT NULL
        GROUP BY c.queue, c.name, c.limit_key
    )
INSERT INTO limit_buckets (queue, job, key, tat, interval, burst)
SELECT t.queue, t.job, t.key,
       max(coalesce(b.tat, clock.now), clock.now) + t.n * (t.per / t.count),
       t.per / t.count, t.burst
FROM takes AS t
CROSS JOIN clock
LEFT JOIN limit_buckets AS b ON b.queue = t.queue AND b.job = t.job AND b.key = t.key
WHERE true
ON CONFLICT (queue, job, key) DO UPDATE
SET tat = excluded.tat, interval = excluded.interval, burst = excluded.burst

-- name: queues_turn_round
-- A fair queue's round moves on to the highest turn claimed from it (:turns, a JSON object
-- queue -> turn).
UPDATE queues
SET turn_round = max(turn_round, (SELECT t.value FROM json_each(:turns) AS t WHERE t.key = queues.name))
WHERE name IN (SELECT key FROM json_each(:turns))

-- name: limits_next_open
-- After a claim that came back short: the seconds until the first closed bucket of :queues
-- (a JSON array) opens (tat - (burst - 1) * interval), or NULL. A closed bucket may hold back
-- no job (a key with nothing pending): the worker then claims once for nothing when it opens,
-- one wake per bucket, which costs less than an index of every keyed pending job would.
WITH clock (now) AS (
    SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
)
SELECT min(b.tat - (b.burst - 1) * b.interval) - clock.now
FROM limit_buckets AS b
CROSS JOIN clock
WHERE b.queue IN (SELECT value FROM json_each(:queues))
  AND b.tat - (b.burst - 1) * b.interval > clock.now

-- name: limit_buckets_lapsed
-- Whether store_tidy has buckets to forget (a read: most seconds it has none).
SELECT EXISTS (
    SELECT 1 FROM limit_buckets
    WHERE tat <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
)

-- name: limit_buckets_forget
-- store_tidy: a bucket whose tat is past is the same as none (an idle key leaves nothing).
DELETE FROM limit_buckets
WHERE tat <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)

-- name: jobs_ack_completed
UPDATE jobs
SET status = 'completed',
    result = :result,
    finished_at = coalesce(:now, (julianday('now') - 2440587.5) * 86400.0),
    token = NULL,
    lease_expires_at = NULL
WHERE id = :id AND status = 'running' AND token = :token
RETURNING queue, fanout, fanin

-- name: jobs_release
-- The jobs of :ids (a JSON array) completed in this write transaction: each waiting step that
-- runs after them loses one wait per input among them, and the ones left with none become
-- pending, due no earlier than their own run_at. A step that is not waiting any more (it was
-- cancelled) is left alone. Found through job_links_input, so a completion costs a seek per
-- step it releases, however many inputs those steps have.
WITH done (step, n) AS (
    SELECT l.job_id, count(*)
    FROM json_each(:ids) AS d
    JOIN job_links AS l ON l.input_id = d.value
    GROUP BY l.job_id
)
UPDATE jobs
SET waits = waits - done.n,
    status = CASE WHEN waits - done.n <= 0 THEN 'pending' ELSE status END,
    run_at = CASE
        WHEN waits - done.n <= 0
        THEN max(run_at, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0))
        ELSE run_at
    END
FROM done
WHERE jobs.id = done.step AND jobs.status = 'waiting'

-- name: jobs_ack_retry
UPDATE jobs
SET status = 'pending',
    error = :error,
    run_at = coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) + :delay,
    token = NULL,
    lease_expires_at = NULL
WHERE id = :id AND status = 'running' AND token = :token

-- name: jobs_ack_failed
UPDATE jobs
SET status = 'failed',
    error = :error,
    dead_line = :line,
    finished_at = coalesce(:now, (julianday('now') - 2440587.5) * 86400.0),
    token = NULL,
    lease_expires_at = NULL
WHERE id = :id AND status = 'running' AND token = :token
RETURNING queue

-- name: jobs_ack_cancelled
-- The handler stopped on a cancellation request.
UPDATE jobs
SET status = 'cancelled',
    error = :error,
    finished_at = coalesce(:now, (julianday('now') - 2440587.5) * 86400.0),
    token = NULL,
    lease_expires_at = NULL
WHERE id = :id AND status = 'running' AND token = :token
RETURNING queue

-- name: jobs_ack_release
-- A graceful release gives the attempt back.
UPDATE jobs
SET status = 'pending',
    run_at = coalesce(:now, (julianday('now') - 2440587.5) * 86400.0),
    attempts = attempts - 1,
    token = NULL,
    lease_expires_at = NULL
WHERE id = :id AND status = 'running' AND token = :token

-- name: jobs_due
-- Whether a claim on :queues would find something: a due pending job the gate lets start (a
-- queue not paused, with room under its max_concurrency and rate, and a job no key or name
-- limit holds back: the fragments jobs_claim uses). This is how an idle worker in another
-- process tells a commit that matters to it from any other commit (most are other workers'
-- claims and acks). Read-only, so it never waits for a writer. Correlated per queue so that
-- each probe is a seek into jobs_pending, never a scan of every pending job.
WITH
    clock (now) AS (
        SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
    ),
    gate AS (
        {{_gate_queues}}
    )
SELECT EXISTS (
    SELECT 1
    FROM gate AS g
    CROSS JOIN clock
    WHERE g.room > 0
      AND EXISTS (
          SELECT 1 FROM jobs AS p INDEXED BY jobs_pending
          WHERE p.queue = g.queue
            AND p.status = 'pending'
            AND p.run_at <= clock.now
            AND {{_gate}}
      )
)

-- name: leases_renew
-- One held lease: renewed, with the handler's progress when :has_progress; returns whether a
-- cancellation was asked (no row: the lease is lost).
UPDATE jobs
SET lease_expires_at = coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) + lease,
    progress = CASE WHEN :has_progress THEN :progress ELSE progress END,
    progress_note = CASE WHEN :has_progress THEN :progress_note ELSE progress_note END
WHERE id = :id AND status = 'running' AND token = :token
RETURNING cancel_requested_at IS NOT NULL

-- name: leases_lapsed
-- The running jobs whose lease lapsed, longest lapsed first, with what the reaper above the
-- store decides on (jobyard.retry.decide_lapsed). A read: nothing moves here.
SELECT id, token, name, queue, attempts, max_attempts, backoff, delivery,
       cancel_requested_at IS NOT NULL
FROM jobs
-- Running jobs are few: the jobs_status index finds them all, then the rows are checked.
WHERE status = 'running'
  AND lease_expires_at < coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
ORDER BY lease_expires_at, id
LIMIT :limit

-- name: leases_reap
-- Apply the reaper's moves (:moves, a JSON array of [id, token, kind, error, delay, line]:
-- line, a failed move's base.group_line of its error), each
-- fenced: only a job still running with that token and a lease still lapsed moves, so a
-- renewal or an ack that came between the read and this move wins (and a retry, a
-- cancellation asked since the read). retry: pending again at
-- now + delay (the attempt stays counted); failed, cancelled: finished now.
WITH clock (now) AS (
    SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
),
moves (id, token, kind, error, delay, line) AS (
    SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5
    FROM json_each(:moves)
)
UPDATE jobs
SET status = CASE WHEN m.kind = 'retry' THEN 'pending' ELSE m.kind END,
    error = m.error,
    -- A failed move's dead-letter line, of the error set just above (0012_dead_lines.sql).
    dead_line = CASE WHEN m.kind = 'failed' THEN m.line ELSE jobs.dead_line END,
    finished_at = CASE WHEN m.kind = 'retry' THEN NULL ELSE (SELECT now FROM clock) END,
    run_at = CASE WHEN m.kind = 'retry' THEN (SELECT now FROM clock) + m.delay ELSE jobs.run_at END,
    token = NULL,
    lease_expires_at = NULL
FROM moves AS m
WHERE jobs.id = m.id
  AND jobs.status = 'running'
  AND jobs.token = m.token
  AND jobs.lease_expires_at < (SELECT now FROM clock)
  -- a cancellation asked since the read: the next read decides it (cancelled)
  AND (m.kind <> 'retry' OR jobs.cancel_requested_at IS NULL)
RETURNING jobs.id, jobs.status, jobs.queue, jobs.name


-- queues, workers, stats --------------------------------------------------------------------------

-- name: queues_configure
INSERT INTO queues (name, max_concurrency, max_attempts, backoff, max_pending, paused, retention,
                    rate_count, rate_per, rate_burst, key_concurrency, key_rate_count,
                    key_rate_per, key_rate_burst, fair)
VALUES (:name, :max_concurrency, :max_attempts, :backoff, :max_pending, :paused, :retention,
        :rate_count, :rate_per, :rate_burst, :key_concurrency, :key_rate_count, :key_rate_per,
        :key_rate_burst, :fair)
ON CONFLICT (name) DO UPDATE
SET max_concurrency = excluded.max_concurrency,
    max_attempts = excluded.max_attempts,
    backoff = excluded.backoff,
    max_pending = excluded.max_pending,
    paused = excluded.paused,
    retention = excluded.retention,
    rate_count = excluded.rate_count,
    rate_per = excluded.rate_per,
    rate_burst = excluded.rate_burst,
    key_concurrency = excluded.key_concurrency,
    key_rate_count = excluded.key_rate_count,
    key_rate_per = excluded.key_rate_per,
    key_rate_burst = excluded.key_rate_burst,
    fair = excluded.fair

-- name: queues_unfair
-- A queue that stops being fair: its pending jobs lose their turns (the plain order again).
UPDATE jobs SET turn = 0 WHERE queue = :name AND status = 'pending' AND turn > 0

-- name: queues_list
SELECT name, max_concurrency, max_attempts, backoff, max_pending, paused, retention,
       rate_count, rate_per, rate_burst, key_concurrency, key_rate_count, key_rate_per,
       key_rate_burst, fair
FROM queues ORDER BY name

-- name: job_limits_upsert
INSERT INTO job_limits (queue, name, rate_count, rate_per, rate_burst, key_concurrency,
                        key_rate_count, key_rate_per, key_rate_burst)
VALUES (:queue, :name, :rate_count, :rate_per, :rate_burst, :key_concurrency, :key_rate_count,
        :key_rate_per, :key_rate_burst)
ON CONFLICT (queue, name) DO UPDATE
SET rate_count = excluded.rate_count,
    rate_per = excluded.rate_per,
    rate_burst = excluded.rate_burst,
    key_concurrency = excluded.key_concurrency,
    key_rate_count = excluded.key_rate_count,
    key_rate_per = excluded.key_rate_per,
    key_rate_burst = excluded.key_rate_burst

-- name: job_limits_delete
DELETE FROM job_limits WHERE queue = :queue AND name = :name

-- name: job_limits_list
SELECT queue, name, rate_count, rate_per, rate_burst, key_concurrency, key_rate_count,
       key_rate_per, key_rate_burst
FROM job_limits ORDER BY queue, name

-- name: limits_pending_queues
-- For limits_stats: the queues holding pending jobs, by name, found by a skip scan of the covering
-- index jobs_status (one probe per queue, never a read of the pending jobs themselves).
WITH RECURSIVE found (queue) AS (
    SELECT min(queue) FROM jobs WHERE status = 'pending'
    UNION ALL
    SELECT (SELECT min(j.queue) FROM jobs AS j WHERE j.status = 'pending' AND j.queue > f.queue)
    FROM found AS f
    WHERE f.queue IS NOT NULL
)
SELECT queue FROM found WHERE queue IS NOT NULL

-- name: limits_pending_walk
-- For limits_stats: per (name, key) of queue :queue, its first :walk pending jobs in claim order
-- (the claim index jobs_pending read in order, a table row per job: a bounded read whatever the
-- backlog) and how many of them are due.
SELECT w.name, w.limit_key, count(*), sum(w.run_at <= :now), 0
FROM (
    SELECT j.name, j.limit_key, j.run_at
    FROM jobs AS j
    WHERE j.status = 'pending' AND j.queue = :queue
    ORDER BY j.priority DESC, (j.turn - 1) / 4, j.run_at, j.id
    LIMIT :walk
) AS w
GROUP BY w.name, w.limit_key

-- name: limits_running
-- For limits_stats: the running jobs per (queue, name, key), of the queues in :queues (a JSON
-- array; empty: all): running jobs are few.
SELECT queue, name, limit_key, 0, 0, count(*)
FROM jobs
WHERE status = 'running'
  AND (json_array_length(:queues) = 0 OR queue IN (SELECT value FROM json_each(:queues)))
GROUP BY queue, name, limit_key

-- name: limit_buckets_list
SELECT queue, job, tat, interval, burst FROM limit_buckets WHERE key = ''

-- name: workers_upsert
INSERT INTO workers (id, host, pid, queues, concurrency, started_at, last_seen, forget_after)
VALUES (:id, :host, :pid, :queues, :concurrency, :started_at,
        coalesce(:now, (julianday('now') - 2440587.5) * 86400.0), :forget_after)
ON CONFLICT (id) DO UPDATE
SET host = excluded.host,
    pid = excluded.pid,
    queues = excluded.queues,
    concurrency = excluded.concurrency,
    started_at = excluded.started_at,
    last_seen = excluded.last_seen,
    forget_after = excluded.forget_after

-- name: workers_delete
DELETE FROM workers WHERE id = :id

-- name: workers_forget
-- Each worker by its own stated silence limit.
DELETE FROM workers
WHERE last_seen < coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) - forget_after

-- name: workers_list
SELECT id, host, pid, queues, concurrency, started_at, last_seen
FROM workers ORDER BY started_at, id

-- name: stats_counts
-- Waiting, pending and running jobs: three ranges of the covering index jobs_status. Finished jobs are
-- counted with the moves, in job_counts (0005_counts.sql), never here.
SELECT queue, status, count(*) FROM jobs
WHERE status IN ('waiting', 'pending', 'running')
  AND (json_array_length(:queues) = 0 OR queue IN (SELECT value FROM json_each(:queues)))
GROUP BY status, queue
UNION ALL
SELECT queue, status, n FROM job_counts
WHERE n <> 0
  AND (json_array_length(:queues) = 0 OR queue IN (SELECT value FROM json_each(:queues)))

-- name: stats_oldest
-- The run_at of each queue's first due pending job in claim order per priority level (the head
-- of its line, see base.QueueStats), the earliest of its levels. A skip scan of the claim index
-- jobs_pending finds the levels that hold pending jobs (a max() below the last one found, each
-- answered by the index); then each level's first entry in the index's order (its lowest
-- round's earliest job) is read, and when it is not due (so neither is the rest of its round),
-- the first due entry of a later round. Outside fair queues every job is in round 0: the first
-- entry is the level's earliest job, the oldest due one exactly, and the second probe finds no
-- later round. A few entries per level, whatever the backlog (an ORDER BY other than the
-- index's, or a min(run_at), read every entry of the level: 45-80 ms for 200,000). In a fair
-- queue the second probe passes over the entries of jobs not yet due in the rounds before the
-- first due one, as the claim does, never their rows.
WITH RECURSIVE levels (queue, p) AS (
    SELECT n.value, (
        SELECT max(j.priority) FROM jobs AS j WHERE j.status = 'pending' AND j.queue = n.value
    )
    FROM json_each(:names) AS n
    UNION ALL
    SELECT l.queue, (
        SELECT max(j.priority) FROM jobs AS j
        WHERE j.status = 'pending' AND j.queue = l.queue AND j.priority < l.p
    )
    FROM levels AS l
    WHERE l.p IS NOT NULL
),
clock (now) AS (
    SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
)
SELECT h.queue, min(h.at) FROM (
    SELECT l.queue, coalesce((
        SELECT CASE WHEN j.run_at <= c.now THEN j.run_at END FROM jobs AS j
        WHERE j.status = 'pending' AND j.queue = l.queue AND j.priority = l.p
        ORDER BY (j.turn - 1) / 4, j.run_at, j.id
        LIMIT 1
    ), (
        SELECT j.run_at FROM jobs AS j
        WHERE j.status = 'pending' AND j.queue = l.queue AND j.priority = l.p
          AND (j.turn - 1) / 4 > (
              SELECT (f.turn - 1) / 4 FROM jobs AS f
              WHERE f.status = 'pending' AND f.queue = l.queue AND f.priority = l.p
              ORDER BY (f.turn - 1) / 4, f.run_at, f.id
              LIMIT 1
          )
          AND j.run_at <= c.now
        ORDER BY (j.turn - 1) / 4, j.run_at, j.id
        LIMIT 1
    )) AS at
    FROM levels AS l CROSS JOIN clock AS c
    WHERE l.p IS NOT NULL
) AS h
GROUP BY h.queue  -- NULL: nothing due

-- name: stats_configured
SELECT name FROM queues
WHERE json_array_length(:queues) = 0 OR name IN (SELECT value FROM json_each(:queues))

-- name: stats_recent
-- Completions in the last minute, per queue: one range of jobs_status for each.
SELECT n.value, (
    SELECT count(*) FROM jobs AS j
    WHERE j.status = 'completed'
      AND j.queue = n.value
      AND j.finished_at >= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) - 60.0
)
FROM json_each(:names) AS n


-- recurring jobs ----------------------------------------------------------------------------------

-- name: schedules_deactivate
-- Schedules the app no longer declares are kept (their history shows) but never fire.
UPDATE schedules SET active = 0
WHERE active = 1 AND name NOT IN (SELECT value FROM json_each(:names))

-- name: schedules_upsert
-- An unchanged schedule (same ticks: cron, every, timezone; same job) keeps its stored next and
-- last run, so a restart neither fires a tick twice nor skips one; a new or changed one starts at
-- the given next run. paused is never written here: a deploy cannot resume a paused schedule.
-- (SET expressions all read the row as it was before the update.)
INSERT INTO schedules (name, cron, job, active, next_run_at, last_run_at, every, timezone, catch_up)
VALUES (:name, :cron, :job, 1, :next_run_at, NULL, :every, :timezone, :catch_up)
ON CONFLICT (name) DO UPDATE
SET active = 1,
    next_run_at = CASE
        WHEN schedules.cron = excluded.cron AND schedules.job = excluded.job
             AND schedules.every IS excluded.every AND schedules.timezone = excluded.timezone
        THEN schedules.next_run_at
        ELSE excluded.next_run_at
    END,
    last_run_at = CASE
        WHEN schedules.cron = excluded.cron AND schedules.job = excluded.job
             AND schedules.every IS excluded.every AND schedules.timezone = excluded.timezone
        THEN schedules.last_run_at
        ELSE NULL
    END,
    cron = excluded.cron,
    job = excluded.job,
    every = excluded.every,
    timezone = excluded.timezone,
    catch_up = excluded.catch_up

-- name: schedules_list
SELECT name, cron, job, active, next_run_at, last_run_at, every, timezone, catch_up, paused
FROM schedules ORDER BY name

-- name: schedules_advance
-- The compare-and-set of a tick: only the caller that still sees next_run_at at :fire_at moves
-- it on (1 ms tolerance: a float round trip through another store may not be exact). Runs in the
-- same write transaction as the job's insert, so a refused insert (QueueFull) undoes it.
UPDATE schedules
SET next_run_at = :next_at, last_run_at = :fire_at
WHERE name = :name
  AND active = 1
  AND paused = 0
  AND next_run_at IS NOT NULL
  AND abs(next_run_at - :fire_at) <= 0.001
RETURNING job

-- name: schedules_skip
-- The same compare-and-set, dropping the ticks from :fire_at up to :next_at: no job, and
-- last_run_at stays the last tick that fired.
UPDATE schedules
SET next_run_at = :next_at
WHERE name = :name
  AND active = 1
  AND paused = 0
  AND next_run_at IS NOT NULL
  AND abs(next_run_at - :fire_at) <= 0.001

-- name: schedules_pause
-- Pause, or resume: a paused schedule that resumes starts over at :next_run_at (the ticks it
-- missed while paused never fire); resuming one that is not paused changes nothing.
UPDATE schedules
SET next_run_at = CASE WHEN :paused = 0 AND paused = 1 THEN :next_run_at ELSE next_run_at END,
    paused = :paused
WHERE name = :name
