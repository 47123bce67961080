-- Jobs: enqueue (single, batch, workflow), read, list, cancel, re-drive and purge.
-- (Conventions for every file here: README.md in this folder.)

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

-- name: _fair_turn
-- (a fragment) A new job's turn: 0 unless its queue (the row xq) is fair; then start-time fair
-- queueing: one after the key's latest pending job (keyless jobs take theirs as one more key),
-- never before the queue's current turn (turn_round: the highest turn claimed; the claim goes
-- by rounds of 4 turns, 0011), and one more for each earlier job of the key in the
-- same batch (x.ord). Needs x (queue, limit_key, ord) and xq (the queue row, may be NULL).
-- The key's latest turn is the last entry of jobs_pending_turns for (queue, key), read
-- backwards; keyless jobs are the key '' there (0014_keyless_turns.sql: an equality, which
-- `limit_key IS NULL` is not to the planner).
CASE WHEN xq.fair THEN greatest(
    coalesce((SELECT t.turn FROM jobs_pending AS t
              WHERE t.queue = x.queue AND coalesce(t.limit_key, '') = coalesce(x.limit_key, '')
                AND t.turn > 0
              ORDER BY t.turn DESC LIMIT 1), 0) + 1,
    xq.turn_round
) + row_number() OVER (PARTITION BY x.queue, x.limit_key ORDER BY x.ord) - 1
ELSE 0 END

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
        %(deliveries)b::text[], %(keys)b::text[], %(parents)b::text[], %(limit_keys)b::text[]
    ) WITH ORDINALITY AS i (
        name, queue, payload, priority, delay, run_at, max_attempts, backoff, timeout, lease,
        delivery, key, parent_id, limit_key, ord
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
        lease, delivery, idempotency_key, parent_id, run_at, created_at, limit_key, turn
    )
    SELECT x.id, 'pending', x.queue, x.name, x.payload, x.priority, 0,
           coalesce(x.max_attempts, xq.max_attempts, %(default_max_attempts)s::int4),
           coalesce(x.backoff, xq.backoff), x.timeout, x.lease, x.delivery, x.key, x.parent_id,
           coalesce(x.run_at, clock.now + x.delay), clock.now, x.limit_key, {{_fair_turn}}
    FROM created AS x
    CROSS JOIN clock
    LEFT JOIN queues AS xq ON xq.name = x.queue
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

-- name: _notify_inserted
-- (a fragment: the `notified` CTE of an insert) One NOTIFY per queue per statement, delivered
-- only if the transaction commits. The payload is "schema:queue" on one channel, so a LISTEN
-- needs no dynamic identifier. Needs inserted (its queue column).
SELECT pg_notify('jobyard', current_schema() || ':' || d.queue) AS sent
FROM (SELECT DISTINCT queue FROM inserted) AS d

-- name: jobs_insert_one
-- One plain job (no idempotency key, no limit key, no workflow) into a queue that has no
-- max_pending and is not fair: what jobs_insert writes for it (its turn is 0, no cap to check),
-- with scalar parameters and none of the batch machinery (a sixth of the server time from
-- cold, and no arrays for the client to encode). Otherwise nothing is written and `go` says
-- so: the backend sends the job to jobs_insert.
-- Returns one row: (id, go); id NULL when go is false.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
q AS (
    SELECT * FROM queues WHERE name = %(queue)s::text
),
go AS (
    SELECT NOT EXISTS (SELECT 1 FROM q WHERE q.max_pending IS NOT NULL OR q.fair) AS ok
),
-- Straight into the pending partition, as jobs_insert does.
inserted AS (
    INSERT INTO jobs_pending (
        id, status, queue, name, payload, priority, attempts, max_attempts, backoff, timeout,
        lease, delivery, parent_id, run_at, created_at
    )
    SELECT nextval('jobs_id_seq'), 'pending', %(queue)s::text, %(name)s::text,
           %(payload)s::text, %(priority)s::int4, 0,
           coalesce(%(max_attempts)s::int4, (SELECT max_attempts FROM q),
                    %(default_max_attempts)s::int4),
           coalesce(%(backoff)s::text, (SELECT backoff FROM q)), %(timeout)s::float8,
           %(lease)s::float8, %(delivery)s::text, %(parent)s::text,
           coalesce(%(run_at)s::float8, clock.now + %(delay)s::float8), clock.now
    FROM clock
    WHERE (SELECT ok FROM go)
    RETURNING id, queue
),
notified AS (
    {{_notify_inserted}}
)
SELECT (SELECT id FROM inserted), (SELECT ok FROM go)
WHERE (SELECT count(*) FROM notified) >= 0

