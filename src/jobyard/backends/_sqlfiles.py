"""Reading the SQL the SQLite and PostgreSQL stores ship beside their code: ``queries.sql`` or
``queries/*.sql`` (statements in ``-- name: NAME`` blocks) and ``migrations/NNNN_name.sql``.
Read with :mod:`importlib.resources`, so they load from a wheel, a zip or a checkout alike; no
SQL is ever assembled from Python strings."""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^--[ \t]*name:[ \t]*(\w+)[ \t]*$")
_MIGRATION = re.compile(r"^\d{4}_\w+\.sql$")
_FRAGMENT = re.compile(r"\{\{(_\w+)\}\}")


def parse_blocks(text: str) -> dict[str, str]:
    """Split ``-- name: x`` blocks into ``{"x": "SELECT ..."}``.

    Text before the first header is the file's preamble and is dropped. A block runs to the next
    header; its trailing blank lines, comments and ``;`` are trimmed (``sqlite3`` refuses
    anything after a statement's end). A name defined twice, or an empty block, is an error.
    """
    blocks: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []

    def flush() -> None:
        if name is None:
            return
        while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
            lines.pop()
        sql = "\n".join(lines).strip().rstrip(";").rstrip()
        if not sql:
            raise ValueError(f"query {name!r} is empty")
        blocks[name] = sql

    for line in text.splitlines():
        match = _HEADER.match(line)
        if match:
            flush()
            name = match.group(1)
            if name in blocks:
                raise ValueError(f"query {name!r} is defined twice")
            lines = []
        elif name is not None:
            lines.append(line)
    flush()
    return blocks


def expand_fragments(blocks: dict[str, str]) -> dict[str, str]:
    """Blocks named ``_x`` are fragments: each ``{{_x}}`` in another block is replaced by its
    text (a select list written once for every statement that returns job records), and the
    fragments are left out of the result. A fragment may use others (the gate of a claim is
    made of a few); one that uses itself, directly or not, or an unknown one is an error."""
    fragments = {k: v for k, v in blocks.items() if k.startswith("_")}

    def fill(match: re.Match[str], seen: tuple[str, ...] = ()) -> str:
        name = match.group(1)
        if name not in fragments:
            raise ValueError(f"unknown SQL fragment {name!r}")
        if name in seen:
            raise ValueError(f"SQL fragment {name!r} uses itself")
        return _FRAGMENT.sub(lambda m: fill(m, (*seen, name)), fragments[name])

    return {k: _FRAGMENT.sub(fill, v) for k, v in blocks.items() if k not in fragments}


def read_queries(package: str) -> dict[str, str]:
    """The named blocks of ``package``'s SQL, fragments filled in: its ``queries.sql``, or every
    ``queries/*.sql`` (one file per noun; a fragment may be used in any of them). A name defined
    in two files is an error."""
    root = resources.files(package)
    folder = root.joinpath("queries")
    if folder.is_dir():
        texts = sorted(
            (entry.name, entry.read_text("utf-8"))
            for entry in folder.iterdir()
            if entry.name.endswith(".sql")
        )
    else:
        texts = [("queries.sql", root.joinpath("queries.sql").read_text("utf-8"))]
    blocks: dict[str, str] = {}
    for file_name, text in texts:
        for name, sql in parse_blocks(text).items():
            if name in blocks:
                raise ValueError(f"query {name!r} is defined twice (again in {file_name})")
            blocks[name] = sql
    return expand_fragments(blocks)


def read_migrations(package: str) -> list[tuple[str, str]]:
    """``(name, sql)`` of every ``migrations/NNNN_name.sql`` of ``package``, oldest first; the
    name is the file's stem. Two files of one version number are an error."""
    folder = resources.files(package).joinpath("migrations")
    found = sorted(
        (entry.name.removesuffix(".sql"), entry.read_text("utf-8"))
        for entry in folder.iterdir()
        if _MIGRATION.match(entry.name)
    )
    versions = [name[:4] for name, _ in found]
    if len(set(versions)) != len(versions):
        raise ValueError(f"two migrations of {package} share a version number: {versions}")
    return found
