-- 0011_fair_rounds: a fair queue's keys take their turns in rounds of base.FAIR_TURN (4) jobs.
--
-- The claim orders by a job's round, (turn - 1) / 4, not by its turn: a key's 4 consecutive
-- turns are one round, claimed in enqueue order, so a claim takes a few neighbouring rows of
-- each key (a key's jobs enqueued together sit on the same heap and index pages) instead of one
-- row of each of as many keys. Outside fair queues turn is 0, and (0 - 1) / 4 is 0 (integer
-- division truncates toward zero): one round, the order it always was. The claim's ORDER BY
-- names the same expression, so this index still yields jobs in claim order.
DROP INDEX jobs_pending_claim;
CREATE INDEX jobs_pending_claim ON jobs_pending (queue, priority DESC, ((turn - 1) / 4), run_at, id);
