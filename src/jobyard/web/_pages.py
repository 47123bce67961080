"""The dashboard's pages (GET): each reads through :mod:`._data` and renders one template."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..errors import ConfigurationError
from ..job import Job
from ..workflow import StepNode, Workflow
from . import _data
from ._chart import chart, sparkline
from ._render import markup
from ._site import Site

RANGES = {"hour": (3600.0, 60), "day": (86400.0, 900)}  # since, step (seconds)
TREE_MAX = 500  # nodes of a workflow's tree a job's page shows
_ARG = re.compile(r"^\s*(?:args|kwargs)?\.?([A-Za-z0-9_.-]+)\s*(?:=|==)\s*(.+?)\s*$")


def _q(request: Request, name: str) -> str | None:
    value = request.query_params.get(name, "").strip()
    return value or None


def overview(site: Site, request: Request) -> Response:
    """Per queue: counts, oldest pending, per-minute rates, a throughput chart, pause/resume."""
    chart_queue = _q(request, "queue")
    range_name = "day" if request.query_params.get("range") == "day" else "hour"
    since, step = RANGES[range_name]
    data = site.cache.get(
        ("overview", chart_queue, range_name),
        lambda: _data.overview(site.app, chart_queue, since, step),
    )
    label = f"{chart_queue or 'all queues'}, last {range_name}"
    big = markup(chart(data.history, step, label=label)) if data.has_history else None
    sparks = {
        q.name: markup(sparkline(q.history, step, label=q.name))
        for q in data.queues
        if data.has_history
    }
    return site.render(
        request,
        "overview.html",
        "overview",
        data=data,
        chart=big,
        sparks=sparks,
        chart_queue=chart_queue,
        range_name=range_name,
        step=step,
    )


def parse_arg(text: str | None) -> tuple[tuple[str, ...], Any, str | None]:
    """An argument filter: ``args.customer_id = 42`` (a path and a JSON value, else text) or
    any other text, a substring of the arguments. (path, value, substring)."""
    if not text:
        return (), None, None
    m = _ARG.match(text)
    if m is None:
        return (), None, text
    raw = m.group(2)
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw.strip("'\"")
    return tuple(p for p in m.group(1).split(".") if p), value, None


def jobs(site: Site, request: Request) -> Response:
    """Jobs newest first, filtered, a page at a time by cursor; find by id or key."""
    app = site.app
    find = _q(request, "find")
    found_by_key: list[Job] | None = None
    if find is not None:
        job = _data.find_job(app, find)
        if job is not None:
            root = request.scope.get("root_path", "")
            return RedirectResponse(f"{root}/jobs/{_path(job.id)}", status_code=303)
        found_by_key = _data.find_by_key(app, find)
    arg_text = _q(request, "arg")
    path, value, contains = parse_arg(arg_text)
    flt = _data.JobFilter(
        queue=_q(request, "queue"),
        status=_data.status_of(_q(request, "status")),
        name=_q(request, "name"),
        arg_path=path,
        arg_value=value,
        contains=contains,
    )
    page = (
        _data.JobPage(tuple(found_by_key), None)
        if found_by_key is not None
        else _data.list_jobs(app, flt, _q(request, "cursor"))
    )
    queues = site.cache.get(("queues",), lambda: _data.queue_names(app))
    return site.render(
        request,
        "jobs.html",
        "jobs",
        listing=page,
        flt=flt,
        find=find,
        arg_text=arg_text or "",
        queues=queues,
        names=_data.job_names(app),
        statuses=("waiting", "pending", "running", "completed", "failed", "cancelled"),
        cursor=_q(request, "cursor"),
        next_url=_with(request, cursor=page.next_cursor) if page.next_cursor else None,
        first_url=_with(request, cursor=None),
    )


def _path(job_id: str) -> str:
    from urllib.parse import quote

    return quote(job_id, safe=":")


def _with(request: Request, **changes: str | None) -> str:
    """This page's query with ``changes`` (None removes a key)."""
    from urllib.parse import urlencode

    params = {k: v for k, v in request.query_params.items() if k not in ("fragment",)}
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    qs = urlencode(params)
    return "?" + qs if qs else "?"


