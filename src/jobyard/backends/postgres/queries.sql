-- Every statement of the PostgreSQL backend, as named blocks (`-- name: NAME` starts one).
-- Loaded once by _sql.py; executed with server-side prepared statements on pooled connections,
-- and as the same text on a caller's own connection (transactional enqueue and completion).
--
-- Names are unqualified: each connection's search_path holds the jobyard schema.
--
-- "now" is always `coalesce(%(now)s, statement_timestamp())` as epoch seconds: the App's clock
-- is NULL unless a test froze it. statement_timestamp(), deliberately, rather than:
--   now()             - the start of the transaction: a caller's long transaction would stamp a
--                       transactional enqueue with a stale time;
--   clock_timestamp() - volatile: it changes from row to row, so one claim or batch would not
--                       agree with itself, and a volatile comparison cannot be an index bound.
-- statement_timestamp() is stable within a statement and fresh for each one, and it is the
-- database's clock, so hosts whose clocks drift agree on leases and due times.
--
-- Durability of the worker's own moves (claim, ack, renew, reap): with %(async_commit)s true
-- their transaction commits with synchronous_commit = off (set_config(..., true) is local to
-- the statement's own transaction), so a worker never waits for a WAL flush. A database crash
-- can then forget the last fraction of a second of such moves, which the at-least-once
-- machinery repairs: a forgotten claim leaves its job pending (it runs again, and the first
-- run's outcome is refused by its token), a forgotten outcome or renewal leaves its job running
-- until the lease lapses and the reaper hands it out again. Two cases stay durable, because no
-- rerun may repair them: a claim that takes an at_most_once job, and a settlement of one.
-- Enqueues, cancels, re-drives and everything on a caller's connection are always durable.
--
-- Array parameters (batches) are sent in binary (%(name)b): psycopg's text format quotes and
-- escapes every element in Python, ten times slower than the binary one for a batch of JSON
-- payloads.
--
-- Result columns of a job record, in JobRecord's field order: the fragment _job_record,
-- written once ({{_job_record}} in a statement; see _sqlfiles.expand_fragments).


-- name: jobs_insert_lock
-- Serialise inserts into queues that have a max_pending, so the count jobs_insert makes next is
-- current. It runs in the same implicit transaction as jobs_insert (one pipeline, one round
-- trip); the count must be a separate statement because a READ COMMITTED statement that waited
-- for a lock still reads the snapshot taken before the wait. Locks are taken in name order so
-- two batches cannot deadlock. Batches for queues without a max_pending (the common case) skip
-- this statement: see `go` in jobs_insert.
SELECT pg_advisory_xact_lock(hashtextextended('jobyard:pending:' || current_schema() || ':' || name, 0))
FROM (
    SELECT name FROM queues
    WHERE name = ANY(%(queues)b::text[]) AND max_pending IS NOT NULL
    ORDER BY name
) AS limited;


-- name: jobs_insert
-- Insert a batch in one statement. Returns one row per input job, in input order:
-- (ord, id, created, go, checks); or one row with go false: nothing was written (see `go`).
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
input AS (
    SELECT *
    FROM unnest(
        %(names)b::text[], %(queues)b::text[], %(payloads)b::text[], %(priorities)b::int4[],
        %(delays)b::float8[], %(run_ats)b::float8[], %(max_attempts)b::int4[],
        %(backoffs)b::text[], %(timeouts)b::float8[], %(leases)b::float8[],
        %(deliveries)b::text[], %(keys)b::text[], %(parents)b::text[]
    ) WITH ORDINALITY AS i (
        name, queue, payload, priority, delay, run_at, max_attempts, backoff, timeout, lease,
        delivery, key, parent_id, ord
    )
),
-- Unless jobs_insert_lock ran first (%(locked)s), a batch for a queue with a max_pending writes
-- nothing and answers go = false: the backend sends it again behind the lock. (A max_pending
-- configured while this statement runs applies from the next batch, as if it came later.)
go AS (
    SELECT %(locked)s::bool OR NOT EXISTS (
        SELECT 1 FROM queues
        WHERE name IN (SELECT queue FROM input) AND max_pending IS NOT NULL
    ) AS ok
),
-- The first job of the batch with a given (queue, key) stands for every repeat of it.
firsts AS (
    SELECT DISTINCT ON (queue, key) queue, key, ord
    FROM input
    WHERE key IS NOT NULL
    ORDER BY queue, key, ord
),
-- An id for every job that may be created: keyless ones and the first of each key. nextval is
-- volatile, so it is evaluated after the sort and ids increase in input order. Everything
-- written below derives from these rows, so without `go` nothing is.
fresh AS (
    SELECT i.*, nextval('jobs_id_seq') AS id
    FROM input AS i
    WHERE (i.key IS NULL OR i.ord IN (SELECT ord FROM firsts)) AND (SELECT ok FROM go)
    ORDER BY i.ord
),
-- Take each key, or learn who holds it. ON CONFLICT DO UPDATE (a no-op write) rather than DO
-- NOTHING because it returns the holder's row even when the holder committed after this
-- statement's snapshot was taken, so a concurrent enqueue of the same key learns the winner's
-- id in the same round trip; a holder still in flight makes it wait for that outcome. Keys go
-- in (queue, key) order so batches that share keys lock them in one order: no deadlock.
keyed AS (
    INSERT INTO job_keys AS k (queue, key, job_id)
    SELECT f.queue, f.key, f.id
    FROM fresh AS f
    WHERE f.key IS NOT NULL
    ORDER BY f.queue, f.key
    ON CONFLICT (queue, key) DO UPDATE SET job_id = k.job_id
    RETURNING k.queue, k.key, k.job_id
),
created AS (
    SELECT f.*
    FROM fresh AS f
    WHERE f.key IS NULL
       OR EXISTS (
           SELECT 1 FROM keyed AS k
           WHERE k.queue = f.queue AND k.key = f.key AND k.job_id = f.id
       )
),
-- Straight into the pending partition: the rows satisfy its constraint, and it skips routing.
inserted AS (
    INSERT INTO jobs_pending (
        id, status, queue, name, payload, priority, attempts, max_attempts, backoff, timeout,
        lease, delivery, idempotency_key, parent_id, run_at, created_at
    )
    SELECT c.id, 'pending', c.queue, c.name, c.payload, c.priority, 0,
           coalesce(c.max_attempts, q.max_attempts, %(default_max_attempts)s::int4),
           coalesce(c.backoff, q.backoff), c.timeout, c.lease, c.delivery, c.key, c.parent_id,
           coalesce(c.run_at, clock.now + c.delay), clock.now
    FROM created AS c
    CROSS JOIN clock
    LEFT JOIN queues AS q ON q.name = c.queue
    RETURNING id, queue
),
counted AS (
    SELECT queue FROM inserted
),
{{_insert_checks}}
-- The answer, one row per input job: the created ones, then those whose key another job holds
-- (or an earlier job of the batch took), then, if the batch needs the lock, the NULL row.
SELECT c.ord, c.id, true AS created, true AS go,
       (SELECT count(*) FROM full_queues) + (SELECT count(*) FROM notified) AS checks
FROM created AS c
UNION ALL
SELECT i.ord, k.job_id, false, true, 0
FROM input AS i
JOIN keyed AS k ON k.queue = i.queue AND k.key = i.key
WHERE NOT EXISTS (SELECT 1 FROM created AS c WHERE c.ord = i.ord)
UNION ALL
SELECT NULL, NULL, NULL, false, 0
WHERE NOT (SELECT ok FROM go)
ORDER BY 1;


-- name: jobs_insert_workflow
-- jobs_insert for a batch with workflow steps (a NewJob with workflow_id or after): the same
-- answer, one row per input job, in input order (ord, id, created, go, checks), and the same
-- max_pending protocol (`go`, jobs_insert_lock), with the links of 0006_workflows.sql (each
-- input held by its dependents: holds, 0007_workflow_holds.sql) and without idempotency keys (such a batch carries none: the backend refuses them), so every job
-- is created. A plain batch never pays for the links: it goes through jobs_insert.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
input AS (
    SELECT *
    FROM unnest(
        %(names)b::text[], %(queues)b::text[], %(payloads)b::text[], %(priorities)b::int4[],
        %(delays)b::float8[], %(run_ats)b::float8[], %(max_attempts)b::int4[],
        %(backoffs)b::text[], %(timeouts)b::float8[], %(leases)b::float8[],
        %(deliveries)b::text[], %(parents)b::text[], %(workflows)b::text[], %(afters)b::text[],
        %(nexts)b::text[]
    ) WITH ORDINALITY AS i (
        name, queue, payload, priority, delay, run_at, max_attempts, backoff, timeout, lease,
        delivery, parent_id, workflow_id, after, next, ord
    )
),
go AS (
    SELECT %(locked)s::bool OR NOT EXISTS (
        SELECT 1 FROM queues
        WHERE name IN (SELECT queue FROM input) AND max_pending IS NOT NULL
    ) AS ok
),
fresh AS (
    SELECT i.*, nextval('jobs_id_seq') AS id
    FROM input AS i
    WHERE (SELECT ok FROM go)
    ORDER BY i.ord
),
-- The batch's ids in position order: a job's `after` (the positions it waits for, in order)
-- and `next` (the positions waiting for it), array literals of 1-based positions or NULL,
-- become ids by subscript, so the cost is the number of links whatever the planner guesses of
-- the batch's size (a join of two CTEs, of unknown sizes, was a nested loop: 3 s for 10,000).
positions AS (
    SELECT array_agg(f.id ORDER BY f.ord) AS ids FROM fresh AS f
),
placed AS (
    SELECT f.*,
           CASE WHEN f.after IS NOT NULL THEN ARRAY(
               SELECT m.ids[a.pos]
               FROM unnest(f.after::int8[]) WITH ORDINALITY AS a (pos, n)
               ORDER BY a.n
           ) END AS depends_on,
           CASE WHEN f.next IS NOT NULL THEN ARRAY(
               SELECT m.ids[a.pos]
               FROM unnest(f.next::int8[]) WITH ORDINALITY AS a (pos, n)
               ORDER BY a.n
           ) END AS dependents,
           coalesce(f.max_attempts, q.max_attempts, %(default_max_attempts)s::int4) AS attempts_max,
           coalesce(f.backoff, q.backoff) AS backoff_policy,
           coalesce(f.run_at, clock.now + f.delay) AS due, clock.now
    FROM fresh AS f
    CROSS JOIN clock
    CROSS JOIN positions AS m
    LEFT JOIN queues AS q ON q.name = f.queue
),
inserted AS (
    INSERT INTO jobs_pending (
        id, status, queue, name, payload, priority, attempts, max_attempts, backoff, timeout,
        lease, delivery, parent_id, run_at, created_at, workflow_id, dependents, holds
    )
    SELECT p.id, 'pending', p.queue, p.name, p.payload, p.priority, 0, p.attempts_max,
           p.backoff_policy, p.timeout, p.lease, p.delivery, p.parent_id, p.due, p.now,
           p.workflow_id, p.dependents, cardinality(p.dependents)
    FROM placed AS p
    WHERE p.depends_on IS NULL
    RETURNING id, queue
),
-- A step waits in its own partition, counting its inputs not yet completed (jobs_ack).
parked AS (
    INSERT INTO jobs_waiting (
        id, status, queue, name, payload, priority, attempts, max_attempts, backoff, timeout,
        lease, delivery, parent_id, run_at, created_at, workflow_id, dependents, depends_on,
        waits, holds
    )
    SELECT p.id, 'waiting', p.queue, p.name, p.payload, p.priority, 0, p.attempts_max,
           p.backoff_policy, p.timeout, p.lease, p.delivery, p.parent_id, p.due, p.now,
           p.workflow_id, p.dependents, p.depends_on, cardinality(p.depends_on),
           cardinality(p.dependents)
    FROM placed AS p
    WHERE p.depends_on IS NOT NULL
    RETURNING queue
),
-- Waiting jobs are counted in job_counts (0006_workflows.sql).
parked_counted AS (
    INSERT INTO job_counts AS jc (queue, status, n)
    SELECT queue, 'waiting', count(*)
    FROM parked
    GROUP BY queue
    ORDER BY queue
    ON CONFLICT (queue, status) DO UPDATE SET n = jc.n + excluded.n
),
-- Waiting steps count against max_pending (they will run in their queue) but wake nobody
-- (a step is woken by its release): they are in `counted`, not in `inserted`.
counted AS (
    SELECT queue FROM inserted
    UNION ALL
    SELECT queue FROM parked
),
{{_insert_checks}}
SELECT f.ord, f.id, true AS created, true AS go,
       (SELECT count(*) FROM full_queues) + (SELECT count(*) FROM notified) AS checks
FROM fresh AS f
UNION ALL
SELECT NULL, NULL, NULL, false, 0
WHERE NOT (SELECT ok FROM go)
ORDER BY 1;


-- name: _insert_checks
-- The last CTEs of both inserts, over their `counted` rows (the new jobs, pending or waiting)
-- and their `inserted` rows (the new pending jobs):
-- max_pending caps a queue's waiting and pending jobs (a waiting step will run there). The
-- counts exclude this statement's own rows (a data-modifying CTE's rows are invisible to the
-- rest of the statement), so they are the counts before the batch; waiting jobs are read from
-- job_counts (0006_workflows.sql), which the release moves in the same transaction as the
-- pending row it adds. jobyard_queue_full raises, which undoes every row of the batch.
full_queues AS (
    SELECT jobyard_queue_full(q.name, q.max_pending) AS raised
    FROM queues AS q
    JOIN (SELECT queue, count(*) AS n FROM counted GROUP BY queue) AS a ON a.queue = q.name
    WHERE q.max_pending IS NOT NULL
      AND (SELECT count(*) FROM jobs_pending AS p WHERE p.queue = q.name)
          + coalesce((SELECT c.n FROM job_counts AS c
                      WHERE c.queue = q.name AND c.status = 'waiting'), 0)
          + a.n > q.max_pending
),
-- One NOTIFY per queue per batch, delivered only if the transaction commits. The payload is
-- "schema:queue" on one channel, so a LISTEN needs no dynamic identifier.
notified AS (
    SELECT pg_notify('jobyard', current_schema() || ':' || d.queue) AS sent
    FROM (SELECT DISTINCT queue FROM inserted) AS d
)


-- name: _job_record
id, name, queue, payload, status, priority, attempts, max_attempts, run_at, created_at,
       started_at, finished_at, worker_id, result, error, parent_id, idempotency_key, delivery,
       cancel_requested_at, cancelled_by, progress, progress_note, workflow_id, depends_on,
       dependents

-- name: jobs_get
SELECT {{_job_record}}
FROM jobs
WHERE id = %(id)s::int8;


-- name: jobs_list
-- Every status: a merge of the partitions' primary keys, newest first.
SELECT {{_job_record}}
FROM jobs
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
ORDER BY id DESC
LIMIT %(limit)s::int8 OFFSET %(offset)s::int8;


-- name: jobs_list_status
-- One status: a plain `status = $n` is what lets the executor prune the other partitions when
-- it starts, even in a generic prepared plan (`$n IS NULL OR ...`, or `= ANY($n)`, would not).
SELECT {{_job_record}}
FROM jobs
WHERE status = %(status)s::text
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
ORDER BY id DESC
LIMIT %(limit)s::int8 OFFSET %(offset)s::int8;


-- name: jobs_list_workflow
-- One workflow's jobs: a backward range of the jobs_workflow index in each partition, merged
-- newest first; the other filters apply to that range only.
SELECT {{_job_record}}
FROM jobs
WHERE workflow_id = %(workflow_id)s::text
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
ORDER BY id DESC
LIMIT %(limit)s::int8 OFFSET %(offset)s::int8;


-- name: jobs_list_ids
-- Only the jobs of these ids (primary-key probes in each partition); unknown ids match nothing.
SELECT {{_job_record}}
FROM jobs
WHERE id = ANY(%(ids)b::int8[])
  AND (%(workflow_id)s::text IS NULL OR workflow_id = %(workflow_id)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
ORDER BY id DESC
LIMIT %(limit)s::int8 OFFSET %(offset)s::int8;


-- name: jobs_cancel
-- waiting or pending -> cancelled; running: a cancellation request recorded (the first
-- request's time and author stay), which its worker reads back at its next lease renewal.
-- Returns (done, record...): the job as changed, or, when nothing changed, the job as it is
-- (its status names the refusal); no row: no such job. Every SET expression reads the row as it
-- was.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
-- The status before: a change of status moves the row to another partition, and an UPDATE
-- that meets a row moved since its snapshot fails (and is run again), so the status of the
-- snapshot is the status of the row this statement changes.
before AS (
    SELECT status FROM jobs WHERE id = %(id)s::int8
),
cancelled AS (
    UPDATE jobs AS j
    SET status = CASE WHEN j.status IN ('waiting', 'pending') THEN 'cancelled' ELSE j.status END,
        finished_at = CASE WHEN j.status IN ('waiting', 'pending') THEN clock.now
                           ELSE j.finished_at END,
        cancelled_by = CASE WHEN j.status IN ('waiting', 'pending')
                                 OR j.cancel_requested_at IS NULL
                            THEN %(by)s::text ELSE j.cancelled_by END,
        cancel_requested_at = CASE WHEN j.status IN ('waiting', 'pending')
                                        OR j.cancel_requested_at IS NULL
                                   THEN clock.now ELSE j.cancel_requested_at END
    FROM clock
    WHERE j.id = %(id)s::int8
      AND (j.status IN ('waiting', 'pending')
           OR (j.status = 'running' AND NOT %(pending_only)s::bool))
    RETURNING j.id, j.name, j.queue, j.payload, j.status, j.priority, j.attempts,
              j.max_attempts, j.run_at, j.created_at, j.started_at, j.finished_at, j.worker_id,
              j.result, j.error, j.parent_id, j.idempotency_key, j.delivery,
              j.cancel_requested_at, j.cancelled_by, j.progress, j.progress_note,
              j.workflow_id, j.depends_on, j.dependents
),
freed AS (
    DELETE FROM job_keys AS k
    USING cancelled AS c
    WHERE c.status = 'cancelled'
      AND k.queue = c.queue AND k.key = c.idempotency_key AND k.job_id = c.id
),
counted AS (
    INSERT INTO job_counts AS jc (queue, status, n)
    SELECT c.queue, m.status, m.n
    FROM cancelled AS c, before AS b, (VALUES ('cancelled', 1), ('waiting', -1)) AS m (status, n)
    WHERE c.status = 'cancelled' AND (m.status = 'cancelled' OR b.status = 'waiting')
    ORDER BY m.status
    ON CONFLICT (queue, status) DO UPDATE SET n = jc.n + excluded.n
)
SELECT true, * FROM cancelled
UNION ALL
SELECT false, id, name, queue, payload, status, priority, attempts, max_attempts, run_at,
       created_at, started_at, finished_at, worker_id, result, error, parent_id,
       idempotency_key, delivery, cancel_requested_at, cancelled_by, progress, progress_note,
       workflow_id, depends_on, dependents
FROM jobs
WHERE id = %(id)s::int8 AND NOT EXISTS (SELECT 1 FROM cancelled);


-- name: jobs_retry
-- failed or cancelled -> pending, attempts reset, its idempotency key taken back (refused if
-- another pending or running job of the queue holds it). Returns (verdict, holder, record...):
-- verdict 'ok', 'duplicate' or 'status'; no row: no such job.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
target AS (
    SELECT id, queue, status, idempotency_key
    FROM jobs
    WHERE id = %(id)s::int8 AND status IN ('failed', 'cancelled')
    FOR UPDATE
),
keyed AS (
    INSERT INTO job_keys (queue, key, job_id)
    SELECT queue, idempotency_key, id FROM target WHERE idempotency_key IS NOT NULL
    ON CONFLICT (queue, key) DO NOTHING
    RETURNING job_id
),
redriven AS (
    UPDATE jobs AS j
    SET status = 'pending', attempts = 0, run_at = clock.now, finished_at = NULL, result = NULL,
        cancel_requested_at = NULL, cancelled_by = NULL, progress = NULL, progress_note = NULL
    FROM target AS t, clock
    WHERE j.status IN ('failed', 'cancelled') AND j.id = t.id
      AND (t.idempotency_key IS NULL OR EXISTS (SELECT 1 FROM keyed))
    RETURNING j.id, j.name, j.queue, j.payload, j.status, j.priority, j.attempts,
              j.max_attempts, j.run_at, j.created_at, j.started_at, j.finished_at, j.worker_id,
              j.result, j.error, j.parent_id, j.idempotency_key, j.delivery,
              j.cancel_requested_at, j.cancelled_by, j.progress, j.progress_note,
              j.workflow_id, j.depends_on, j.dependents
),
notified AS (
    SELECT pg_notify('jobyard', current_schema() || ':' || queue) AS sent FROM redriven
),
counted AS (
    UPDATE job_counts AS jc
    SET n = jc.n - 1
    FROM target AS t
    WHERE jc.queue = t.queue AND jc.status = t.status AND EXISTS (SELECT 1 FROM redriven)
)
SELECT 'ok', NULL::int8, * FROM redriven WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
SELECT CASE WHEN j.status IN ('failed', 'cancelled') THEN 'duplicate' ELSE 'status' END,
       (SELECT k.job_id FROM job_keys AS k
        WHERE k.queue = j.queue AND k.key = j.idempotency_key),
       j.id, j.name, j.queue, j.payload, j.status, j.priority, j.attempts, j.max_attempts,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.worker_id, j.result, j.error,
       j.parent_id, j.idempotency_key, j.delivery, j.cancel_requested_at, j.cancelled_by,
       j.progress, j.progress_note, j.workflow_id, j.depends_on, j.dependents
FROM jobs AS j
WHERE j.id = %(id)s::int8 AND NOT EXISTS (SELECT 1 FROM redriven);


-- name: purge_fence
-- Sent before jobs_purge in the same implicit transaction (one pipeline): index scans only,
-- for that statement. With autovacuum off the finished partitions are never analyzed, and a
-- cutoff the planner cannot see at plan time is given a third of the rows: the generic plan
-- then read the whole completed partition on every retention call (24 ms with 200,000
-- completed jobs, 52 ms with 400,000, to delete nothing). Transaction-local: it ends with the
-- purge. (jobyard_completed_since does the same for the same reason, 0004_counts.sql.)
SELECT set_config('enable_seqscan', 'off', true);


-- name: jobs_purge
-- One DELETE per finished partition, straight on the partition, each switched on or off by
-- whether statuses names it: a param-only condition becomes a one-time filter, so a partition
-- not named is never read. (Through the parent with `status = ANY($n)` a generic plan would
-- scan every partition, the hot pending and running ones included: pruning cannot see into
-- an array parameter.) Each range-scans its partition's finished_at index (purge_fence sees
-- that the plan does): the cutoff is written out as a stable expression, which can bound an
-- index scan where a CTE's column could not. A held completed job (holds > 0: a workflow step that has not completed needs its
-- result, 0007_workflow_holds.sql) is kept; the range visits it, and only it is visited
-- without being deleted.
--
-- Workflows, in the same statement: the waiting steps downstream of a deleted job that had not
-- completed (`down`, through the dependents arrays of the waiting partition) go too, since none
-- can ever run; every deleted job that had not completed no longer holds its inputs (`losses`,
-- from the snapshot); an input that this frees goes too when it matches the purge (`freed`),
-- the others lose their holds (`unheld`). The two are told apart on the snapshot, and READ
-- COMMITTED re-checks the row each locks: a concurrent ack can only lower holds further, so a
-- row chosen for `freed` still qualifies, and one left to `unheld` is freed for the next purge.
-- Each of those CTEs opens with an uncorrelated EXISTS, a one-time filter: a purge that deletes
-- no workflow job never executes their scans, of the hot partitions above all.
-- Returns (jobs deleted, of which waiting steps, held completed jobs kept).
WITH RECURSIVE completed AS (
    DELETE FROM jobs_completed AS j
    WHERE 'completed' = ANY(%(statuses)b::text[])
      AND j.finished_at <= coalesce(%(now)s::float8,
                                    extract(epoch FROM statement_timestamp())::float8)
                           - %(older_than)s::float8
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (j.holds IS NULL OR j.holds <= 0)
    RETURNING j.id, j.queue, j.status, j.depends_on, j.dependents
),
failed AS (
    DELETE FROM jobs_failed AS j
    WHERE 'failed' = ANY(%(statuses)b::text[])
      AND j.finished_at <= coalesce(%(now)s::float8,
                                    extract(epoch FROM statement_timestamp())::float8)
                           - %(older_than)s::float8
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
    RETURNING j.id, j.queue, j.status, j.depends_on, j.dependents
),
cancelled AS (
    DELETE FROM jobs_cancelled AS j
    WHERE 'cancelled' = ANY(%(statuses)b::text[])
      AND j.finished_at <= coalesce(%(now)s::float8,
                                    extract(epoch FROM statement_timestamp())::float8)
                           - %(older_than)s::float8
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
    RETURNING j.id, j.queue, j.status, j.depends_on, j.dependents
),
stopped AS (
    SELECT * FROM failed UNION ALL SELECT * FROM cancelled
),
down (id) AS (
    SELECT d.id
    FROM stopped AS g CROSS JOIN LATERAL unnest(g.dependents) AS d (id)
    UNION
    SELECT d.id
    FROM down JOIN jobs_waiting AS w ON w.id = down.id
    CROSS JOIN LATERAL unnest(w.dependents) AS d (id)
),
waiting AS (
    DELETE FROM jobs_waiting AS w
    WHERE EXISTS (SELECT 1 FROM down) AND w.id = ANY(ARRAY(SELECT id FROM down ORDER BY id))
    RETURNING w.id, w.queue, w.status, w.depends_on, w.dependents
),
gone AS (
    SELECT id FROM completed UNION ALL SELECT id FROM stopped UNION ALL SELECT id FROM waiting
),
losses AS (
    SELECT i.id, count(*)::integer AS k
    FROM (SELECT depends_on FROM stopped UNION ALL SELECT depends_on FROM waiting) AS s
    CROSS JOIN LATERAL unnest(s.depends_on) AS i (id)
    WHERE NOT i.id = ANY(ARRAY(SELECT id FROM gone))
    GROUP BY i.id
),
targets AS (
    SELECT j.id, l.k,
           j.status = 'completed' AND j.holds - l.k <= 0
           AND 'completed' = ANY(%(statuses)b::text[])
           AND j.finished_at <= coalesce(%(now)s::float8,
                                         extract(epoch FROM statement_timestamp())::float8)
                                - %(older_than)s::float8
           AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text) AS goes
    FROM jobs AS j JOIN losses AS l ON l.id = j.id
    WHERE EXISTS (SELECT 1 FROM losses)
      AND j.id = ANY(ARRAY(SELECT id FROM losses)) AND j.holds IS NOT NULL
),
freed AS (
    DELETE FROM jobs_completed AS j
    USING targets AS t
    WHERE EXISTS (SELECT 1 FROM targets WHERE goes)
      AND j.id = ANY(ARRAY(SELECT id FROM targets WHERE goes ORDER BY id))
      AND t.goes AND j.id = t.id AND j.holds - t.k <= 0
    RETURNING j.id, j.queue, j.status
),
unheld AS (
    UPDATE jobs AS j
    SET holds = j.holds - t.k
    FROM targets AS t
    WHERE EXISTS (SELECT 1 FROM targets WHERE NOT goes)
      AND NOT t.goes AND j.id = ANY(ARRAY(SELECT id FROM targets WHERE NOT goes ORDER BY id))
      AND j.id = t.id
),
counted AS (
    INSERT INTO job_counts AS jc (queue, status, n)
    SELECT queue, status, -count(*)
    FROM (SELECT queue, status FROM completed UNION ALL SELECT queue, status FROM stopped
          UNION ALL SELECT queue, status FROM waiting
          UNION ALL SELECT queue, status FROM freed) AS d
    GROUP BY queue, status
    ORDER BY queue, status
    ON CONFLICT (queue, status) DO UPDATE SET n = jc.n + excluded.n
),
held AS (
    SELECT count(*) AS n
    FROM jobs_completed AS j
    WHERE 'completed' = ANY(%(statuses)b::text[])
      AND j.holds > 0
      AND j.finished_at <= coalesce(%(now)s::float8,
                                    extract(epoch FROM statement_timestamp())::float8)
                           - %(older_than)s::float8
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
)
-- (unheld and counted run to completion whether read or not, as every data-modifying CTE.)
SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM freed),
       (SELECT count(*) FROM waiting),
       (SELECT n FROM held) - (SELECT count(*) FROM freed);


