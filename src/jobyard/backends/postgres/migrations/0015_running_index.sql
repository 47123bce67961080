-- 0015_running_index: one index of the running partition for the queue and the key, not two.
--
-- The running partition had jobs_running_queue (queue) and, for keyed jobs, jobs_running_keys
-- (queue, limit_key, name): a claim moved every keyed job into both. One index on (queue,
-- limit_key) serves what each did: a queue's running count (max_concurrency, the status) reads
-- its leading column, a key's running jobs (key_concurrency) both; a job name's key limit
-- (job_limits.key_concurrency) filters the name on the rows, which it visits anyway (a partition
-- this busy is never all-visible, so an index-only scan fetched each row too). A keyless job's
-- entry is (queue, NULL), no wider than before; a keyed job has one entry where it had two.
CREATE INDEX jobs_running_queue_key ON jobs_running (queue, limit_key);
DROP INDEX jobs_running_queue;
DROP INDEX jobs_running_keys;
