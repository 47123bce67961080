-- Leases: the claim, the outcome (ack), renewal and the reaper. The worker's hot path.
-- (Conventions for every file here: README.md in this folder.)

-- name: _limited_queues
-- (a fragment) The queues claimed from whose claims must be serialised: those with a limit the
-- claim counts (max_concurrency, a rate, key_concurrency, a key rate), of their own or of a
-- job name (job_limits). A fair queue alone needs no lock: its turns are an order, not a cap.
SELECT name FROM queues
WHERE name = ANY(%(queues)b::text[])
  AND (max_concurrency IS NOT NULL OR rate_count IS NOT NULL OR key_concurrency IS NOT NULL
       OR key_rate_count IS NOT NULL)
UNION
SELECT DISTINCT queue FROM job_limits WHERE queue = ANY(%(queues)b::text[])

-- name: jobs_claim_lock
-- Serialise the claimers of queues that have a limit (_limited_queues), across every host, so
-- the running counts and the rate buckets jobs_claim reads next are current (see
-- jobs_insert_lock for why the count is a separate statement in the same implicit
-- transaction). Unlimited queues take no lock and their claimers never wait for one another:
-- SKIP LOCKED alone keeps them apart; they do not even send this statement (see `go` in
-- jobs_claim). One row per lock taken.
SELECT pg_advisory_xact_lock(hashtextextended('jobyard:claim:' || current_schema() || ':' || name, 0))
FROM (
    {{_limited_queues}}
    ORDER BY name
) AS limited;

-- name: _gate_queues
-- The gate, per queue (a fragment: the rows of `gate` in jobs_claim): each queue claimed from
-- that is not paused, with the starts it has room for before counting this claim's own: the
-- least of the limit, what max_concurrency leaves and what the queue's rate bucket admits
-- (GCRA, base.Rate: floor((now - max(tat, now)) / interval + burst); no bucket row: a full
-- burst). Needs clock and go.
SELECT w.queue,
       least(
           %(limit)s::int8,
           CASE WHEN q.max_concurrency IS NULL THEN %(limit)s::int8
                ELSE greatest(q.max_concurrency - (
                    SELECT count(*) FROM jobs_running AS r WHERE r.queue = w.queue
                ), 0) END,
           CASE WHEN q.rate_count IS NULL THEN %(limit)s::int8
                ELSE coalesce((
                    SELECT {{_bucket_admits}} FROM limit_buckets AS b
                    WHERE b.queue = w.queue AND b.job = '' AND b.key = ''
                ), q.rate_burst) END
       ) AS room,
       q.key_concurrency, q.key_rate_count, q.key_rate_burst,
       EXISTS (SELECT 1 FROM job_limits AS jl WHERE jl.queue = w.queue) AS named
FROM unnest(%(queues)b::text[]) AS w (queue)
CROSS JOIN clock
LEFT JOIN queues AS q ON q.name = w.queue
WHERE q.paused IS NOT TRUE AND (SELECT ok FROM go)

-- name: _bucket_admits
-- (a fragment) The starts the rate bucket b admits now (GCRA, base.Rate); a bucket with no
-- row admits a full burst, hence coalesce((SELECT <this> ...), burst).
greatest(0, floor((clock.now - greatest(b.tat, clock.now)) / b.interval + b.burst + 1e-9))::int8

-- name: _gate
-- The gate, per job (a fragment): whether the pending job j of the queue row g (from
-- _gate_queues) is held back by no limit as of now, before counting this claim's own starts:
-- its key has a free slot and an open bucket under the queue's key limits, and its name's
-- limits in the queue (job_limits) hold neither its name's bucket nor its key. A bucket is
-- closed while tat - (burst - 1) * interval > now. Each test is an index probe, and none runs
-- for a queue without that limit (g.named: the queue has job limits at all).
(j.limit_key IS NULL OR (
    (g.key_concurrency IS NULL OR g.key_concurrency > (
        SELECT count(*) FROM jobs_running AS r
        WHERE r.queue = j.queue AND r.limit_key = j.limit_key
    ))
    AND (g.key_rate_count IS NULL OR NOT EXISTS (
        SELECT 1 FROM limit_buckets AS b
        WHERE b.queue = j.queue AND b.job = '' AND b.key = j.limit_key
          AND b.tat - (b.burst - 1) * b.interval > clock.now
    ))
))
AND (NOT g.named OR NOT EXISTS (
    SELECT 1 FROM job_limits AS jl
    WHERE jl.queue = j.queue AND jl.name = j.name AND (
        (jl.rate_count IS NOT NULL AND EXISTS (
            SELECT 1 FROM limit_buckets AS b
            WHERE b.queue = j.queue AND b.job = j.name AND b.key = ''
              AND b.tat - (b.burst - 1) * b.interval > clock.now
        ))
        OR (j.limit_key IS NOT NULL AND jl.key_concurrency IS NOT NULL AND jl.key_concurrency <= (
            SELECT count(*) FROM jobs_running AS r
            WHERE r.queue = j.queue AND r.limit_key = j.limit_key AND r.name = j.name
        ))
        OR (j.limit_key IS NOT NULL AND jl.key_rate_count IS NOT NULL AND EXISTS (
            SELECT 1 FROM limit_buckets AS b
            WHERE b.queue = j.queue AND b.job = j.name AND b.key = j.limit_key
              AND b.tat - (b.burst - 1) * b.interval > clock.now
        ))
    )
))