-- name: jobs_claim_lock
-- Serialise the claimers of queues that have a max_concurrency, across every host, so the
-- running count jobs_claim makes next is current (see jobs_insert_lock for why the count is a
-- separate statement in the same implicit transaction). Unlimited queues take no lock and
-- their claimers never wait for one another: SKIP LOCKED alone keeps them apart; they do not
-- even send this statement (see `go` in jobs_claim). One row per lock taken.
SELECT pg_advisory_xact_lock(hashtextextended('jobyard:claim:' || current_schema() || ':' || name, 0))
FROM (
    SELECT name FROM queues
    WHERE name = ANY(%(queues)b::text[]) AND max_concurrency IS NOT NULL
    ORDER BY name
) AS limited;


-- name: jobs_claim
-- Claim up to limit due jobs in one statement. Per queue, a LATERAL index scan of the claim
-- index in claim order takes at most that queue's room (limit, or what its max_concurrency
-- leaves), skipping rows another claimer has locked; the union is cut to limit in the global
-- order. A row locked here but cut by the outer LIMIT stays pending and is unlocked at commit.
-- Returns the claimed jobs in claim order, or a single row of NULLs when it claimed nothing
-- because it needs jobs_claim_lock first (see `go`).
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
-- Unless jobs_claim_lock ran first (%(locked)s), a claim touching a queue with a
-- max_concurrency claims nothing and answers with the NULL row: the backend sends it again
-- behind the lock (and sends the lock first for those queues from then on).
go AS (
    SELECT %(locked)s::bool OR NOT EXISTS (
        SELECT 1 FROM queues
        WHERE name = ANY(%(queues)b::text[]) AND max_concurrency IS NOT NULL
    ) AS ok
),
room AS (
    SELECT w.queue,
           CASE
               WHEN q.max_concurrency IS NULL THEN %(limit)s::int8
               ELSE least(%(limit)s::int8, greatest(q.max_concurrency - (
                   SELECT count(*) FROM jobs_running AS r WHERE r.queue = w.queue
               ), 0))
           END AS n
    FROM unnest(%(queues)b::text[]) AS w (queue)
    LEFT JOIN queues AS q ON q.name = w.queue
    WHERE q.paused IS NOT TRUE AND (SELECT ok FROM go)
),
picked AS (
    SELECT p.id, p.priority, p.run_at
    FROM room CROSS JOIN clock CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at
        FROM jobs_pending AS j
        WHERE j.queue = room.queue AND j.run_at <= clock.now
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT room.n
        FOR UPDATE OF j SKIP LOCKED
    ) AS p
    ORDER BY p.priority DESC, p.run_at, p.id
    LIMIT %(limit)s::int8
),
claimed AS (
    UPDATE jobs AS j
    SET status = 'running', attempts = j.attempts + 1, started_at = clock.now,
        worker_id = %(worker_id)s::text, token = gen_random_uuid()::text,
        lease_expires_at = clock.now + j.lease
    FROM clock
    -- One primary-key probe per picked id, whatever the planner guesses of picked: a LIMIT
    -- parameter is guessed at a tenth of the partition, and once a vacuum has given the
    -- partition real statistics the plain join became a hash join over a scan of every
    -- pending row (40 ms per claim with a 100,000-job backlog).
    WHERE j.status = 'pending' AND j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.name, j.queue, j.payload, j.attempts, j.max_attempts, j.backoff,
              j.timeout, j.lease, j.token, j.delivery, j.parent_id, j.priority, j.run_at
),
durability AS (
    SELECT set_config('synchronous_commit', CASE
               WHEN %(async_commit)s::bool
                    AND NOT EXISTS (SELECT 1 FROM claimed WHERE delivery = 'at_most_once')
               THEN 'off' ELSE current_setting('synchronous_commit')
           END, true) AS mode
)
SELECT id, name, queue, payload, attempts, max_attempts, backoff, timeout, lease, token,
       delivery, parent_id, priority, run_at
