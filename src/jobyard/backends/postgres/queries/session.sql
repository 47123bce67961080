-- Sessions and schema: the clock, migrations, LISTEN, connection lending, savepoints,
-- search_path.
-- (Conventions for every file here: README.md in this folder.)

-- name: clock_now
SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8);

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
