"""One-way doors between the layers (docs/architecture.md): read from the source's imports, so a
call climbing back up cannot come back unnoticed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import jobyard

SRC = Path(jobyard.__file__).parent


def imported(path: Path) -> set[str]:
    """Every jobyard module ``path`` imports, anywhere in it (TYPE_CHECKING blocks included)."""
    package = ".".join(("jobyard", *path.relative_to(SRC).with_suffix("").parts[:-1]))
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n == "jobyard" or n.startswith("jobyard.")}


def modules(*globs: str) -> list[Path]:
    return sorted(p for g in globs for p in SRC.glob(g))


@pytest.mark.parametrize(
    "path",
    modules("job.py", "_enqueue.py", "cron.py", "retry.py", "errors.py", "backends/**/*.py"),
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_the_lower_layers_never_import_the_app(path: Path) -> None:
    assert not {m for m in imported(path) if m.startswith("jobyard.app")}


@pytest.mark.parametrize("path", modules("backends/**/*.py"), ids=lambda p: str(p.relative_to(SRC)))
def test_stores_know_nothing_of_workers_or_handlers(path: Path) -> None:
    above = ("jobyard.worker", "jobyard.job", "jobyard.retry", "jobyard.testing", "jobyard.cli")
    assert not {m for m in imported(path) if m.startswith(above)}


STORES = ("sqlite", "postgres", "redis", "memory")
STORE_MODULES = tuple(f"jobyard.backends.{name}" for name in STORES)
# What a store may import of jobyard: the boundary (the contract and the helpers the stores
# share) and what every layer uses (errors, the clock, the event bus, URL secrets, missing
# extras). Not the
# selector (jobyard.backends itself), nor anything above the boundary: app, job, workflow,
# worker, cli, views, web, hooks, retry, cron...
BOUNDARY = (
    "jobyard.backends.base",
    "jobyard.backends._stored",
    "jobyard.backends._sqlfiles",
    "jobyard.backends._lean",
    "jobyard.errors",
    "jobyard.clock",
    "jobyard.events",
    "jobyard._secrets",
    "jobyard._extras",
)


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in prefixes)


def store_of(path: Path) -> str:
    """The store package (or module) ``path`` belongs to: ``jobyard.backends.redis``."""
    return ".".join(("jobyard", *path.relative_to(SRC).with_suffix("").parts[:2]))


@pytest.mark.parametrize(
    "path",
    [p for p in modules("**/*.py") if p.relative_to(SRC).parts[0] != "backends"],
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_nothing_above_the_boundary_imports_a_store(path: Path) -> None:
    # The CLI, the read model (views.py), the dashboard (web/) and every other module above
    # the boundary reach a store through the App and base.py's protocol; only the selector
    # (backends/__init__.py) imports a store module, by name, for the URL's scheme.
    assert not {m for m in imported(path) if _within(m, STORE_MODULES)}


@pytest.mark.parametrize(
    "path",
    [p for p in modules("backends/**/*.py") if p != SRC / "backends" / "__init__.py"],
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_the_stores_import_only_the_boundary(path: Path) -> None:
    own = store_of(path)
    allowed = (*BOUNDARY, own) if _within(own, STORE_MODULES) else BOUNDARY
    assert not {m for m in imported(path) if not _within(m, allowed)}


def test_workflows_depend_on_jobs_never_the_other_way() -> None:
    # workflow.py composes the signatures of job.py (JobFunction.s); job.py knows no workflow,
    # not even through a lazy import.
    assert "jobyard.job" in imported(SRC / "workflow.py")
    assert not {m for m in imported(SRC / "job.py") if _within(m, ("jobyard.workflow",))}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(("jobyard", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def test_no_two_modules_import_each_other() -> None:
    names = {_module_name(p): p for p in modules("**/*.py")}

    def deps(name: str) -> set[str]:
        out = set()
        for m in imported(names[name]):
            while m and m not in names:  # ``from .job import Job`` names jobyard.job.Job
                m = m.rpartition(".")[0]
            if m and m != name:
                out.add(m)
        return out

    graph = {n: deps(n) for n in names}
    both_ways = {
        (a, b)
        for a in graph
        for b in graph[a]
        if a in graph[b] and a < b and not b.startswith(f"{a}.")  # a package and its own module
    }
    assert not both_ways


def test_cron_holds_rules_only() -> None:
    assert not {m for m in imported(SRC / "cron.py") if m.startswith("jobyard.backends")}


@pytest.mark.parametrize("path", modules("worker/*.py"), ids=lambda p: p.name)
def test_the_worker_is_handed_what_it_needs(path: Path) -> None:
    # The process supervisor loads the App in a fresh child process (by its module:attribute
    # reference): the only import of the App below it.
    allowed = {"jobyard.app", "jobyard.app.load_app"} if path.name == "supervisor.py" else set()
    assert {m for m in imported(path) if m.startswith("jobyard.app")} <= allowed


REDIS = SRC / "backends" / "redis"


@pytest.mark.parametrize(
    "path",
    [p for p in modules("backends/redis/*.py") if p.name != "backend.py"],
    ids=lambda p: p.name,
)
def test_the_redis_parts_depend_on_the_core_not_on_the_backend(path: Path) -> None:
    assert "jobyard.backends.redis.backend" not in imported(path)


@pytest.mark.parametrize("path", modules("backends/redis/*.py"), ids=lambda p: p.name)
def test_no_redis_module_reaches_into_another_objects_private_members(path: Path) -> None:
    # ``x._name`` on anything but self; namedtuple's public ``_replace`` is not private.
    reached = {
        f"{ast.unparse(node.value)}.{node.attr}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and node.attr != "_replace"
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    }
    assert not reached