FROM claimed
WHERE (SELECT count(*) FROM durability) >= 0
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
WHERE NOT (SELECT ok FROM go)
ORDER BY priority DESC, run_at, id;


-- name: jobs_ack
-- Settle a batch: each outcome applies only while the job is running under that token, and a
-- completion releases the workflow steps waiting for it (`released`) and frees its own inputs
-- (`unheld`), in the same statement.
-- Returns the ids it settled (the backend reports the others as refused: stale).
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
-- The outcomes come as one JSON object {"<id>:<token>": [kind, result, error, delay], ...}: one
-- text parameter that Python encodes in C (six arrays dumped element by element in Python cost
-- about 4 us per outcome, in one stretch that held the GIL against the handlers). Each running
-- job finds its outcome by a lookup of its own id and token in the object, so the statement
-- reads the running partition by primary key and never joins the outcomes to it as rows: that
-- join's generic plan became, once the partition had statistics, a nested loop comparing every
-- outcome with every job (3 of the 4.6 ms an ack of 72 took with 340,000 finished jobs stored).
input AS (
    SELECT %(outcomes)s::jsonb AS o
),
settled AS (
    UPDATE jobs AS j
    SET (status, result, error, finished_at, run_at, attempts) = (
            SELECT CASE x.kind
                       WHEN 'completed' THEN 'completed'
                       WHEN 'failed' THEN 'failed'
                       WHEN 'cancelled' THEN 'cancelled'
                       ELSE 'pending'
                   END,
                   CASE WHEN x.kind = 'completed' THEN x.result ELSE j.result END,
                   CASE WHEN x.kind IN ('retry', 'failed', 'cancelled') THEN x.error
                        ELSE j.error END,
                   CASE WHEN x.kind IN ('completed', 'failed', 'cancelled') THEN clock.now END,
                   CASE x.kind
                       WHEN 'retry' THEN clock.now + x.delay
                       WHEN 'release' THEN clock.now
                       ELSE j.run_at
                   END,
                   CASE WHEN x.kind = 'release' THEN j.attempts - 1 ELSE j.attempts END
            FROM (
                SELECT v ->> 0 AS kind, v ->> 1 AS result, v ->> 2 AS error,
                       (v ->> 3)::float8 AS delay
                FROM (SELECT input.o -> (j.id::text || ':' || j.token) AS v) AS found
            ) AS x
        ),
        token = NULL,
        lease_expires_at = NULL
    FROM input, clock
    WHERE j.status = 'running'
      AND j.id = ANY(ARRAY(
          SELECT split_part(k, ':', 1)::int8 FROM input, jsonb_object_keys(input.o) AS k
      ))
      AND input.o ? (j.id::text || ':' || j.token)
    RETURNING j.id, j.status, j.queue, j.idempotency_key, j.delivery,
              j.run_at <= clock.now AS due, j.dependents, j.depends_on
),
released AS (
    SELECT jobyard_release(
               ARRAY(SELECT d.id
                     FROM settled AS s CROSS JOIN LATERAL unnest(s.dependents) AS d (id)
                     WHERE s.status = 'completed'),
               (SELECT now FROM clock)
           ) AS n
    WHERE EXISTS (
        SELECT 1 FROM settled AS s WHERE s.status = 'completed' AND s.dependents IS NOT NULL
    )
),
-- A completed step no longer holds its inputs (0007_workflow_holds.sql): retention may take
-- them once no other step needs them.
unheld AS (
    SELECT jobyard_unhold(
               ARRAY(SELECT i.id
                     FROM settled AS s CROSS JOIN LATERAL unnest(s.depends_on) AS i (id)
                     WHERE s.status = 'completed')
           ) AS n
    WHERE EXISTS (
        SELECT 1 FROM settled AS s WHERE s.status = 'completed' AND s.depends_on IS NOT NULL
    )
),
freed AS (
    DELETE FROM job_keys AS k
    USING settled AS s
    WHERE s.status IN ('completed', 'failed', 'cancelled')
      AND k.queue = s.queue AND k.key = s.idempotency_key AND k.job_id = s.id
),
counted AS (
    INSERT INTO job_counts AS jc (queue, status, n)
    SELECT queue, status, count(*)
    FROM settled
    WHERE status IN ('completed', 'failed', 'cancelled')
    GROUP BY queue, status
    ORDER BY queue, status
    ON CONFLICT (queue, status) DO UPDATE SET n = jc.n + excluded.n
),
-- Wake the workers of a queue where a job is due again (released, or retried without delay),
-- or where a settled job freed a slot of a max_concurrency that may have kept them waiting.
notified AS (
    SELECT pg_notify('jobyard', current_schema() || ':' || d.queue) AS sent
    FROM (
        SELECT s.queue
        FROM settled AS s
        GROUP BY s.queue
        HAVING bool_or(s.status = 'pending' AND s.due)
            OR EXISTS (
                SELECT 1 FROM queues AS q
                WHERE q.name = s.queue AND q.max_concurrency IS NOT NULL
            )
    ) AS d
),
durability AS (
    SELECT set_config('synchronous_commit', CASE
               WHEN %(async_commit)s::bool
                    AND NOT EXISTS (SELECT 1 FROM settled WHERE delivery = 'at_most_once')
               THEN 'off' ELSE current_setting('synchronous_commit')
           END, true) AS mode
)
SELECT s.id
FROM settled AS s
WHERE (SELECT count(*) FROM notified) + (SELECT count(*) FROM durability)
      + (SELECT count(*) FROM released) + (SELECT count(*) FROM unheld) >= 0;


