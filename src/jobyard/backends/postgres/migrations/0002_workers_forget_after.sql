-- 0002_workers_forget_after: each worker states how long a silence means it is gone.
--
-- A worker that was killed (SIGKILL, os._exit, a lost host) cannot unregister; it is dropped
-- once it has been silent longer than its own forget_after, by any worker's beat or by a
-- listing of the workers (jobyard status).

ALTER TABLE workers ADD COLUMN forget_after float8 NOT NULL DEFAULT 60.0;
