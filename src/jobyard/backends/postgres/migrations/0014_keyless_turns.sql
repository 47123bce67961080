-- 0014_keyless_turns: a fair queue's keyless jobs find their latest turn by one index probe.
--
-- An insert into a fair queue reads its key's latest pending turn, the last entry of
-- jobs_pending_turns for (queue, key) read backwards. Keyless jobs take their turns as one
-- more key, but `limit_key IS NULL` is no equality to the planner: it cannot know the entries
-- come in turn order, so it read every keyless entry and sorted them, per job inserted (15,000
-- keyless jobs pending: 8 ms a job; a batch of 5,000 took 20 s). Keyed on coalesce(limit_key,
-- '') instead (a limit key is never empty: base.MAX_LIMIT_KEY, limits.check_key), both kinds
-- are one equality, and the read is one entry.
DROP INDEX jobs_pending_turns;
CREATE INDEX jobs_pending_turns ON jobs_pending (queue, (coalesce(limit_key, '')), turn)
WHERE turn > 0;