-- name: leases_renew
-- Heartbeat. Rows locked by someone else are skipped, not waited for: a worker's heartbeat and
-- its completer (or a handler's transaction that has settled its job and not yet committed)
-- touch the same jobs at the same time, and a renewal that waited could deadlock with a
-- settlement locking the rows in another order, or stall the whole heartbeat behind one
-- transaction. A skipped job is not reported lost: the lock's owner is settling it (or the next
-- beat renews it). Lost: not running under that token in this statement's snapshot.
-- The progress of a job (has_progress) is written with its lease, under the same token.
-- lease_expires_at and progress are in no index, so with the running partition's free space
-- this is a HOT update.
-- Returns (id, 'lost') for each lease lost and (id, 'cancel') for each renewed job someone
-- asked to cancel.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
input AS (
    SELECT *
    FROM unnest(
        %(ids)b::int8[], %(tokens)b::text[], %(has_progress)b::bool[], %(progress)b::float8[],
        %(notes)b::text[]
    ) AS i (id, token, has_progress, progress, note)
),
held AS (
    SELECT j.id
    FROM jobs AS j JOIN input AS i ON i.id = j.id AND i.token = j.token
    WHERE j.status = 'running'
),
locked AS (
    SELECT j.id
    FROM jobs AS j JOIN input AS i ON i.id = j.id AND i.token = j.token
    WHERE j.status = 'running'
    FOR UPDATE OF j SKIP LOCKED
),
renewed AS (
    UPDATE jobs AS j
    SET lease_expires_at = clock.now + j.lease,
        progress = CASE WHEN i.has_progress THEN i.progress ELSE j.progress END,
        progress_note = CASE WHEN i.has_progress THEN i.note ELSE j.progress_note END
    FROM locked AS l, input AS i, clock
    WHERE j.status = 'running' AND j.id = l.id AND i.id = l.id
    RETURNING j.id, j.cancel_requested_at IS NOT NULL AS asked
),
durability AS (
    SELECT set_config('synchronous_commit', CASE
               WHEN %(async_commit)s::bool THEN 'off' ELSE current_setting('synchronous_commit')
           END, true) AS mode
)
SELECT i.id, 'lost'
FROM input AS i
WHERE NOT EXISTS (SELECT 1 FROM held AS h WHERE h.id = i.id)
  AND (SELECT count(*) FROM durability) >= 0
