"""Code samples of the guide: found in Markdown, and how each one runs.

Conventions (an HTML comment on the line before a fenced block; blank lines may stand between):

- A ```python block runs, by default. The blocks of one page run in order in one process and
  one namespace (a page reads as one session), in a fresh working directory that is on
  ``sys.path``, with ``JOBYARD_URL`` pointing at an SQLite file in it.
- ``<!-- file: PATH -->``: the block is written to PATH in that directory (not run), so later
  blocks can import it and shell blocks can name it (``shop.tasks:app``).
- ``<!-- run: postgres -->`` / ``<!-- run: redis -->``: a Python block that runs with
  ``JOBYARD_URL`` set to a fresh store of that kind (the suite's own, see tests/conftest.py).
- ``<!-- no-run: REASON -->``: the block is not run; the reason is required and says why
  (``needs a Django project``).
- A ```sh block is never run unless marked ``<!-- run -->``; then bash runs it (``set -e``) in
  the page's directory, after the page's earlier blocks. Every ``jobyard`` command of every
  shell block, run or not, is checked against the CLI: the command and its options must exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SHELLS = {"sh", "bash", "console", "shell"}
STORES = {"postgres", "redis"}

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[^\n`]*)$")
_MARK = re.compile(r"^\s*<!--\s*(?P<key>file|run|no-run)\s*(?::\s*(?P<value>.*?))?\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page, with the mark before it (if any)."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    mark: str | None = None  # "file", "run", "no-run"
    value: str | None = None  # the path, the store, the reason

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, in order. A mark that is not followed by a block, or an
    unknown mark value, is an error: a typo must not silently turn a check off."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    mark: tuple[str, str | None, int] | None = None
    i = 0
    while i < len(lines):
        m = _MARK.match(lines[i])
        if m:
            if mark is not None:
                raise ValueError(f"{page}:{mark[2]}: mark not followed by a code block")
            mark = (m["key"], m["value"] or None, i + 1)
            i += 1
            continue
        f = _FENCE.match(lines[i])
        if f and (f["info"].strip() or mark is not None):
            fence, indent = f["fence"], len(f["indent"])
            lang = f["info"].split()[0] if f["info"].strip() else ""
            body: list[str] = []
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence):
                body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
                j += 1
            key, value = (mark[0], mark[1]) if mark else (None, None)
            found.append(Block(page, i + 1, lang, "\n".join(body) + "\n", key, value))
            _check_mark(found[-1])
            mark = None
            i = j + 1
            continue
        if f:  # a bare fence: skip the block
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(f["fence"]):
                j += 1
            i = j + 1
            continue
        if mark is not None and lines[i].strip():
            raise ValueError(f"{page}:{mark[2]}: mark not followed by a code block")
        i += 1
    if mark is not None:
        raise ValueError(f"{page}:{mark[2]}: mark not followed by a code block")
    return found


def _check_mark(b: Block) -> None:
    if b.mark == "no-run" and not b.value:
        raise ValueError(f"{b.where}: no-run needs a reason: <!-- no-run: why -->")
    if b.mark == "file" and not b.value:
        raise ValueError(f"{b.where}: file needs a path: <!-- file: pkg/module.py -->")
    if b.mark == "run":
        if b.lang == "python" and b.value not in STORES:
            raise ValueError(f"{b.where}: run on python takes one of {sorted(STORES)}")
        if b.lang in SHELLS and b.value is not None:
            raise ValueError(f"{b.where}: a shell block is marked <!-- run --> alone")
        if b.lang not in SHELLS and b.lang != "python":
            raise ValueError(f"{b.where}: only python and shell blocks run")


def python_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang == "python" or b.mark == "file"]


def shell_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang in SHELLS]
