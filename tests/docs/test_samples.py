"""Every code sample of the guide (docs/**/*.md and README.md) runs, and every ``jobyard``
command in a shell sample names a real command with real options. The conventions by which
a block says how it runs are in _samples.py."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

import jobyard
from jobyard.cli import cli
from tests.conftest import make_store_url

from ._samples import PAGES, ROOT, Block, blocks, python_blocks, shell_blocks

RUNNER = Path(__file__).with_name("_run_page.py")
RUNNABLE = [
    p
    for p in PAGES
    if any(b.mark != "no-run" for b in python_blocks(p))
    or any(b.mark == "run" for b in shell_blocks(p))
]


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _steps(page: Path, tmp_path: Path) -> list[dict[str, str | None]]:
    steps: list[dict[str, str | None]] = []
    urls: dict[str, str] = {}
    for b in blocks(page):
        base = {"where": b.where, "code": b.code, "path": None, "url": None}
        if b.mark == "file":
            steps.append({**base, "kind": "file", "path": b.value})
        elif b.mark == "no-run":
            continue
        elif b.lang == "python":
            if b.mark == "run" and b.value:
                if b.value not in urls:
                    urls[b.value] = make_store_url(b.value, tmp_path)
                base["url"] = urls[b.value]
            steps.append({**base, "kind": "python"})
        elif b.mark == "run":
            steps.append({**base, "kind": "sh"})
    return steps


@pytest.mark.parametrize("page", RUNNABLE, ids=_id)
def test_the_samples_of_a_page_run(page: Path, tmp_path: Path) -> None:
    # given the page's blocks, in order, in a fresh directory with an SQLite store
    work = tmp_path / "work"
    work.mkdir()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_steps(page, tmp_path)), encoding="utf-8")
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "JOBYARD_URL": f"sqlite:///{work}/jobyard.db",
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": str(work),
        "PYTHONUNBUFFERED": "1",
    }
    # when they run
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(spec)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # then every one succeeded
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


# --- shell samples: the commands and options they name exist ------------------------------------


def _commands(block: Block) -> list[tuple[int, list[str]]]:
    """(line, argv) of each ``jobyard`` (or ``python -m jobyard``) call of a shell block."""
    calls: list[tuple[int, list[str]]] = []
    joined, start = "", 0
    for n, raw in enumerate(block.code.splitlines(), block.line + 1):
        line = raw.removeprefix("$ ")
        if not joined:
            start = n
        if line.rstrip().endswith("\\"):
            joined += line.rstrip()[:-1] + " "
            continue
        joined += line
        for words in _simple_commands(joined):
            while words and "=" in words[0] and not words[0].startswith("-"):
                words.pop(0)  # VAR=value before the command
            if words[:3] == ["python", "-m", "jobyard"]:
                words = ["jobyard", *words[3:]]
            if words and words[0] == "jobyard":
                calls.append((start, words[1:]))
        joined = ""
    return calls


def _simple_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line, split at pipes, lists, redirections and
    ``$( )``: ``a | b && c > f`` is ``[a], [b], [c], [f]``."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token and set(token) <= set("|&;<>()"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


SHELL_CALLS = [
    pytest.param(b, line, argv, id=f"{_id(b.page)}:{line}")
    for page in PAGES
    for b in shell_blocks(page)
    for line, argv in _commands(b)
]


def _options(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts, param.secondary_opts)
    return names


@pytest.mark.parametrize(("block", "line", "argv"), SHELL_CALLS)
def test_a_jobyard_command_in_the_guide_exists(block: Block, line: int, argv: list[str]) -> None:
    where = f"{_id(block.page)}:{line}"
    assert argv, f"{where}: `jobyard` without a command"
    if argv[0] in ("--help", "-h", "--version"):
        return
    command = cli.commands.get(argv[0])
    assert command is not None, f"{where}: no command `jobyard {argv[0]}`"
    known = _options(command)
    for word in argv[1:]:
        if word.startswith("-") and word != "-":
            flag = word.split("=", 1)[0]
            assert flag in known, f"{where}: `jobyard {argv[0]}` has no option {flag}"


def test_the_conventions_hold_on_every_page() -> None:
    # every mark is well formed (blocks() raises otherwise) and every page has been read
    assert all(isinstance(blocks(page), list) for page in PAGES)
    assert len(SHELL_CALLS) > 10


# --- inline commands: `jobyard worker APP [-q QUEUE]` in tables and prose ------------------------

_SPAN = re.compile(r"`(jobyard [^`]+)`")
_FLAG = re.compile(r"(?<![\w-])(--?[a-z][a-z-]*)")

INLINE_CALLS = [
    pytest.param(page, n, span, id=f"{_id(page)}:{n}")
    for page in PAGES
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
    for span in _SPAN.findall(line)
]


@pytest.mark.parametrize(("page", "line", "span"), INLINE_CALLS)
def test_an_inline_jobyard_command_names_real_options(page: Path, line: int, span: str) -> None:
    where = f"{_id(page)}:{line}"
    word = span.split()[1]
    if word.startswith("-") or word.isupper():  # `jobyard --help`, `jobyard COMMAND --help`
        return
    command = cli.commands.get(word)
    assert command is not None, f"{where}: no command `jobyard {word}` (in `{span}`)"
    known = _options(command)
    for flag in _FLAG.findall(span):
        assert flag in known, f"{where}: `jobyard {word}` has no option {flag} (in `{span}`)"


# --- inline names: `jobyard.testing.drain`, `app.configure_queue(...)` exist ----------------------

_NAME = re.compile(r"(?<![\w./:])@?(jobyard|app)\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")
LOGGERS = {"jobyard.jobs", "jobyard.worker", "jobyard.hooks", "jobyard.postgres", "jobyard.cron"}

INLINE_NAMES = [
    pytest.param(page, n, f"{root}.{path}", id=f"{_id(page)}:{n}:{root}.{path}")
    for page in PAGES
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
    for span in re.findall(r"`([^`]+)`", line)
    if "://" not in span and not span.startswith("jobyard ")
    for root, path in _NAME.findall(span)
]


def _resolve(dotted: str) -> object:
    """The object ``jobyard.a.b`` names (modules imported on the way), or ``app.x`` on App;
    a name a running App sets up itself (``app.url``) counts when an App instance has it."""
    import importlib

    root, *parts = dotted.split(".")
    obj: object = jobyard.App("memory://") if root == "app" else importlib.import_module(root)
    for i, part in enumerate(parts):
        if not hasattr(obj, part) and root == "jobyard":
            importlib.import_module(".".join(["jobyard", *parts[: i + 1]]))
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize(("page", "line", "dotted"), INLINE_NAMES)
def test_an_inline_name_exists(page: Path, line: int, dotted: str) -> None:
    if dotted in LOGGERS or dotted.endswith((".db", ".md", ".py")):
        return
    try:
        _resolve(dotted)
    except (AttributeError, ImportError) as exc:
        pytest.fail(f"{_id(page)}:{line}: `{dotted}` does not exist: {exc}")