UNION ALL
SELECT r.id, 'cancel' FROM renewed AS r WHERE r.asked;


-- name: leases_reap
-- Recover running jobs whose lease lapsed: a job someone asked to cancel is cancelled, an
-- at_most_once job or one without attempts left fails, the rest are due again at once.
-- The running partition is small (bounded by the
-- workers' total concurrency), so it is scanned rather than indexed by lease_expires_at
-- (which would make every renewal a non-HOT update). SKIP LOCKED: a job whose settlement is
-- in flight is left to it, and two reapers share the work.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
lapsed AS (
    SELECT j.id
    FROM jobs_running AS j, clock
    WHERE j.lease_expires_at < clock.now
    ORDER BY j.lease_expires_at, j.id
    LIMIT %(limit)s::int8
    FOR UPDATE OF j SKIP LOCKED
),
reaped AS (
    UPDATE jobs AS j
    SET status = CASE
                     WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                     WHEN j.delivery = 'at_most_once' OR j.attempts >= j.max_attempts
                     THEN 'failed' ELSE 'pending'
                 END,
        error = CASE
                    WHEN j.cancel_requested_at IS NOT NULL THEN %(cancel_error)s::text
                    WHEN j.delivery = 'at_most_once' THEN %(at_most_once_error)s::text
                    ELSE %(lease_error)s::text
                END,
        finished_at = CASE
                          WHEN j.cancel_requested_at IS NOT NULL OR j.delivery = 'at_most_once'
                               OR j.attempts >= j.max_attempts
                          THEN clock.now
                      END,
        run_at = CASE
                     WHEN j.cancel_requested_at IS NOT NULL OR j.delivery = 'at_most_once'
                          OR j.attempts >= j.max_attempts
                     THEN j.run_at ELSE clock.now
                 END,
        token = NULL,
        lease_expires_at = NULL
    FROM lapsed, clock
    WHERE j.status = 'running' AND j.id = lapsed.id
    RETURNING j.id, j.status, j.queue, j.idempotency_key
),
freed AS (
    DELETE FROM job_keys AS k
    USING reaped AS r
    WHERE r.status IN ('failed', 'cancelled')
      AND k.queue = r.queue AND k.key = r.idempotency_key AND k.job_id = r.id
),
counted AS (
    INSERT INTO job_counts AS jc (queue, status, n)
    SELECT queue, status, count(*)
    FROM reaped
    WHERE status IN ('failed', 'cancelled')
    GROUP BY queue, status
    ORDER BY queue, status
    ON CONFLICT (queue, status) DO UPDATE SET n = jc.n + excluded.n
),
-- A job back to pending is due now; a finished one freed a slot of its queue: wake its workers.
notified AS (
    SELECT pg_notify('jobyard', current_schema() || ':' || d.queue) AS sent
    FROM (SELECT DISTINCT queue FROM reaped) AS d
),
durability AS (
    SELECT set_config('synchronous_commit', CASE
               WHEN %(async_commit)s::bool THEN 'off' ELSE current_setting('synchronous_commit')
           END, true) AS mode
)
SELECT id, status
FROM reaped
WHERE (SELECT count(*) FROM notified) + (SELECT count(*) FROM durability) >= 0
ORDER BY id;


-- name: queues_configure
INSERT INTO queues (name, max_concurrency, max_attempts, backoff, max_pending, paused, retention)
VALUES (%(name)s, %(max_concurrency)s::int4, %(max_attempts)s::int4, %(backoff)s::text,
        %(max_pending)s::int4, %(paused)s::bool, %(retention)s::float8)
ON CONFLICT (name) DO UPDATE
SET max_concurrency = excluded.max_concurrency,
    max_attempts = excluded.max_attempts,
    backoff = excluded.backoff,
    max_pending = excluded.max_pending,
    paused = excluded.paused,
    retention = excluded.retention;


-- name: queues_list
SELECT name, max_concurrency, max_attempts, backoff, max_pending, paused, retention
FROM queues
ORDER BY name;


-- name: workers_beat
-- Register or refresh (or, stopping, remove) one worker, and forget the ones silent for longer
-- than their own forget_after. The forgetting skips the beating worker's own row: one
-- statement must not both delete and upsert a row.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
forgotten AS (
    DELETE FROM workers AS w
    USING clock
    WHERE w.id <> %(id)s::text AND w.last_seen < clock.now - w.forget_after
),
stopped AS (
    DELETE FROM workers WHERE id = %(id)s::text AND %(stopping)s::bool
),
beat AS (
    INSERT INTO workers (id, host, pid, queues, concurrency, started_at, last_seen, forget_after)
    SELECT %(id)s::text, %(host)s::text, %(pid)s::int4, %(queues)b::text[],
           %(concurrency)s::int4, %(started_at)s::float8, clock.now, %(forget_after)s::float8
    FROM clock
    WHERE NOT %(stopping)s::bool
    ON CONFLICT (id) DO UPDATE
    SET host = excluded.host, pid = excluded.pid, queues = excluded.queues,
        concurrency = excluded.concurrency, started_at = excluded.started_at,
        last_seen = excluded.last_seen, forget_after = excluded.forget_after
)
SELECT 1;


-- name: workers_list
-- The live workers; those silent for longer than their own forget_after are deleted on the
-- way (a killed worker cannot unregister, and there may be no other worker left to forget it).
-- The SELECT sees the rows as they were before the DELETE, hence its own filter.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
gone AS (
    DELETE FROM workers AS w
    USING clock
    WHERE w.last_seen < clock.now - w.forget_after
    RETURNING w.id
)
SELECT w.id, w.host, w.pid, w.queues, w.concurrency, w.started_at, w.last_seen
FROM workers AS w, clock
WHERE w.last_seen >= clock.now - w.forget_after
  AND (SELECT count(*) FROM gone) >= 0
ORDER BY w.started_at, w.id;


-- name: stats_get
-- Rows of (queue, kind, n): kind is a status (a count), 'configured' (a queue with settings),
-- or 'recent' (completions in the last minute). An empty queues array means every queue.
-- Only the small pending and running partitions are counted; `status IN (...)` of constants
-- prunes the others at plan time.
SELECT queue, status, count(*)
FROM jobs
WHERE status IN ('pending', 'running')
  AND (cardinality(%(queues)b::text[]) = 0 OR queue = ANY(%(queues)b::text[]))
GROUP BY queue, status
UNION ALL
-- Finished and waiting jobs are not counted: their counts are kept with the moves
-- (0004_counts.sql, 0006_workflows.sql).
SELECT queue, status, n
FROM job_counts
WHERE n <> 0 AND (cardinality(%(queues)b::text[]) = 0 OR queue = ANY(%(queues)b::text[]))
UNION ALL
SELECT name, 'configured', 0
FROM queues
WHERE cardinality(%(queues)b::text[]) = 0 OR name = ANY(%(queues)b::text[])
UNION ALL
-- Through the finished_at index, whatever the planner guesses (see 0004_counts.sql).
SELECT r.queue, 'recent', r.n
FROM jobyard_completed_since(
    coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) - 60,
    %(queues)b::text[]
) AS r;


