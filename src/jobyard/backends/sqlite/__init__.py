"""The embedded SQLite store (``sqlite:///path.db``): jobyard's default backend.

One database file in WAL mode shared by any number of worker processes and threads on one host.
See :class:`jobyard.backends.sqlite.backend.SQLiteBackend`.
"""

from __future__ import annotations
