"""The Redis backend (``redis://``, ``rediss://``, ``redis+cluster://``) and the consumers of
lists and streams that other programs write. See :mod:`.backend` and :mod:`.keys`."""

from __future__ import annotations

from ..._extras import require

require("redis", "redis")