-- name: autovacuum_setting
SELECT current_setting('autovacuum');


-- name: tidy_lock
-- A session advisory lock on the maintenance's own autocommit connection, taken without
-- waiting: one worker vacuums at a time, the others skip their turn.
SELECT pg_try_advisory_lock(hashtextextended(%(key)s::text, 0));


-- name: tidy_unlock
SELECT pg_advisory_unlock(hashtextextended(%(key)s::text, 0));


-- name: tidy_dead
-- Dead, live and inserted-since-the-last-vacuum rows of the tables that churn (the statistics
-- collector's figures, flushed by each session about once a second: estimates, which is all a
-- threshold needs).
SELECT c.relname, s.n_dead_tup, s.n_live_tup, s.n_ins_since_vacuum
FROM pg_stat_user_tables AS s
JOIN pg_class AS c ON c.oid = s.relid
WHERE s.relid IN (
    to_regclass('jobs_waiting'), to_regclass('jobs_pending'), to_regclass('jobs_running'),
    to_regclass('job_keys'), to_regclass('job_counts'), to_regclass('workers')
)
ORDER BY c.relname;


-- Every move of a job between statuses deletes its row from one partition and inserts it in
-- another, so the waiting, pending and running partitions (and job_keys, job_counts, workers)
-- gather a dead row per move, and the waiting one another per decrement of a join's counter.
-- Autovacuum, where it runs and keeps up, removes them; where it is off or lags, claims wade
-- through dead index entries and the partitions grow without bound. The
-- worker's maintenance runs these when a table passes its threshold (StoreTidyParams) in dead
-- rows, or in rows inserted since its last vacuum: a vacuum also records the table's size for
-- the planner, and one that found the pending partition empty just before a large batch
-- arrived left it believing that partition empty (every claim then chose a plan that read the
-- whole backlog), so a partition that grew is vacuumed again soon.
-- SKIP_LOCKED: never wait for another vacuum or a migration. INDEX_CLEANUP ON: the dead entries
-- of the claim index are what slows claims, never leave them for later. TRUNCATE false: the
-- final truncation would take an ACCESS EXCLUSIVE lock that blocks claims; a partition vacuumed
-- this often reuses its free space instead.

