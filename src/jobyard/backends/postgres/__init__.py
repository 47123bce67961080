"""The PostgreSQL backend: SKIP LOCKED claims, LISTEN/NOTIFY wake-ups, status partitions and
transactional enqueue and completion on the caller's own connection."""

from __future__ import annotations

from ..._extras import require

require("postgres", "psycopg", "psycopg_pool")