-- name: _claim_top
-- (a fragment: the `top` CTE of a limited claim) Per queue of the gate (_gate_queues), an index
-- scan of the claim index in claim order (priority, a fair queue's round, run_at, id) of at
-- most that queue's room of the due jobs the gate (_gate) lets through, skipping rows another
-- claimer has locked. Needs clock and gate.
SELECT p.*
FROM gate AS g CROSS JOIN clock CROSS JOIN LATERAL (
    SELECT j.id, j.queue, j.name, j.limit_key, j.priority, (j.turn - 1) / 4 AS fair_round,
           j.run_at
    FROM jobs_pending AS j
    WHERE j.queue = g.queue AND j.run_at <= clock.now AND g.room > 0 AND {{_gate}}
    ORDER BY j.priority DESC, (j.turn - 1) / 4, j.run_at, j.id
    LIMIT g.room
    FOR UPDATE OF j SKIP LOCKED
) AS p

-- name: _claim_picked
-- (a fragment: the `picked` and `claimed` CTEs of a claim whose `top` is already cut to what
-- each queue may take, with their commas) The best `limit` of top in claim order move to
-- running. Needs clock and top.
picked AS (
    SELECT id FROM top ORDER BY priority DESC, fair_round, run_at, id LIMIT %(limit)s::int8
),
claimed AS (
    {{_claim_move}}
),

-- name: _claim_move
-- (a fragment: the `claimed` CTE of a claim) The picked pending jobs (the CTE picked: their
-- ids) move to running: one more attempt, started now, for this worker, under a fresh token
-- and lease. Needs clock and picked.
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
          j.timeout, j.lease, j.token, j.delivery, j.parent_id, j.priority, j.run_at,
          j.turn, j.limit_key

-- name: _claim_takes
-- (a fragment: the `takes` CTE of jobs_claim, with its comma) The starts the jobs claimed made
-- in each rate bucket of theirs (the queue's, its keys', their names' and their names' keys'),
-- with the rate each was taken under. Needs claimed.
takes (queue, job, key, n, count, per, burst) AS (
    SELECT c.queue, '', '', count(*), q.rate_count, q.rate_per, q.rate_burst
    FROM claimed AS c JOIN queues AS q ON q.name = c.queue
    WHERE q.rate_count IS NOT NULL
    GROUP BY c.queue, q.rate_count, q.rate_per, q.rate_burst
    UNION ALL
    SELECT c.queue, '', c.limit_key, count(*), q.key_rate_count, q.key_rate_per, q.key_rate_burst
    FROM claimed AS c JOIN queues AS q ON q.name = c.queue
    WHERE q.key_rate_count IS NOT NULL AND c.limit_key IS NOT NULL
    GROUP BY c.queue, c.limit_key, q.key_rate_count, q.key_rate_per, q.key_rate_burst
    UNION ALL
    SELECT c.queue, c.name, '', count(*), jl.rate_count, jl.rate_per, jl.rate_burst
    FROM claimed AS c JOIN job_limits AS jl ON jl.queue = c.queue AND jl.name = c.name
    WHERE jl.rate_count IS NOT NULL
    GROUP BY c.queue, c.name, jl.rate_count, jl.rate_per, jl.rate_burst
    UNION ALL
    SELECT c.queue, c.name, c.limit_key, count(*), jl.key_rate_count, jl.key_rate_per,
           jl.key_rate_burst
    FROM claimed AS c JOIN job_limits AS jl ON jl.queue = c.queue AND jl.name = c.name
    WHERE jl.key_rate_count IS NOT NULL AND c.limit_key IS NOT NULL
    GROUP BY c.queue, c.name, c.limit_key, jl.key_rate_count, jl.key_rate_per, jl.key_rate_burst
),

-- name: _claim_taken
-- (a fragment: the `taken` CTE of a claim, with its comma) Every rate bucket of the jobs
-- claimed moves on by their count (takes): tat = max(tat, now) + n * interval (GCRA,
-- base.Rate), with the rate it was taken under. Needs clock and takes.
taken AS (
    INSERT INTO limit_buckets AS b (queue, job, key, tat, interval, burst)
    SELECT t.queue, t.job, t.key, clock.now + t.n * (t.per / t.count), t.per / t.count, t.burst
    FROM takes AS t CROSS JOIN clock
    ORDER BY t.queue, t.job, t.key
    ON CONFLICT (queue, job, key) DO UPDATE
    SET tat = greatest(b.tat, (SELECT now FROM clock)) + (excluded.tat - (SELECT now FROM clock)),
        interval = excluded.interval, burst = excluded.burst
    RETURNING b.queue, b.job, b.key, b.tat, b.interval, b.burst
),

-- name: _claim_opens
-- (a fragment: the `opens` CTE of a claim, with its comma; needs clock, claimed and taken)
-- When the claim came back short: the first instant a closed bucket of these queues opens,
-- seen after this claim's own takes (taken, or the stored row where it took nothing). A closed
-- bucket may hold back no job (a key with nothing pending): the worker then claims once for
-- nothing when it opens, one wake per bucket, which costs less than an index of every keyed
-- pending job would.
opens AS (
    SELECT min(o.at) - (SELECT now FROM clock) AS next_open
    FROM (
        SELECT t.tat - (t.burst - 1) * t.interval AS at FROM taken AS t
        UNION ALL
        SELECT b.tat - (b.burst - 1) * b.interval FROM limit_buckets AS b
        WHERE b.queue = ANY(%(queues)b::text[])
          AND NOT EXISTS (
              SELECT 1 FROM taken AS t
              WHERE t.queue = b.queue AND t.job = b.job AND t.key = b.key
          )
    ) AS o
    WHERE o.at > (SELECT now FROM clock)
      AND (SELECT count(*) FROM claimed) < %(limit)s::int8
),

-- name: _claim_limited_end
-- (a fragment: the end of a claim that keeps rate buckets, jobs_claim and jobs_claim_capped,
-- after their `takes` CTE) The buckets and the round move on, the claim commits as
-- _claim_durability says, and the claimed jobs come back in claim order, then the summary row
-- (id NULL) with next_open and whether the statement needs the lock or jobs_claim (`relock`).
-- Needs clock, go, claimed and takes.
{{_claim_taken}}
rounds AS (
    {{_claim_rounds}}
),
{{_claim_opens}}
durability AS (
    {{_claim_durability}}
)
SELECT * FROM (
    {{_claimed_rows}}
    UNION ALL
    SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, (SELECT next_open FROM opens), NOT (SELECT ok FROM go)
    WHERE (SELECT count(*) FROM taken) + (SELECT count(*) FROM rounds) >= 0
) AS out
ORDER BY priority DESC NULLS LAST, (turn - 1) / 4, run_at, id

-- name: _claim_rounds
-- (a fragment: the `rounds` CTE of a claim) A fair queue's round moves on to the highest turn
-- claimed (a job keeps the turn it took while its queue was fair). Needs claimed.
UPDATE queues AS q SET turn_round = m.turn
FROM (SELECT queue, max(turn) AS turn FROM claimed WHERE turn > 0 GROUP BY queue) AS m
WHERE q.name = m.queue AND q.turn_round < m.turn
RETURNING q.name

-- name: _claim_durability
-- (a fragment: the `durability` CTE of a claim) The claim commits without waiting for its WAL
-- flush (see README.md), unless it took an at_most_once job. Needs claimed.
SELECT set_config('synchronous_commit', CASE
           WHEN %(async_commit)s::bool
                AND NOT EXISTS (SELECT 1 FROM claimed WHERE delivery = 'at_most_once')
           THEN 'off' ELSE current_setting('synchronous_commit')
       END, true) AS mode

-- name: _claimed_rows
-- (a fragment) The claimed jobs as a claim returns them (the summary row follows, after UNION
-- ALL). Needs claimed and durability.
SELECT id, name, queue, payload, attempts, max_attempts, backoff, timeout, lease, token,
       delivery, parent_id, priority, turn, run_at, NULL::float8 AS next_open, false AS relock
FROM claimed
WHERE (SELECT count(*) FROM durability) >= 0

-- name: jobs_claim
-- Claim up to limit due jobs in one statement, through the gate. Per queue, a LATERAL index
-- scan of the claim index in claim order (priority, then a fair queue's round, run_at, id)
-- takes at most that queue's room (_gate_queues) of the jobs no limit holds back (_gate),
-- skipping rows another claimer has locked; then, among them, never more per key, per name and
-- per name and key than their slots and buckets admit (the windows below, applied one after the
-- other: each keeps a prefix of the claim order, so what survives all respects each), cut to
-- limit in the global order. A row locked here but not claimed stays pending and is unlocked at
-- commit. The same statement moves the rate buckets (taken) and a fair queue's round (rounds)
-- on, and, when it came back short, says when the first closed bucket of these queues that
-- holds back a due job opens (next_open, seconds).
-- Returns the claimed jobs in claim order, then one summary row (id NULL) with next_open and
-- whether it claimed nothing because it needs jobs_claim_lock first (see `go`).
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
-- Unless jobs_claim_lock ran first (%(locked)s), a claim touching a queue with a limit claims
-- nothing and answers so: the backend sends it again behind the lock (and sends the lock first
-- for those queues from then on).
go AS (
    SELECT %(locked)s::bool OR NOT EXISTS ({{_limited_queues}}) AS ok
),
gate AS (
    {{_gate_queues}}
),
top AS (
    {{_claim_top}}
),
-- What each job's name may take under its job limits (plain queues: limit). What its key may
-- take under the queue's key limits is read in by_name_key, for the jobs that need it.
sized AS (
    SELECT t.*, g.room, g.key_concurrency, g.key_rate_count, g.key_rate_burst,
           CASE WHEN jl.rate_count IS NULL THEN %(limit)s::int8 ELSE coalesce((
               SELECT {{_bucket_admits}} FROM limit_buckets AS b
               WHERE b.queue = t.queue AND b.job = t.name AND b.key = ''
           ), jl.rate_burst) END AS name_room,
           CASE WHEN t.limit_key IS NULL OR jl.name IS NULL THEN %(limit)s::int8 ELSE least(
               CASE WHEN jl.key_concurrency IS NULL THEN %(limit)s::int8 ELSE jl.key_concurrency - (
                   SELECT count(*) FROM jobs_running AS r
                   WHERE r.queue = t.queue AND r.limit_key = t.limit_key AND r.name = t.name
               ) END,
               CASE WHEN jl.key_rate_count IS NULL THEN %(limit)s::int8 ELSE coalesce((
                   SELECT {{_bucket_admits}} FROM limit_buckets AS b
                   WHERE b.queue = t.queue AND b.job = t.name AND b.key = t.limit_key
               ), jl.key_rate_burst) END
           ) END AS name_key_room
    FROM top AS t
    CROSS JOIN clock
    JOIN gate AS g ON g.queue = t.queue
    LEFT JOIN job_limits AS jl ON g.named AND jl.queue = t.queue AND jl.name = t.name
),
by_key AS (
    SELECT *, row_number() OVER (
        PARTITION BY queue, limit_key ORDER BY priority DESC, fair_round, run_at, id) AS n1
    FROM sized
),
-- A key's first job in claim order passed the gate, which found a free slot and an open bucket
-- for that key (key_room >= 1 in this statement's snapshot): only the key's later jobs read
-- what it may take (its running jobs and its bucket). With many keys a claim takes one job of
-- each, and reads nothing more than the gate did.
by_name_key AS (
    SELECT k.*, row_number() OVER (
        PARTITION BY k.queue, k.name, k.limit_key
        ORDER BY k.priority DESC, k.fair_round, k.run_at, k.id
    ) AS n2
    FROM by_key AS k CROSS JOIN clock
    WHERE k.n1 = 1 OR k.n1 <= CASE WHEN k.limit_key IS NULL THEN %(limit)s::int8 ELSE least(
        CASE WHEN k.key_concurrency IS NULL THEN %(limit)s::int8 ELSE k.key_concurrency - (
            SELECT count(*) FROM jobs_running AS r
            WHERE r.queue = k.queue AND r.limit_key = k.limit_key
        ) END,
        CASE WHEN k.key_rate_count IS NULL THEN %(limit)s::int8 ELSE coalesce((
            SELECT {{_bucket_admits}} FROM limit_buckets AS b
            WHERE b.queue = k.queue AND b.job = '' AND b.key = k.limit_key
        ), k.key_rate_burst) END
    ) END
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
picked AS (
    SELECT id FROM by_queue WHERE n4 <= room
    ORDER BY priority DESC, fair_round, run_at, id
    LIMIT %(limit)s::int8
),
claimed AS (
    {{_claim_move}}
),
{{_claim_takes}}
{{_claim_limited_end}};

-- name: jobs_claim_open
-- The claim of queues whose gates are open: none paused or limited (_limited_queues: no
-- max_concurrency, rate, key limit or job name's limits); fair ones may be, since their turns
-- are an order, which the claim index holds. For those jobs_claim's gate and windows let every
-- due job through, so this statement, a fifth of its size, claims what it would: per queue an
-- index scan of the claim index in claim order (a fair queue's round first), skipping rows
-- another claimer has locked, then the best `limit` of them, and the round moves on as there
-- (a job keeps the turn it took while its queue was fair, so every queue is read so). jobs_claim
-- costs 0.8-0.9 ms of server time from cold even when it finds nothing; an idle worker's claim
-- waits for it while its job waits to start. If a queue's gate is not open it claims nothing
-- and says so (`relock`), and the backend sends jobs_claim (with its lock if need be).
-- Returns what jobs_claim returns: the claimed jobs in claim order, then the summary row (id
-- NULL; next_open NULL: no rate holds these queues).
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
go AS (
    SELECT NOT EXISTS ({{_limited_queues}})
       AND NOT EXISTS (
           SELECT 1 FROM queues AS q
           WHERE q.name = ANY(%(queues)b::text[]) AND q.paused
       ) AS ok
),
top AS (
    SELECT p.*
    FROM unnest(%(queues)b::text[]) AS w (queue) CROSS JOIN clock CROSS JOIN LATERAL (
        SELECT j.id, j.priority, (j.turn - 1) / 4 AS fair_round, j.run_at
        FROM jobs_pending AS j
        WHERE j.queue = w.queue AND j.run_at <= clock.now AND (SELECT ok FROM go)
        ORDER BY j.priority DESC, (j.turn - 1) / 4, j.run_at, j.id
        LIMIT %(limit)s::int8
        FOR UPDATE OF j SKIP LOCKED
    ) AS p
),
{{_claim_picked}}
rounds AS (
    {{_claim_rounds}}
),
durability AS (
    {{_claim_durability}}
)
SELECT * FROM (
    {{_claimed_rows}}
    UNION ALL
    SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NOT (SELECT ok FROM go)
    WHERE (SELECT count(*) FROM rounds) >= 0
) AS out
ORDER BY priority DESC NULLS LAST, (turn - 1) / 4, run_at, id;

-- name: _claim_queue_takes
-- (a fragment: the `takes` CTE of jobs_claim_whole and jobs_claim_capped, with its comma) The
-- queues' own buckets only (no key rate, no job name's limits there: see their go), counted
-- before the join: one row per queue, not one per job. Needs claimed.
takes (queue, job, key, n, count, per, burst) AS (
    SELECT c.queue, '', '', c.n, q.rate_count, q.rate_per, q.rate_burst
    FROM (SELECT queue, count(*) AS n FROM claimed GROUP BY queue) AS c
    JOIN queues AS q ON q.name = c.queue
    WHERE q.rate_count IS NOT NULL
),

-- name: jobs_claim_whole
-- The claim of queues capped only as a whole (paused, max_concurrency, the queue's own rate),
-- fair or not: no key limit, no job name's limits. Sent behind jobs_claim_lock only, for
-- queues that needed it before. Each queue takes at most its room (_gate_queues: what
-- max_concurrency and its bucket leave) by an index scan in claim order, as jobs_claim_open
-- takes its limit: with no key limit every due job passes the gate, and the per-job gate and
-- the by_key window of jobs_claim_capped, though they read nothing for a job without a key,
-- cost a claim of 128 jobs about 0.5 ms of server time (a rate far above the worker's pace
-- drained at 85-90 % of the plain figure through them). The queues' buckets move on and
-- next_open is told as there. If a queue has a key limit or job name's limits, it claims
-- nothing and says so (`relock`), and the backend sends jobs_claim_capped or jobs_claim.
-- Returns what jobs_claim returns.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
go AS (
    SELECT NOT EXISTS (
               SELECT 1 FROM queues AS q
               WHERE q.name = ANY(%(queues)b::text[])
                 AND (q.key_concurrency IS NOT NULL OR q.key_rate_count IS NOT NULL)
           )
       AND NOT EXISTS (SELECT 1 FROM job_limits WHERE queue = ANY(%(queues)b::text[])) AS ok
),
gate AS (
    {{_gate_queues}}
),
top AS (
    SELECT p.*
    FROM gate AS g CROSS JOIN clock CROSS JOIN LATERAL (
        SELECT j.id, j.priority, (j.turn - 1) / 4 AS fair_round, j.run_at
        FROM jobs_pending AS j
        WHERE j.queue = g.queue AND j.run_at <= clock.now AND g.room > 0
        ORDER BY j.priority DESC, (j.turn - 1) / 4, j.run_at, j.id
        LIMIT g.room
        FOR UPDATE OF j SKIP LOCKED
    ) AS p
),
{{_claim_picked}}
{{_claim_queue_takes}}
{{_claim_limited_end}};

-- name: jobs_claim_capped
-- The claim of queues capped per key by a count (key_concurrency), and perhaps as a whole
-- (paused, max_concurrency, the queue's own rate), fair or not, and by nothing else: no key
-- rate, no job name's limits. Sent behind jobs_claim_lock only, for queues that needed it before. Each
-- queue takes at most its room (_gate_queues: what max_concurrency and its bucket leave) of
-- the jobs the gate (_gate: a free slot for the job's key) lets through, by an index scan in
-- claim order, and a key's later jobs in the claim only as far as its slots go (jobs_claim's
-- by_key). jobs_claim's other windows would let every one of them through, and with its bucket
-- moves for keys and names cost a claim of 128 jobs about 3 ms more (a rate far above the
-- worker's pace drained at 71-84 % of the plain figure through them). The queues' buckets move
-- on and next_open is told as there. If a queue has a key rate or job name's limits, it claims
-- nothing and says so (`relock`), and the backend sends jobs_claim.
-- Returns what jobs_claim returns.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
go AS (
    SELECT NOT EXISTS (
               SELECT 1 FROM queues AS q
               WHERE q.name = ANY(%(queues)b::text[]) AND q.key_rate_count IS NOT NULL
           )
       AND NOT EXISTS (SELECT 1 FROM job_limits WHERE queue = ANY(%(queues)b::text[])) AS ok
),
gate AS (
    {{_gate_queues}}
),
top AS (
    {{_claim_top}}
),
-- A key's first job passed the gate with a free slot; its later ones read how many it has.
by_key AS (
    SELECT t.*, g.key_concurrency, row_number() OVER (
        PARTITION BY t.queue, t.limit_key ORDER BY t.priority DESC, t.fair_round, t.run_at, t.id
    ) AS n1
    FROM top AS t JOIN gate AS g ON g.queue = t.queue
),
picked AS (
    SELECT id FROM by_key AS k
    WHERE k.n1 = 1 OR k.limit_key IS NULL OR k.key_concurrency IS NULL
       OR k.n1 <= k.key_concurrency - (
           SELECT count(*) FROM jobs_running AS r
           WHERE r.queue = k.queue AND r.limit_key = k.limit_key
       )
    ORDER BY priority DESC, fair_round, run_at, id
    LIMIT %(limit)s::int8
),
claimed AS (
    {{_claim_move}}
),
{{_claim_queue_takes}}
{{_claim_limited_end}};

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
-- The throughput history (0009_throughput.sql): one row per queue and minute.
tallied AS (
    INSERT INTO throughput AS t (queue, minute, completed, failed)
    SELECT queue, (floor((SELECT now FROM clock) / 60) * 60)::int8,
           count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'failed')
    FROM settled
    WHERE status IN ('completed', 'failed')
    GROUP BY queue
    ORDER BY queue
    ON CONFLICT (queue, minute) DO UPDATE
    SET completed = t.completed + excluded.completed, failed = t.failed + excluded.failed
),
-- Wake the workers of a queue where a job is due again (released, or retried without delay),
-- or where a settled job freed a slot (max_concurrency, key_concurrency of the queue or of a
-- job name) that may have kept them waiting.
notified AS (
    SELECT pg_notify('jobyard', current_schema() || ':' || d.queue) AS sent
    FROM (
        SELECT s.queue
        FROM settled AS s
        GROUP BY s.queue
        HAVING bool_or(s.status = 'pending' AND s.due)
            OR EXISTS (
                SELECT 1 FROM queues AS q
                WHERE q.name = s.queue
                  AND (q.max_concurrency IS NOT NULL OR q.key_concurrency IS NOT NULL)
            )
            OR EXISTS (
                SELECT 1 FROM job_limits AS jl
                WHERE jl.queue = s.queue AND jl.key_concurrency IS NOT NULL
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

-- name: leases_lapsed
-- The running jobs whose lease lapsed, longest lapsed first, with what the reaper above the
-- store decides on (jobyard.retry.decide_lapsed). A read: nothing is locked or moved here.
-- The running partition is small (bounded by the workers' total concurrency), so it is
-- scanned rather than indexed by lease_expires_at (which would make every renewal a non-HOT
-- update).
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
)
SELECT j.id, j.token, j.name, j.queue, j.attempts, j.max_attempts, j.backoff, j.delivery,
       j.cancel_requested_at IS NOT NULL
FROM jobs_running AS j, clock
WHERE j.lease_expires_at < clock.now
ORDER BY j.lease_expires_at, j.id
LIMIT %(limit)s::int8;

-- name: leases_reap
-- Apply the reaper's moves (retry: pending again at now + delay, the attempt stays counted;
-- failed, cancelled: finished now), each fenced: only a job still running with the move's
-- token and a lease still lapsed moves, so a renewal or an ack between the read and this move
-- wins. SKIP LOCKED: a job whose settlement or renewal is in flight is left to it (the next
-- tick reads it again if its lease is still lapsed), and two reapers never wait on each other.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
input AS (
    SELECT *
    FROM unnest(
        %(ids)b::int8[], %(tokens)b::text[], %(kinds)b::text[], %(errors)b::text[],
        %(delays)b::float8[]
    ) AS i (id, token, kind, error, delay)
),
lapsed AS (
    SELECT j.id, i.kind, i.error, i.delay
    FROM jobs_running AS j JOIN input AS i ON i.id = j.id AND i.token = j.token, clock
    WHERE j.lease_expires_at < clock.now
      -- a cancellation asked since the read: the next read decides it (cancelled)
      AND (i.kind <> 'retry' OR j.cancel_requested_at IS NULL)
    FOR UPDATE OF j SKIP LOCKED
),
reaped AS (
    UPDATE jobs AS j
    SET status = CASE WHEN lapsed.kind = 'retry' THEN 'pending' ELSE lapsed.kind END,
        error = lapsed.error,
        finished_at = CASE WHEN lapsed.kind = 'retry' THEN NULL ELSE clock.now END,
        run_at = CASE WHEN lapsed.kind = 'retry' THEN clock.now + lapsed.delay ELSE j.run_at END,
        token = NULL,
        lease_expires_at = NULL
    FROM lapsed, clock
    WHERE j.status = 'running' AND j.id = lapsed.id
    RETURNING j.id, j.status, j.queue, j.idempotency_key, j.name
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
-- A job whose lapsed lease spent its last attempt failed: the throughput history counts it.
tallied AS (
    INSERT INTO throughput AS t (queue, minute, completed, failed)
    SELECT queue, (floor((SELECT now FROM clock) / 60) * 60)::int8, 0, count(*)
    FROM reaped
    WHERE status = 'failed'
    GROUP BY queue
    ORDER BY queue
    ON CONFLICT (queue, minute) DO UPDATE SET failed = t.failed + excluded.failed
),
-- A job back to pending may be due now (a backoff of 0); a finished one freed a slot of its
-- queue: wake its workers.
notified AS (
    SELECT pg_notify('jobyard', current_schema() || ':' || d.queue) AS sent
    FROM (SELECT DISTINCT queue FROM reaped) AS d
),
durability AS (
    SELECT set_config('synchronous_commit', CASE
               WHEN %(async_commit)s::bool THEN 'off' ELSE current_setting('synchronous_commit')
           END, true) AS mode
)
SELECT id, status, name, queue
FROM reaped
WHERE (SELECT count(*) FROM notified) + (SELECT count(*) FROM durability) >= 0
ORDER BY id;