-- name: jobs_replace
-- on_conflict = 'replace', run right after jobs_insert (in the caller's transaction, when it has
-- one) for the jobs it answered with a holder: each holder still pending takes the new payload,
-- and the new run_at where the new job set one (moved). A holder that is running (or finished
-- since) is left as it is. One row per job replaced. A claim moving a holder to jobs_running
-- under this statement makes it fail with a serialization error; the backend runs it again, and
-- its fresh snapshot finds the holder running. Each id comes once (the last replace of a key in
-- the batch wins, chosen by the backend).
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
replaced AS (
    UPDATE jobs_pending AS j
    SET payload = r.payload,
        run_at = CASE WHEN r.moved THEN coalesce(r.run_at, clock.now + r.delay) ELSE j.run_at END
    FROM unnest(%(ids)b::int8[], %(payloads)b::text[], %(moved)b::bool[], %(run_ats)b::float8[],
                %(delays)b::float8[]) AS r (id, payload, moved, run_at, delay)
    CROSS JOIN clock
    WHERE j.id = r.id
    RETURNING j.id, j.queue, r.moved
),
notified AS (
    SELECT pg_notify('jobyard', current_schema() || ':' || d.queue) AS sent
    FROM (SELECT DISTINCT queue FROM replaced WHERE moved) AS d
)
SELECT r.id, (SELECT count(*) FROM notified) FROM replaced AS r;

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
        %(nexts)b::text[], %(limit_keys)b::text[]
    ) WITH ORDINALITY AS i (
        name, queue, payload, priority, delay, run_at, max_attempts, backoff, timeout, lease,
        delivery, parent_id, workflow_id, after, next, limit_key, ord
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
           coalesce(f.run_at, clock.now + f.delay) AS due, clock.now,
           (SELECT {{_fair_turn}} FROM (SELECT f.queue, f.limit_key, f.ord) AS x, queues AS xq
            WHERE xq.name = f.queue) AS turn
    FROM fresh AS f
    CROSS JOIN clock
    CROSS JOIN positions AS m
    LEFT JOIN queues AS q ON q.name = f.queue
),
inserted AS (
    INSERT INTO jobs_pending (
        id, status, queue, name, payload, priority, attempts, max_attempts, backoff, timeout,
        lease, delivery, parent_id, run_at, created_at, workflow_id, dependents, holds,
        limit_key, turn
    )
    SELECT p.id, 'pending', p.queue, p.name, p.payload, p.priority, 0, p.attempts_max,
           p.backoff_policy, p.timeout, p.lease, p.delivery, p.parent_id, p.due, p.now,
           p.workflow_id, p.dependents, cardinality(p.dependents), p.limit_key,
           coalesce(p.turn, 0)
    FROM placed AS p
    WHERE p.depends_on IS NULL
    RETURNING id, queue
),
-- A step waits in its own partition, counting its inputs not yet completed (jobs_ack).
parked AS (
    INSERT INTO jobs_waiting (
        id, status, queue, name, payload, priority, attempts, max_attempts, backoff, timeout,
        lease, delivery, parent_id, run_at, created_at, workflow_id, dependents, depends_on,
        waits, holds, limit_key, turn
    )
    SELECT p.id, 'waiting', p.queue, p.name, p.payload, p.priority, 0, p.attempts_max,
           p.backoff_policy, p.timeout, p.lease, p.delivery, p.parent_id, p.due, p.now,
           p.workflow_id, p.dependents, p.depends_on, cardinality(p.depends_on),
           cardinality(p.dependents), p.limit_key, coalesce(p.turn, 0)
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
notified AS (
    {{_notify_inserted}}
)

-- name: _job_record
id, name, queue, payload, status, priority, attempts, max_attempts, run_at, created_at,
       started_at, finished_at, worker_id, result, error, parent_id, idempotency_key, delivery,
       cancel_requested_at, cancelled_by, progress, progress_note, workflow_id, depends_on,
       dependents, limit_key

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

-- name: _search_filters
-- The filters of every jobs_search statement, checked on the jobs its walk `w` reads.
(%(queue)s::text IS NULL OR w.queue = %(queue)s::text)
  AND (%(status)s::text IS NULL OR w.status = %(status)s::text)
  AND (%(name)s::text IS NULL OR w.name = %(name)s::text)
  AND (%(key)s::text IS NULL OR w.idempotency_key = %(key)s::text)
  AND (%(contains)s::text IS NULL OR strpos(w.payload, %(contains)s::text) > 0)
  AND (%(error_contains)s::text IS NULL
       OR strpos(coalesce(w.error, ''), %(error_contains)s::text) > 0)

-- name: jobs_search
-- A page by cursor (JobsSearchParams), every status: the walk is a merge of the partitions'
-- primary keys backwards from the cursor (a range: the caller sends the largest id for none,
-- never NULL, so a generic plan still seeks), cut at %(scan)s rows whatever they are, so a page
-- costs at most that many rows however rare its matches; the walk is pulled only until the
-- page is full (a subquery, not a CTE read twice). Returns the hits' ids, newest first.
SELECT w.id
FROM (
    SELECT id, queue, status, name, idempotency_key, payload, error
    FROM jobs
    WHERE id < %(before)s::int8
    ORDER BY id DESC
    LIMIT %(scan)s::int8
) AS w
WHERE {{_search_filters}}
ORDER BY w.id DESC
LIMIT %(limit)s::int8;

-- name: jobs_search_end
-- How many jobs the walk of jobs_search went through, and the lowest id of them (where a walk
-- that stopped at %(scan)s goes on): the primary keys only (an index-only range), down to
-- %(low)s (the last hit of a full page, else 0).
SELECT count(*), min(w.id)
FROM (
    SELECT id
    FROM jobs
    WHERE id < %(before)s::int8 AND id >= %(low)s::int8
    ORDER BY id DESC
    LIMIT %(scan)s::int8
) AS w;

-- name: jobs_search_status
-- jobs_search of one status: a plain `status = $n` prunes the other partitions (see
-- jobs_list_status), and the walk is that partition's primary key backwards.
SELECT w.id
FROM (
    SELECT id, queue, status, name, idempotency_key, payload, error
    FROM jobs
    WHERE status = %(status)s::text AND id < %(before)s::int8
    ORDER BY id DESC
    LIMIT %(scan)s::int8
) AS w
WHERE {{_search_filters}}
ORDER BY w.id DESC
LIMIT %(limit)s::int8;

-- name: jobs_search_status_end
-- jobs_search_end of jobs_search_status.
SELECT count(*), min(w.id)
FROM (
    SELECT id
    FROM jobs
    WHERE status = %(status)s::text AND id < %(before)s::int8 AND id >= %(low)s::int8
    ORDER BY id DESC
    LIMIT %(scan)s::int8
) AS w;

-- name: jobs_search_key
-- jobs_search with an idempotency key: the walk is the partial index jobs_key of each partition
-- (the jobs that have that key, whatever their status).
SELECT w.id
FROM (
    SELECT id, queue, status, name, idempotency_key, payload, error
    FROM jobs
    WHERE idempotency_key = %(key)s::text AND id < %(before)s::int8
    ORDER BY id DESC
    LIMIT %(scan)s::int8
) AS w
WHERE {{_search_filters}}
ORDER BY w.id DESC
LIMIT %(limit)s::int8;

-- name: jobs_search_key_end
-- jobs_search_end of jobs_search_key.
SELECT count(*), min(w.id)
FROM (
    SELECT id
    FROM jobs
    WHERE idempotency_key = %(key)s::text AND id < %(before)s::int8 AND id >= %(low)s::int8
    ORDER BY id DESC
    LIMIT %(scan)s::int8
) AS w;

-- name: dead_groups
-- The dead letter grouped (Backend.dead_groups): the newest %(scan)s failed jobs (of %(queue)s),
-- the failed partition's primary key backwards, grouped by queue, name and the line stored as
-- each entered the partition (dead_line, 0010_dead_lines.sql: base.error_line of the error's
-- last 1,000 characters), so no error is read. Returns (queue, name, line, count, newest,
-- oldest, the newest job's id (the last enqueued), walked): walked is one more than %(scan)s
-- when the walk did not reach the end; the walk's one extra row, its lowest, is left out.
WITH walk AS (
    SELECT j.id, j.queue, j.name, j.finished_at, j.dead_line
    FROM jobs_failed AS j
    WHERE %(queue)s::text IS NULL OR j.queue = %(queue)s::text
    ORDER BY j.id DESC
    LIMIT %(scan)s::int8 + 1
)
SELECT queue, name, coalesce(dead_line, ''), count(*), max(finished_at), min(finished_at),
       max(id), (SELECT count(*) FROM walk)
FROM walk
WHERE (SELECT count(*) FROM walk) <= %(scan)s::int8 OR id > (SELECT min(id) FROM walk)
GROUP BY queue, name, dead_line;

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

-- name: jobs_cancel_many
-- jobs_cancel for many jobs in one statement (%(ids)s): the jobs it would refuse (finished, or
-- running with pending_only) and unknown ids are left out. Returns the id of each job changed.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
-- The statuses before (see jobs_cancel): those of the snapshot are those of the rows changed.
-- Materialized and joined by the UPDATE itself, which returns each row's old status: inlined
-- and joined again below, it was planned as a scan of the partitions per cancelled row (with
-- no statistics the planner takes them for tiny), 18 s for 2,000 jobs.
before AS MATERIALIZED (
    SELECT id, status FROM jobs WHERE id = ANY(%(ids)b::int8[])
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
    FROM clock, before AS b
    WHERE j.id = b.id AND j.id = ANY(%(ids)b::int8[])
      AND (j.status IN ('waiting', 'pending')
           OR (j.status = 'running' AND NOT %(pending_only)s::bool))
    RETURNING j.id, j.queue, j.status, j.idempotency_key, b.status AS was
),
freed AS (
    DELETE FROM job_keys AS k
    USING cancelled AS c
    WHERE c.status = 'cancelled'
      AND k.queue = c.queue AND k.key = c.idempotency_key AND k.job_id = c.id
),
counted AS (
    INSERT INTO job_counts AS jc (queue, status, n)
    SELECT c.queue, m.status, sum(m.n)
    FROM cancelled AS c, (VALUES ('cancelled', 1), ('waiting', -1)) AS m (status, n)
    WHERE c.status = 'cancelled' AND (m.status = 'cancelled' OR c.was = 'waiting')
    GROUP BY c.queue, m.status
    ORDER BY c.queue, m.status
    ON CONFLICT (queue, status) DO UPDATE SET n = jc.n + excluded.n
)
SELECT id FROM cancelled;

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

-- name: jobs_resume_lock
-- Sent before jobs_resume in the same implicit transaction (one pipeline): share-lock the
-- inputs of the jobs it may move, in id order. An ack that completed one of them before holds
-- its row lock until it commits, and this waits for it, so jobs_resume's own snapshot, taken
-- after, counts it completed. An ack that completes one after this waits for the resume to
-- commit, and its release of the steps (jobyard_release, a volatile function whose UPDATE takes
-- its snapshot then, after the wait) sees the step waiting again and counts the input off:
-- exactly once either way. (A lock meeting a row a concurrent completion moved to another
-- partition fails with a serialization error; the backend runs both statements again.)
SELECT i.id
FROM jobs AS j
CROSS JOIN LATERAL unnest(j.depends_on) AS d (id)
JOIN jobs AS i ON i.id = d.id
WHERE j.id = ANY(%(ids)b::int8[]) AND j.status IN ('failed', 'cancelled')
ORDER BY i.id
FOR SHARE OF i;

-- name: jobs_resume
-- Re-drive the failed or cancelled jobs of %(ids)s without an idempotency key as jobs_retry
-- does, each pending if all its inputs completed (an input that is gone counts as not
-- completed), else waiting with waits = its inputs not completed (after jobs_resume_lock: see
-- there). The waiting ones join job_counts' waiting count; the pending ones wake their queue.
-- Returns the id of each job moved.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
-- Materialized and joined by the UPDATE by id, as in jobs_cancel_many: the statuses before.
target AS MATERIALIZED (
    SELECT j.id, j.queue, j.status,
           (SELECT count(*)::integer
            FROM unnest(j.depends_on) AS d (id)
            WHERE NOT EXISTS (
                SELECT 1 FROM jobs AS i WHERE i.id = d.id AND i.status = 'completed'
            )) AS waits
    FROM jobs AS j
    WHERE j.id = ANY(%(ids)b::int8[]) AND j.status IN ('failed', 'cancelled')
      AND j.idempotency_key IS NULL
),
moved AS (
    UPDATE jobs AS j
    SET status = CASE WHEN t.waits > 0 THEN 'waiting' ELSE 'pending' END,
        waits = CASE WHEN j.depends_on IS NULL THEN j.waits ELSE t.waits END,
        attempts = 0, run_at = clock.now, finished_at = NULL, result = NULL,
        cancel_requested_at = NULL, cancelled_by = NULL, progress = NULL, progress_note = NULL
    FROM target AS t, clock
    WHERE j.id = t.id AND j.id = ANY(%(ids)b::int8[]) AND j.status IN ('failed', 'cancelled')
    RETURNING j.id, j.queue, j.status, t.status AS was
),
counted AS (
    INSERT INTO job_counts AS jc (queue, status, n)
    SELECT d.queue, d.status, sum(d.n)
    FROM (
        SELECT m.queue, m.was AS status, -1 AS n FROM moved AS m
        UNION ALL
        SELECT m.queue, 'waiting', 1 FROM moved AS m WHERE m.status = 'waiting'
    ) AS d
    GROUP BY d.queue, d.status
    ORDER BY d.queue, d.status
    ON CONFLICT (queue, status) DO UPDATE SET n = jc.n + excluded.n
),
notified AS (
    SELECT pg_notify('jobyard', current_schema() || ':' || p.queue) AS sent
    FROM (SELECT DISTINCT m.queue FROM moved AS m WHERE m.status = 'pending') AS p
)
SELECT m.id FROM moved AS m WHERE (SELECT count(*) FROM notified) >= 0;

-- name: jobs_retry_many
-- jobs_retry for many jobs in one statement (the dead letter's bulk retry): each failed or
-- cancelled job of %(ids)s goes back to pending, attempts reset, taking its idempotency key
-- back; a job that is not failed or cancelled, or whose key another pending or running job
-- holds (or one redriven before it in this batch: the lowest id takes it), is skipped. Rows
-- are locked in id order and the counts adjusted in (queue, status) order, as every statement
-- here does, so two of these never wait on each other in a cycle. Returns the ids redriven.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
target AS MATERIALIZED (
    SELECT j.id, j.queue, j.status, j.idempotency_key
    FROM jobs AS j
    WHERE j.status IN ('failed', 'cancelled') AND j.id = ANY(%(ids)b::int8[])
    ORDER BY j.id
    FOR UPDATE
),
keyed AS (
    INSERT INTO job_keys (queue, key, job_id)
    SELECT DISTINCT ON (t.queue, t.idempotency_key) t.queue, t.idempotency_key, t.id
    FROM target AS t
    WHERE t.idempotency_key IS NOT NULL
    ORDER BY t.queue, t.idempotency_key, t.id
    ON CONFLICT (queue, key) DO NOTHING
    RETURNING job_id
),
redriven AS (
    UPDATE jobs AS j
    SET status = 'pending', attempts = 0, run_at = clock.now, finished_at = NULL, result = NULL,
        cancel_requested_at = NULL, cancelled_by = NULL, progress = NULL, progress_note = NULL
    FROM target AS t, clock
    WHERE j.status IN ('failed', 'cancelled') AND j.id = t.id
      AND (t.idempotency_key IS NULL OR t.id IN (SELECT k.job_id FROM keyed AS k))
    RETURNING j.id, t.queue, t.status AS was
),
notified AS (
    SELECT pg_notify('jobyard', current_schema() || ':' || q.queue) AS sent
    FROM (SELECT DISTINCT r.queue FROM redriven AS r) AS q
),
counted AS (
    INSERT INTO job_counts AS jc (queue, status, n)
    SELECT r.queue, r.was, -count(*)
    FROM redriven AS r
    GROUP BY r.queue, r.was
    ORDER BY r.queue, r.was
    ON CONFLICT (queue, status) DO UPDATE SET n = jc.n + excluded.n
)
SELECT r.id FROM redriven AS r WHERE (SELECT count(*) FROM notified) >= 0;

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
{{_purge_rest}}

-- name: jobs_purge_ids
-- jobs_purge of the jobs among %(ids)s only (the dead letter's bulk purge, a batch at a time):
-- each partition's DELETE probes its primary key for the ids, and the shared rest
-- (_purge_rest) frees no input outside them. The same returns.
WITH RECURSIVE completed AS (
    DELETE FROM jobs_completed AS j
    WHERE 'completed' = ANY(%(statuses)b::text[])
      AND j.finished_at <= coalesce(%(now)s::float8,
                                    extract(epoch FROM statement_timestamp())::float8)
                           - %(older_than)s::float8
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND j.id = ANY(%(ids)b::int8[])
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
      AND j.id = ANY(%(ids)b::int8[])
    RETURNING j.id, j.queue, j.status, j.depends_on, j.dependents
),
cancelled AS (
    DELETE FROM jobs_cancelled AS j
    WHERE 'cancelled' = ANY(%(statuses)b::text[])
      AND j.finished_at <= coalesce(%(now)s::float8,
                                    extract(epoch FROM statement_timestamp())::float8)
                           - %(older_than)s::float8
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND j.id = ANY(%(ids)b::int8[])
    RETURNING j.id, j.queue, j.status, j.depends_on, j.dependents
),
{{_purge_rest}}

-- name: _purge_rest
-- What follows the partitions' DELETEs of jobs_purge and jobs_purge_ids: the workflow steps
-- downstream, the holds, the counts (see jobs_purge). %(ids)s: only those may be freed and
-- counted as kept (NULL: any).
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
           AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
           AND (%(ids)b::int8[] IS NULL OR j.id = ANY(%(ids)b::int8[])) AS goes
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
      AND (%(ids)b::int8[] IS NULL OR j.id = ANY(%(ids)b::int8[]))
)
-- (unheld and counted run to completion whether read or not, as every data-modifying CTE.)
SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM freed),
       (SELECT count(*) FROM waiting),
       (SELECT n FROM held) - (SELECT count(*) FROM freed);