@dataclass(frozen=True, slots=True)
class TreeRow:
    """One line of a workflow's tree as the page nests it: ``open`` a chain or group,
    ``job``, or ``close``."""

    kind: str  # "open", "job", "close"
    label: str = ""  # "chain" or "group" for open
    job: Job | None = None


def tree_rows(flow: Workflow, limit: int = TREE_MAX) -> tuple[list[TreeRow], int]:
    """The tree as nested rows, depth first (no recursion: a stored tree may be deep), at most
    ``limit`` jobs; (rows, jobs left out)."""
    rows: list[TreeRow] = []
    shown = 0
    left = 0
    stack: list[StepNode | None] = [flow.tree]  # None closes a container
    while stack:
        node = stack.pop()
        if node is None:
            rows.append(TreeRow("close"))
            continue
        if node.job is not None:
            if shown < limit:
                rows.append(TreeRow("job", job=node.job))
                shown += 1
            else:
                left += 1
            continue
        rows.append(TreeRow("open", label=node.kind))
        stack.append(None)
        stack.extend(reversed(node.children))
    return rows, left


def job(site: Site, request: Request) -> Response:
    """One job: fields, arguments, result, error and traceback, progress, workflow, actions."""
    job_id = request.path_params["job_id"]
    found, flow = _data.job_detail(site.app, job_id)
    rows, left = tree_rows(flow) if flow is not None else ([], 0)
    counts = Counter(j.status.value for j in flow.jobs) if flow is not None else Counter()
    return site.render(
        request,
        "job.html",
        "jobs",
        job=found,
        flow=flow,
        tree=rows,
        tree_left=left,
        flow_counts=sorted(counts.items()),
        error_line=_data.last_line(found.error),
        live=not found.status.finished
        or (flow is not None and flow.status in ("running", "waiting")),
    )


def _dead_filter(values: Any) -> _data.DeadFilter:
    def get(name: str) -> str | None:
        value = str(values.get(name, "") or "").strip()
        return value or None

    error = values.get("error")
    return _data.DeadFilter(
        queue=get("queue"),
        name=get("name"),
        error_line=None if error in (None, "") else str(error),
        contains=get("contains"),
    )


def dead(site: Site, request: Request) -> Response:
    """Failed jobs grouped by name and last error line; the jobs of one group or filter."""
    flt = _dead_filter(request.query_params)
    letter = _data.dead_letter(site.app, flt)
    narrowed = flt.name is not None or flt.error_line is not None or flt.contains is not None
    listed = letter.newest
    queues = site.cache.get(("queues",), lambda: _data.queue_names(site.app))
    return site.render(
        request,
        "dead.html",
        "dead",
        letter=letter,
        flt=flt,
        listed=listed,
        narrowed=narrowed,
        queues=queues,
        names=_data.job_names(site.app),
    )


def dead_confirm(site: Site, request: Request) -> Response:
    """Before a bulk action on the dead letter: how many jobs it will touch."""
    action = request.query_params.get("action")
    if action not in ("retry", "purge"):
        raise ConfigurationError("the action must be retry or purge")
    flt = _dead_filter(request.query_params)
    count = _data.dead_count(site.app, flt)
    return site.render(
        request, "confirm.html", "dead", action=action, flt=flt, count=count.n, exact=count.exact
    )


def workers(site: Site, request: Request) -> Response:
    """Live workers and the jobs each runs now."""
    rows = site.cache.get(("workers",), lambda: _data.workers(site.app))
    return site.render(request, "workers.html", "workers", workers=rows)


def schedules(site: Site, request: Request) -> Response:
    """Recurring jobs: ticks, timezone, next and last run, state."""
    return site.render(request, "schedules.html", "schedules", schedules=_data.schedules(site.app))


def enqueue(site: Site, request: Request) -> Response:
    """A form to enqueue a job of the app, its arguments given as JSON."""
    registry = site.app.registry
    chosen = _q(request, "job")
    if chosen not in registry:
        chosen = next(iter(sorted(registry)), None)
    signatures = {
        name: f"{name}{fn.signature}" if fn.signature is not None else name
        for name, fn in sorted(registry.items())
    }
    defaults = {name: fn.opts.queue for name, fn in registry.items()}
    return site.render(
        request,
        "enqueue.html",
        "enqueue",
        signatures=signatures,
        defaults=defaults,
        chosen=chosen,
        form={"args": "[]", "kwargs": "{}"},
        problem=None,
    )
