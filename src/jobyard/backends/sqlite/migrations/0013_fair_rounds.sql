-- 0013_fair_rounds: a fair queue's keys take their turns in rounds of FAIR_TURN (4) jobs.
--
-- The claim's order goes by a job's round, (turn - 1) / 4, not its turn: a key's 4 consecutive
-- turns are one round, claimed together in enqueue order, so a claim of 64 jobs takes 4
-- adjacent rows from each of 16 keys instead of one row from each of 64. A key's jobs enqueued
-- together sit on one table page, and the claim and the acknowledgement each wrote a page per
-- key (bench/limits.py fair_100: 96 pages written per fair claim against 14 for a plain one).
-- Outside fair queues turn is 0, and (0 - 1) / 4 is 0 (integer division truncates toward
-- zero): one round, the plain order.
DROP INDEX jobs_pending;
CREATE INDEX jobs_pending ON jobs (queue, priority DESC, (turn - 1) / 4, run_at, id)
WHERE status = 'pending';
