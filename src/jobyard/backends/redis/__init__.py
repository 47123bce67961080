"""The Redis backend (``redis://``, ``rediss://``, ``redis+cluster://``) and the consumers of
lists and streams that other programs write. See :mod:`.backend` and :mod:`.keys`."""