-- name: vacuum_jobs_waiting
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) jobs_waiting;


-- name: vacuum_jobs_pending
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) jobs_pending;


-- name: vacuum_jobs_running
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) jobs_running;


-- name: vacuum_job_keys
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) job_keys;


-- name: vacuum_job_counts
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) job_counts;


-- name: vacuum_workers
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) workers;


-- name: clock_now
SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8);


-- name: schedules_sync
-- Make the stored schedules those given. An unchanged one (same ticks: cron, every, timezone;
-- same job text) keeps its stored next and last run, so a restart neither fires a tick twice nor
-- skips one; a new or changed one starts at the given next run. The others are deactivated, not
-- deleted. paused is never written here: a deploy cannot resume a paused schedule.
WITH given AS (
    SELECT *
    FROM unnest(
        %(names)b::text[], %(crons)b::text[], %(jobs)b::text[], %(next_run_ats)b::float8[],
        %(everys)b::float8[], %(timezones)b::text[], %(catch_ups)b::text[]
    ) AS g (name, cron, job, next_run_at, every, timezone, catch_up)
),
deactivated AS (
    UPDATE recurring_jobs
    SET active = false
    WHERE active AND name <> ALL(%(names)b::text[])
),
upserted AS (
    INSERT INTO recurring_jobs AS r
        (name, cron, job, active, next_run_at, last_run_at, every, timezone, catch_up)
    SELECT name, cron, job, true, next_run_at, NULL, every, timezone, catch_up FROM given
    ON CONFLICT (name) DO UPDATE
    SET active = true,
        next_run_at = CASE
            WHEN r.cron = excluded.cron AND r.job = excluded.job
                 AND r.every IS NOT DISTINCT FROM excluded.every
                 AND r.timezone = excluded.timezone
            THEN r.next_run_at
            ELSE excluded.next_run_at
        END,
        last_run_at = CASE
            WHEN r.cron = excluded.cron AND r.job = excluded.job
                 AND r.every IS NOT DISTINCT FROM excluded.every
                 AND r.timezone = excluded.timezone
            THEN r.last_run_at
        END,
        cron = excluded.cron,
        job = excluded.job,
        every = excluded.every,
        timezone = excluded.timezone,
        catch_up = excluded.catch_up
)
SELECT 1;


-- name: schedules_list
SELECT name, cron, job, active, next_run_at, last_run_at, every, timezone, catch_up, paused
FROM recurring_jobs
ORDER BY name;


-- name: schedules_advance
-- The compare-and-set of a tick (1 ms tolerance: a float may round on its way through another
-- store). The UPDATE locks the row, so a concurrent firer waits and then re-reads the moved
-- next_run_at (READ COMMITTED rechecks the updated row) and matches nothing. It runs in the
-- transaction that inserts the tick's job, so a refused insert (QueueFull) undoes it.
UPDATE recurring_jobs
SET next_run_at = %(next_at)s::float8, last_run_at = %(fire_at)s::float8
WHERE name = %(name)s::text
  AND active
  AND NOT paused
  AND next_run_at IS NOT NULL
  AND abs(next_run_at - %(fire_at)s::float8) <= 0.001
RETURNING job;


-- name: schedules_skip
-- The same compare-and-set, dropping the ticks from fire_at up to next_at: no job, and
-- last_run_at stays the last tick that fired.
UPDATE recurring_jobs
SET next_run_at = %(next_at)s::float8
WHERE name = %(name)s::text
  AND active
  AND NOT paused
  AND next_run_at IS NOT NULL
  AND abs(next_run_at - %(fire_at)s::float8) <= 0.001;


-- name: schedules_pause
-- Pause, or resume: a paused schedule that resumes starts over at next_run_at (the ticks it
-- missed while paused never fire); resuming one that is not paused changes nothing.
UPDATE recurring_jobs
SET next_run_at = CASE
        WHEN NOT %(paused)s::boolean AND paused THEN %(next_run_at)s::float8
        ELSE next_run_at
    END,
    paused = %(paused)s::boolean
WHERE name = %(name)s::text;


-- name: schema_create
-- Composed with psycopg.sql (the schema is an identifier, which no parameter can carry).
CREATE SCHEMA IF NOT EXISTS {schema};


-- name: migrations_lock
-- A session advisory lock, so two hosts running `jobyard migrate` at once take turns.
SELECT pg_advisory_lock(hashtextextended(%(key)s::text, 0));


-- name: migrations_unlock
SELECT pg_advisory_unlock(hashtextextended(%(key)s::text, 0));


-- name: migrations_table
CREATE TABLE IF NOT EXISTS jobyard_migrations (
    name       text   PRIMARY KEY,
    applied_at float8 NOT NULL DEFAULT extract(epoch FROM clock_timestamp())
);


-- name: migrations_applied
SELECT name FROM jobyard_migrations ORDER BY name;


-- name: migrations_record
INSERT INTO jobyard_migrations (name) VALUES (%(name)s::text);


-- name: current_schema
SELECT current_schema();


-- name: listen
LISTEN jobyard;


-- name: ping
SELECT 1;


-- name: lend
-- Opens the transaction of a connection lent to a handler, and gives the handler's own
-- statements PostgreSQL's default plan choice for it (pooled connections force generic plans,
-- which suit jobyard's statements, not necessarily the handler's).
SELECT set_config('plan_cache_mode', 'auto', true);


-- name: lent_reset
-- A connection lent to a handler goes back to the pool as it came: whatever the handler set
-- for its session (search_path, timeouts), listened to, locked or made temporary is undone.
-- (Not DISCARD ALL: it would also drop the prepared statements psycopg knows about.)
CLOSE ALL;
RESET ALL;
UNLISTEN *;
SELECT pg_advisory_unlock_all();
DISCARD TEMP;


-- name: savepoint
SAVEPOINT jobyard;


-- name: savepoint_release
RELEASE SAVEPOINT jobyard;


-- name: savepoint_rollback
ROLLBACK TO SAVEPOINT jobyard;


-- name: search_path_save
-- On a caller's connection (transactional enqueue and completion) the jobyard schema may not
-- be on its search_path: remember the caller's own, set ours (search_path_set), and put the
-- caller's back afterwards (search_path_restore). All transaction-local, as SET LOCAL is.
SELECT set_config('jobyard.saved_search_path', current_setting('search_path'), true);


-- name: search_path_set
SELECT set_config('search_path', %(search_path)s::text, true);


-- name: search_path_restore
SELECT set_config('search_path', current_setting('jobyard.saved_search_path'), true);
