"""The ``jobyard`` command: run workers, enqueue and inspect jobs, and the demo.

APP is ``module:attribute`` (as uvicorn and celery take it), loaded with
:func:`jobyard.app.load_app`. Bad input (an APP that cannot be loaded, an unknown store scheme,
an unknown job id, a bad duration or JSON argument) is reported on one line of stderr with exit
code 2, never a traceback (``JOBYARD_DEBUG=1`` shows it); a store that cannot be reached exits
with 1. A password in a store URL is never printed.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any, NoReturn

import click
from rich import box
from rich.table import Table

from . import _bulk, views
from ._cli_format import (
    DURATION,
    _ago,
    _at,
    _console,
    _dumps,
    _iso,
    _json_option,
    _last_line,
    _when,
    block,
    cell,
    format_duration,
)
from ._printable import json_text, printable
from ._secrets import scrub
from .app import App, load_app
from .backends import in_process, mask_url
from .backends.base import (
    FINISHED,
    PRIORITY_MAX,
    PRIORITY_MIN,
    STATUSES,
    OnConflict,
    QueueConfig,
)
from .errors import (
    ConfigurationError,
    DuplicateJob,
    InvalidTransition,
    JobNotFound,
    JobyardError,
)
from .job import JobFunction, Status, check_name
from .workflow import Workflow

log = logging.getLogger("jobyard.cli")

LOG_LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR")
EXIT_BAD_INPUT = 2
EXIT_FAILURE = 1
SHOW_MAX = 2000  # characters of one value `show` prints; --json prints everything
TREE_MAX = 60  # lines of a workflow's tree `show` prints
CHECK_TIMEOUT = 4.0  # seconds a one-shot command gives the store to answer its first connection

# --- the command group --------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="jobyard", prog_name="jobyard")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """jobyard: a job queue where an accepted job is never lost and every outcome is visible.

    APP is module:attribute, e.g. myproject.tasks:app. The store is the App's URL
    ($JOBYARD_URL, else sqlite:///jobyard.db).
    """
    if ctx.invoked_subcommand not in ("worker", "dashboard"):  # they set up their own logging
        # A one-shot command reports its outcome, not a store client's retries along the way.
        debug = bool(os.environ.get("JOBYARD_DEBUG"))
        logging.basicConfig(
            level=logging.DEBUG if debug else logging.ERROR,
            format="%(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )


_loaded: list[App] = []  # the App this command loaded, so an error can name its store


def _app(ref: str, *, check: bool = True) -> App:
    """Load APP; whatever goes wrong in the user's module is one line (JOBYARD_DEBUG=1: all).

    With ``check`` (every one-shot command), a store that cannot be reached fails within
    :data:`CHECK_TIMEOUT` seconds, naming the cause, instead of retrying as a worker does."""
    try:
        app = load_app(ref)
        _loaded.append(app)
    except JobyardError:
        raise
    except Exception as exc:
        if os.environ.get("JOBYARD_DEBUG"):
            raise
        raise ConfigurationError(f"cannot load {ref!r}: {type(exc).__name__}: {exc}") from exc
    if check:
        app.check_store(CHECK_TIMEOUT)
    return app


@cli.command()
@click.argument("app_ref", metavar="APP")
@click.option(
    "-q",
    "--queue",
    "queues",
    multiple=True,
    help="Queue to take jobs from (repeatable). Default: every queue of the app's jobs.",
)
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Jobs run at once by each process [default: 8, or 100 when every handler is async].",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=None,
    envvar="JOBYARD_PROCESSES",
    help="Worker processes, supervised by this one (also JOBYARD_PROCESSES) [default: one per"
    " CPU this process may use; 1 on memory://].",
)
@click.option(
    "--grace",
    type=DURATION,
    default=30.0,
    show_default=True,
    help="On SIGTERM/SIGINT, seconds running jobs may take to finish before they are released.",
)
@click.option(
    "--prefetch",
    type=click.IntRange(min=0),
    default=None,
    help="Jobs claimed ahead of free slots [default: a few while jobs are short, none while "
    "they are long; 0 turns it off].",
)
@click.option(
    "--poll-interval",
    type=DURATION,
    default=1.0,
    show_default=True,
    help="Longest sleep between claims when no push signal arrives.",
)
@click.option(
    "--reap-interval",
    type=DURATION,
    default=1.0,
    show_default=True,
    help="How often this worker returns jobs whose lease lapsed.",
)
@click.option(
    "--retention",
    type=DURATION,
    default=None,
    help="Delete completed jobs this long after they finish (e.g. 7d); failed ones are kept."
    " Default: keep every job.",
)
@click.option(
    "--pin",
    is_flag=True,
    help="Pin each worker process to one CPU (round robin): faster for handlers that wait on"
    " I/O; not for handlers that compute in C extensions across cores (Linux only).",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="INFO",
    show_default=True,
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: human-readable lines; json: one JSON object per line (job lines with the job's"
    " id, name, queue, attempt, outcome, duration, error, worker and workflow).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics on this port (e.g. 9108; needs prometheus-client, in the"
    " metrics or web extra). With --processes, the sum over the processes.",
)
@click.option(
    "--metrics-host",
    default="0.0.0.0",
    show_default=True,
    help="Address the metrics port binds.",
)
@click.option(
    "--reload",
    is_flag=True,
    help="Restart the worker when a Python file of APP's package changes (development only;"
    " needs watchfiles, in the dev extra).",
)
def worker(
    app_ref: str,
    queues: tuple[str, ...],
    concurrency: int | None,
    processes: int | None,
    grace: float,
    prefetch: int | None,
    poll_interval: float,
    reap_interval: float,
    retention: float | None,
    pin: bool,
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
    reload: bool,
) -> None:
    """Run jobs of APP until SIGINT or SIGTERM.

    The first signal stops claiming and lets running jobs finish within --grace seconds, then
    releases the rest to pending without counting an attempt; a second signal stops at once.
    """
    for value, label in ((poll_interval, "--poll-interval"), (reap_interval, "--reap-interval")):
        if value <= 0:
            raise click.BadParameter("must be more than 0", param_hint=label)
    from . import _logjson

    _logjson.configure(log_level.upper(), log_format)
    if metrics_port is not None:
        from ._extras import require

        require("metrics", "prometheus_client")
    if reload:
        from ._reload import run_reloading

        for name in queues:
            check_name("queue", name)
        given = {
            "concurrency": concurrency,
            "processes": processes,
            "grace": grace,
            "prefetch": prefetch,
            "poll-interval": poll_interval,
            "reap-interval": reap_interval,
            "retention": retention,
            "log-level": log_level,
            "log-format": log_format,
            "metrics-port": metrics_port,
            "metrics-host": metrics_host,
        }
        args = [f"--queue={q}" for q in queues]
        args += [f"--{k}={v}" for k, v in given.items() if v is not None]
        args += ["--pin"] if pin else []
        sys.exit(run_reloading(app_ref, args, grace))
    app = _app(app_ref, check=False)  # a worker waits out an outage instead
    from .worker._cpu import default_processes, pick_cpu

    if in_process(app.url):
        if processes not in (None, 1):
            raise click.BadParameter(
                f"{processes}: a memory:// store lives in one process; other processes would"
                " not see its jobs",
                param_hint="--processes",
            )
        processes = 1
    elif processes is None:
        processes = default_processes()

    options: dict[str, Any] = {
        "queues": list(queues) or None,
        "concurrency": concurrency,
        "grace": grace,
        "prefetch": prefetch,
        "poll_interval": poll_interval,
        "reap_interval": reap_interval,
        "retention": retention,
    }
    for name in queues:
        check_name("queue", name)
    if processes == 1:
        if pin:
            options["cpu"] = pick_cpu()
        runner = app.worker(**options)  # opens the store: a bad one fails here, on one line
        log.info("store %s", mask_url(app.url))
        if metrics_port is not None:
            from .web import metrics

            metrics.serve(metrics.registry_for(app), metrics_port, metrics_host)
            log.info("metrics on http://%s:%d/metrics", metrics_host, metrics_port)
        runner.run()
        return
    from .worker.supervisor import run_processes

    _ = app.backend  # fail here, once, if the store is unreachable or not migrated
    log.info("store %s, %d worker processes", mask_url(app.url), processes)
    app.close()
    if pin:
        pick_cpu(0)  # fail here, once, where pinning is not supported
    code = run_processes(
        app_ref,
        processes,
        log_level=log_level.upper(),
        pin=pin,
        log_format=log_format,
        metrics=None if metrics_port is None else (metrics_host, metrics_port),
        app=app,
        **options,
    )
    if code:
        sys.exit(code)


@cli.command()
@click.argument("app_ref", metavar="APP")
@click.argument("name")
@click.option(
    "--args",
    "args",
    default=None,
    callback=_json_option(list),
    metavar="JSON",
    help="Positional arguments, a JSON array: '[\"a@example.com\"]'.",
)
@click.option(
    "--kwargs",
    "kwargs",
    default=None,
    callback=_json_option(dict),
    metavar="JSON",
    help='Keyword arguments, a JSON object: \'{"subject": "hi"}\'.',
)
@click.option("--queue", default=None, help="Queue [default: the job's own, else 'default'].")
@click.option(
    "--priority",
    type=click.IntRange(PRIORITY_MIN, PRIORITY_MAX),
    default=None,
    help="Higher runs first.",
)
@click.option("--delay", type=DURATION, default=None, help="Run no sooner than this (30s, 5m).")
@click.option("--idempotency-key", default=None, help="At most one pending or running job per key.")
@click.option(
    "--on-conflict",
    type=click.Choice(["keep", "replace"]),
    default=None,
    help="With --idempotency-key, when a job holds the key: keep returns it unchanged (the"
    " default); replace gives a pending holder these arguments (and --delay), a debounce.",
)
@click.option(
    "--key",
    "limit_key",
    default=None,
    help="The limit key (key_concurrency, key_rate_limit and fair turns count by it).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Send it even if APP has no such job, no job of APP uses the queue, or the arguments"
    " do not fit the handler (a warning instead of a refusal).",
)
def enqueue(
    app_ref: str,
    name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    queue: str | None,
    priority: int | None,
    delay: float | None,
    idempotency_key: str | None,
    on_conflict: OnConflict | None,
    limit_key: str | None,
    force: bool,
) -> None:
    """Enqueue job NAME of APP and print its id. A job APP does not know, a queue none of its
    jobs uses or arguments its handler does not take are refused unless --force is given."""
    app = _app(app_ref)
    problems = _enqueue_problems(app, name, queue, args, kwargs)
    if problems and not force:
        raise ConfigurationError("; ".join(problems) + " (--force sends it anyway)")
    for problem in problems:
        _echo(f"warning: {problem}", err=True)
    options = {
        k: v
        for k, v in {
            "queue": queue,
            "priority": priority,
            "delay": delay,
            "idempotency_key": idempotency_key,
            "on_conflict": on_conflict,
            "key": limit_key,
        }.items()
        if v is not None
    }
    if on_conflict is not None and idempotency_key is None:
        raise click.UsageError("--on-conflict needs --idempotency-key")
    fn = app.by_name(name, **options)
    if problems:  # forced: the handler's signature is not checked
        fn = JobFunction(_any_call, fn.opts, enqueue=fn._enqueue, jobs=fn._jobs)
    try:
        handle = fn.enqueue(*args, **kwargs)
    except TypeError as exc:  # an argument that is not JSON
        raise ConfigurationError(str(exc)) from None
    _echo(handle.id)
    if handle.replaced:
        _echo(
            f"note: idempotency key {idempotency_key!r} is held by pending job {handle.id}; it"
            " took these arguments (--on-conflict replace), no new job was created",
            err=True,
        )
    elif not handle.created:
        _echo(
            f"note: idempotency key {idempotency_key!r} is held by pending or running job "
            f"{handle.id}; no new job was created",
            err=True,
        )


def _any_call(*args: Any, **kwargs: Any) -> None:
    """The handler of a forced enqueue: takes anything (never called here)."""


def _enqueue_problems(
    app: App, name: str, queue: str | None, args: list[Any], kwargs: dict[str, Any]
) -> list[str]:
    """Why ``jobyard enqueue`` would send a job no worker of APP could run as given."""
    problems = []
    fn = app.registry.get(name)
    if fn is None:
        known = ", ".join(sorted(app.registry)) or "none"
        problems.append(f"APP has no job named {name!r} (its jobs: {known})")
    else:
        try:
            fn.check_call(args, kwargs)
        except TypeError as exc:
            problems.append(f"the arguments do not fit {exc}")
    queues = {f.opts.queue for f in app.registry.values()}
    if queue is not None and queue not in queues:
        used = ", ".join(sorted(queues)) or "none"
        problems.append(f"no job of APP uses queue {queue!r} (its queues: {used})")
    return problems


@cli.command()
@click.argument("app_ref", metavar="APP")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def status(app_ref: str, as_json: bool) -> None:
    """Jobs per queue by status, completions in the last minute, and live workers."""
    view = views.status(_app(app_ref))
    if as_json:
        data = {
            "store": view.store,
            "queues": [
                {
                    "queue": q.name,
                    "counts": q.counts,
                    "completed_last_minute": q.completed_last_minute,
                    "oldest_pending_age": q.oldest_pending_age,
                    "paused": q.paused,
                    "retention": q.kept,
                }
                for q in view.queues
            ],
            "workers": [
                {
                    "id": w.id,
                    "host": w.host,
                    "pid": w.pid,
                    "queues": list(w.queues),
                    "concurrency": w.concurrency,
                    "started_at": _iso(w.started_at),
                    "last_seen": _iso(w.last_seen),
                }
                for w in view.workers
            ],
            "warnings": list(view.warnings),
            "limits": [
                {
                    "queue": r.queue,
                    "job": r.job,
                    "rules": views.limit_rules(r.limits, r.max_concurrency),
                    "running": r.running,
                    "rate_used": r.rate_used,
                    "keys_running": r.keys_running,
                    "keys_full": r.keys_full,
                    "top_keys": [
                        {"key": k.key, "pending": k.pending, "running": k.running}
                        for k in r.top_keys
                    ],
                    "due": r.due,
                    "due_keys_full": r.due_keys_full,
                    "exact": r.exact,
                    "held_back": view.held_back(r),
                }
                for r in view.limits
            ],
        }
        click.echo(json.dumps(data, indent=2))
        return
    console = _console()
    console.print(cell(f"store: {view.store}"))
    for warning in view.warnings:
        console.print(cell(f"warning: {warning}"))
    table = Table(title="queues", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("queue", no_wrap=True)
    for s in STATUSES:
        table.add_column(s, justify="right")
    table.add_column("completed/1m", justify="right")
    table.add_column("oldest", justify="right")  # the oldest due pending job's wait
    table.add_column("limits", no_wrap=True)
    for q in view.queues:
        age = q.oldest_pending_age
        table.add_row(
            cell(q.name),
            *(str(q.counts[s]) for s in STATUSES),
            str(q.completed_last_minute),
            "-" if age is None else _wait(age),
            cell(" ".join(_limits(q))),
        )
    if view.queues:
        console.print(table)
    else:
        console.print("no queues yet: nothing was enqueued")
    if view.limits:
        console.print(_limits_table(view))
    if not view.workers:
        console.print("workers: none live")
        return
    wt = Table(title="workers", box=box.SIMPLE_HEAD, title_justify="left")
    for column in ("id", "host", "pid", "queues", "concurrency", "started", "last seen"):
        wt.add_column(column, no_wrap=column in ("id", "host"))
    for w in view.workers:
        wt.add_row(
            cell(w.id),
            cell(w.host),
            cell(w.pid),
            cell(",".join(w.queues)),
            str(w.concurrency),
            _ago(w.started_at),
            _ago(w.last_seen),
        )
    console.print(wt)


def _limits_table(view: views.StatusView) -> Table:
    """Each limited queue and job name: its rules, how full it is, its due pending jobs and
    what each limit holds back of them, its busiest keys."""
    table = Table(title="limits", box=box.SIMPLE_HEAD, title_justify="left")
    columns = ("queue", "job", "limits", "running", "rate used", "keys at limit", "due")
    for column in (*columns, "held back", "top keys"):
        table.add_column(column, no_wrap=column in ("queue", "job"))
    for r in view.limits:
        cap = r.limits.key_concurrency
        held = view.held_back(r)
        table.add_row(
            cell(r.queue),
            cell(r.job or "(queue)"),
            cell(" ".join(views.limit_rules(r.limits, r.max_concurrency))),
            str(r.running) if r.max_concurrency is None else f"{r.running}/{r.max_concurrency}",
            "" if r.rate_used is None else f"{r.rate_used:.0%}",
            "" if cap is None else f"{r.keys_full} of {r.keys_running}",
            f"{r.due}" if r.exact else f"{r.due}+",  # +: the store read part of the backlog
            " ".join(f"{limit}={n}" for limit, n in held.items() if n),
            cell(", ".join(f"{k.key} ({k.pending} pending)" for k in r.top_keys)),
        )
    return table


def _wait(seconds: float) -> str:
    """How long a job has waited, in its two largest units (``42s``, ``5m03s``, ``2h05m``)."""
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.0f}s" if seconds >= 1 else "<1s"
    for size, unit, small, sub in (
        (86400, "d", 3600, "h"),
        (3600, "h", 60, "m"),
        (60, "m", 1, "s"),
    ):
        if whole >= size:
            return f"{whole // size}{unit}{(whole % size) // small:02d}{sub}"
    return f"{whole}s"


def _limits(q: views.QueueRow) -> list[str]:
    """A queue's limits as ``jobyard status`` words them."""
    limits = []
    if q.max_concurrency is not None:
        limits.append(f"max_concurrency={q.max_concurrency}")
    if q.max_pending is not None:
        limits.append(f"max_pending={q.max_pending}")
    if q.paused:
        limits.append("paused")
    if q.kept:
        limits.append(f"keep={format_duration(q.kept)}")
    return limits


@cli.command()
@click.argument("app_ref", metavar="APP")
@click.option("--status", "status_", type=click.Choice(STATUSES), default=None)
@click.option("--queue", default=None)
@click.option("--name", default=None, help="Job name.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
def jobs(
    app_ref: str,
    status_: str | None,
    queue: str | None,
    name: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List jobs, newest first."""
    app = _app(app_ref)
    found = app.jobs(queue=queue, status=status_, name=name, limit=limit)
    if as_json:
        for job in found:
            click.echo(json.dumps(views.job_fields(job)))
        return
    console = _console()
    if not found:
        console.print("no jobs match")
        return
    table = Table(box=box.SIMPLE_HEAD)
    columns = ("id", "name", "queue", "status", "priority", "attempts", "created", "finished")
    for column in columns:
        title = f"{column} (UTC)" if column in ("created", "finished") else column
        table.add_column(title, no_wrap=True, justify="right" if column == "priority" else "left")
    table.add_column("error")
    for job in found:
        table.add_row(
            cell(job.id),
            cell(job.name),
            cell(job.queue),
            str(job.status),
            str(job.priority),
            f"{job.attempts}/{job.max_attempts}",
            _when(job.created_at),
            _when(job.finished_at),
            cell(_last_line(job.error)),
        )
    console.print(table)
    more = " (more match: raise --limit)" if len(found) == limit else ""
    console.print(f"{len(found)} job(s), newest first{more}", markup=False)


@cli.command()
@click.argument("app_ref", metavar="APP")
@click.argument("job_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
def show(app_ref: str, job_id: str, as_json: bool) -> None:
    """Every field of job ID, with its error (and traceback) and result."""
    detail = views.job_detail(_app(app_ref), job_id)
    job, flow = detail.job, detail.workflow
    data = views.job_fields(job)
    tree = [] if flow is None else _marked_tree(flow, job.id)
    if as_json:
        if flow is not None:
            data["workflow"] = {"id": flow.id, "status": flow.status, "tree": tree}
        click.echo(json_text(data, indent=2))
        return
    console = _console()
    table = Table(box=box.SIMPLE, show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")  # a long id or token folds, never "…"
    cut = False
    for key, value in data.items():
        if key == "error":
            continue
        if key in ("args", "kwargs", "result"):
            text = _dumps(value)
        elif key in ("depends_on", "children"):
            text = " ".join(value)
        elif key == "attempts":
            text = f"{job.attempts} of {job.max_attempts}"
        elif key == "max_attempts":
            continue
        else:
            text = "" if value is None else str(value)
        if len(text) > SHOW_MAX:  # cut before escaping: an escape is never split
            text, cut = f"{text[:SHOW_MAX]} … ({len(text) - SHOW_MAX:,} more characters)", True
        table.add_row(key, cell(text))
    console.print(table)
    if job.error:
        console.print("error:", style="bold")
        error = job.error.rstrip()
        if len(error) > SHOW_MAX:
            error, cut = _cut_middle(error), True
        console.print(block(error))
    if flow is not None:
        head = f"workflow {flow.id} ({flow.status}, {len(flow.jobs)} jobs):"
        console.print(cell(head, style="bold"))
        for line in tree[:TREE_MAX]:
            console.print(cell(line[:SHOW_MAX]))
        if len(tree) > TREE_MAX:
            console.print(cell(f"… {len(tree) - TREE_MAX} more lines ('--json' prints them all)"))
    if cut:
        console.print(
            cell(
                f"(values longer than {SHOW_MAX} characters are cut: "
                f"'jobyard show {app_ref} {job_id} --json' prints them whole)"
            )
        )


def _cut_middle(text: str) -> str:
    """A long traceback's first and last :data:`SHOW_MAX` / 2 characters, with how many were
    cut between them: its outermost frames and the exception itself are at the two ends."""
    half = SHOW_MAX // 2
    return f"{text[:half]}\n… {len(text) - 2 * half:,} characters cut …\n{text[-half:]}"


def _marked_tree(flow: Workflow, job_id: str) -> list[str]:
    """The workflow's tree, this job's line marked."""
    return [f"{line}  ◀" if f" #{job_id} " in line else line for line in flow.render()]


def _cancel_workflow(app: App, job_id: str, by: str | None, dry_run: bool) -> None:
    workflow_id = app.get(job_id).workflow_id
    if workflow_id is None:
        raise click.UsageError(f"job {job_id} is not part of a chain or group")
    flow = app.workflow(workflow_id) if dry_run else app.cancel_workflow(workflow_id, by=by)
    counts = Counter(j.status.value for j in flow.jobs)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    note = "; nothing changed (--dry-run)" if dry_run else ""
    _echo(f"workflow {workflow_id}: {summary}{note}")


def _resume_workflow(app: App, job_id: str) -> None:
    workflow_id = app.get(job_id).workflow_id
    if workflow_id is None:
        raise click.UsageError(f"job {job_id} is not part of a chain or group")
    before = app.workflow(workflow_id)
    stopped = sum(j.status in (Status.FAILED, Status.CANCELLED) for j in before.jobs)
    flow = app.resume_workflow(workflow_id)
    counts = Counter(j.status.value for j in flow.jobs)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    asked = sum(j.status == Status.RUNNING and j.cancel_requested_at is not None for j in flow.jobs)
    done = f"resumed {stopped} failed or cancelled job(s)" if stopped else "nothing to resume"
    note = (
        f"; {asked} running job(s) asked to stop: if one ends cancelled, resume again"
        if asked
        else ""
    )
    _echo(f"workflow {workflow_id}: {done}; now {summary}{note}")


@cli.command()
@click.argument("app_ref", metavar="APP")
@click.argument("job_id", metavar="[ID]", required=False)
@click.option("--all", "every", is_flag=True, help="Re-drive every failed job the filters match.")
@click.option("--queue", default=None, help="With --all: only failed jobs of this queue.")
@click.option("--name", default=None, help="With --all: only failed jobs of this name.")
@click.option(
    "--error-contains", default=None, metavar="TEXT", help="With --all: only errors holding TEXT."
)
@click.option("--dry-run", is_flag=True, help="With --all: count what would be re-driven.")
@click.option(
    "--workflow",
    is_flag=True,
    help="Resume the whole chain or group job ID belongs to: its failed and cancelled jobs.",
)
def retry(
    app_ref: str,
    job_id: str | None,
    every: bool,
    queue: str | None,
    name: str | None,
    error_contains: str | None,
    dry_run: bool,
    workflow: bool,
) -> None:
    """Re-drive failed or cancelled job ID, or with --all every failed job (the dead letter)
    of --queue, --name and --error-contains: pending again, attempts reset. --all walks the
    dead letter in batches of 200, never all of it in memory.

    With --workflow, resume the chain or group job ID belongs to: each of its failed or
    cancelled jobs runs again, at once if its inputs completed, else once they have, so the
    workflow completes (a step of a cancelled workflow cannot be re-driven alone)."""
    filters = queue is not None or name is not None or error_contains is not None
    if workflow and (job_id is None or every or filters or dry_run):
        raise click.UsageError("--workflow takes a job ID of the workflow, and no other option")
    if job_id is not None and (every or filters or dry_run):
        raise click.UsageError("give a job ID or --all with its filters, not both")
    if job_id is None and not every:
        raise click.UsageError("give a job ID, or --all (with --queue/--name/--error-contains)")
    if job_id is None and error_contains == "":
        raise click.UsageError("--error-contains needs some text")
    if job_id is not None and workflow:
        _resume_workflow(_app(app_ref), job_id)
        return
    if job_id is not None:
        job = _app(app_ref).retry(job_id)
        _echo(f"job {job.id} is {job.status} again (attempts reset)")
        return
    if queue is not None:
        check_name("queue", queue)
    app = _app(app_ref)
    flt = _bulk.DeadFilter(queue=queue, name=name, contains=error_contains)
    done = _bulk.retry(
        app,
        flt,
        dry_run=dry_run,
        on_batch=None if dry_run else lambda n: _echo(f"re-driven {n} so far", err=True),
    )
    for problem in done.problems[:20]:
        _echo(f"not re-driven: {problem}", err=True)
    if len(done.problems) > 20:
        _echo(f"not re-driven: {len(done.problems) - 20} more", err=True)
    what = "failed job" if done.done == 1 else "failed jobs"
    if dry_run:
        _echo(f"{done.done} {what} would be re-driven; nothing changed (--dry-run)")
    else:
        _echo(
            f"re-drove {done.done} {what}"
            + (f", {len(done.problems)} refused" if done.problems else "")
        )


@cli.command("queue")
@click.argument("app_ref", metavar="APP")
@click.argument("queue_name", metavar="NAME")
@click.option("--pause", "pause_", is_flag=True, help="Stop every worker taking its jobs.")
@click.option("--resume", is_flag=True, help="Let the workers take its jobs again.")
@click.option(
    "--max-concurrency",
    default=None,
    metavar="N",
    help="Jobs of the queue running at once across every worker ('none': unlimited).",
)
def queue_cmd(
    app_ref: str, queue_name: str, pause_: bool, resume: bool, max_concurrency: str | None
) -> None:
    """Pause or resume queue NAME, or set its max_concurrency, keeping its other settings;
    with no option, print its settings."""
    if pause_ and resume:
        raise click.UsageError("give --pause or --resume, not both")
    limit: int | None = None
    if max_concurrency is not None:
        if max_concurrency.lower() in ("none", "unlimited"):
            limit = None
        else:
            try:
                limit = int(max_concurrency)
            except ValueError:
                raise click.UsageError(
                    f"--max-concurrency must be a whole number of at least 1 or 'none',"
                    f" got {max_concurrency!r}"
                ) from None
            if limit < 1:
                raise click.UsageError(f"--max-concurrency must be at least 1, got {limit}")
    check_name("queue", queue_name)
    app = _app(app_ref)
    if pause_ or resume:
        app.pause_queue(queue_name, pause_)
    if max_concurrency is not None:
        _bulk.set_max_concurrency(app, queue_name, limit)
    cfg = {q.name: q for q in app.queues()}.get(queue_name, QueueConfig(queue_name))
    state = "paused" if cfg.paused else "active"
    conc = "unlimited" if cfg.max_concurrency is None else str(cfg.max_concurrency)
    _echo(f"queue {queue_name}: {state}, max_concurrency={conc}")


@cli.command()
@click.argument("app_ref", metavar="APP")
@click.argument("job_id", metavar="[ID]", required=False)
@click.option(
    "--queue", default=None, help="Cancel every job of this queue not started (waiting steps too)."
)
@click.option(
    "--name", default=None, help="Cancel every job of this name not started (waiting steps too)."
)
@click.option("--dry-run", is_flag=True, help="Print what would be cancelled; change nothing.")
@click.option("--by", default=None, help="Who asks (recorded with the job; free text).")
@click.option("--workflow", is_flag=True, help="Cancel the whole chain or group job ID belongs to.")
def cancel(
    app_ref: str,
    job_id: str | None,
    queue: str | None,
    name: str | None,
    dry_run: bool,
    by: str | None,
    workflow: bool,
) -> None:
    """Cancel job ID, or every job of --queue and/or --name that has not started: the pending
    ones and the workflow steps still waiting for their inputs.

    A running job ID gets a cancellation request: its worker stops it at its next lease
    renewal (a sync handler only if it looks at current_job().cancel_requested). A cancelled
    job stays visible and can be re-driven with 'jobyard retry'."""
    if job_id is not None and (queue or name):
        raise click.UsageError("give a job ID or --queue/--name, not both")
    if job_id is None and not (queue or name):
        raise click.UsageError("give a job ID, or --queue and/or --name for every pending job")
    if workflow and job_id is None:
        raise click.UsageError("--workflow needs a job ID")
    app = _app(app_ref)
    if job_id is not None and workflow:
        _cancel_workflow(app, job_id, by, dry_run)
        return
    if job_id is not None:
        if dry_run:
            job = app.get(job_id)
            _echo(f"job {job.id} is {job.status}; nothing changed (--dry-run)")
            return
        job = app.cancel(job_id, by=by)
        if job.status == "running":
            _echo(f"job {job.id} is running: cancellation requested")
        else:
            _echo(f"job {job.id} is {job.status}")
        return
    ids = app.cancel_pending(queue=queue, name=name, dry_run=dry_run)
    for found in ids:
        _echo(found)
    what = " ".join(f"{k}={v}" for k, v in (("queue", queue), ("name", name)) if v)
    verb = "would cancel" if dry_run else "cancelled"
    _echo(f"{verb} {len(ids)} pending or waiting job(s) of {what}", err=True)


@cli.command()
@click.argument("app_ref", metavar="APP")
@click.option(
    "--status",
    "statuses",
    type=click.Choice(FINISHED),
    multiple=True,
    help="Status to delete (repeatable) [default: completed, failed and cancelled].",
)
@click.option(
    "--older-than",
    type=DURATION,
    default=0.0,
    help="Only jobs finished at least this long ago: 30s, 15m, 7d or seconds.",
)
@click.option("--queue", default=None, help="Only this queue.")
@click.option("--dry-run", is_flag=True, help="Print how many jobs would go; delete nothing.")
@click.option(
    "--yes", "-y", is_flag=True, help="Delete failed jobs (the dead letter) without asking."
)
def purge(
    app_ref: str,
    statuses: tuple[str, ...],
    older_than: float,
    queue: str | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """Delete finished jobs.

    Failed jobs are the dead letter, kept with their errors for 'jobyard show' and 'jobyard
    retry': deleting them asks first, or needs --yes where nobody can answer.

    Workflows: the waiting steps after a deleted failed or cancelled job go with it (they could
    never run); a completed job whose result a step that has not completed still needs is kept
    (a failed or cancelled step may be retried, and reads it again), and said so."""
    app = _app(app_ref)
    targets = statuses or FINISHED
    if dry_run:
        counts = app.purge_preview(targets, older_than=older_than, queue=queue)
        kept = counts.pop("kept", 0)
        listed = ", ".join(f"{n} {s}" for s, n in counts.items())
        click.echo(f"would purge {sum(counts.values())} job(s): {listed}")
        _say_kept(kept, "would keep")
        return
    if "failed" in targets and not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(
                "purging failed jobs (the dead letter) needs --yes; "
                "or purge others only: --status completed --status cancelled"
            )
        failed = app.purge_preview(("failed",), older_than=older_than, queue=queue)["failed"]
        prompt = (
            f"delete {failed} failed job(s), the dead letter, with their errors and tracebacks?"
        )
        if failed and not click.confirm(prompt, default=False, err=True):
            raise click.ClickException("nothing purged")
    purged = app.purge(targets, older_than=older_than, queue=queue)
    steps = (
        f", of which {purged.waiting} waiting workflow step(s) that could never run"
        if purged.waiting
        else ""
    )
    click.echo(f"purged {int(purged)} job(s){steps}")
    _say_kept(purged.kept, "kept")


def _say_kept(kept: int, verb: str) -> None:
    if kept:
        click.echo(
            f"{verb} {kept} completed job(s) whose result a workflow step that has not completed "
            "still needs: they go once it completes, or once it is purged"
        )


@cli.command()
@click.argument("app_ref", metavar="APP")
def migrate(app_ref: str) -> None:
    """Create or upgrade the store's schema."""
    app = _app(app_ref)
    applied = app.migrate()
    for name in applied:
        click.echo(f"applied {name}")
    if not applied:
        click.echo(f"schema is up to date ({mask_url(app.url)})")


@cli.command()
@click.argument("app_ref", metavar="APP")
@click.option(
    "--sync",
    is_flag=True,
    help="Store APP's schedules now, deactivating stored ones APP no longer has "
    "(workers of an app with schedules do this when they start).",
)
@click.option(
    "--pause",
    "pause",
    metavar="NAME",
    multiple=True,
    help="Pause the stored schedule NAME: it fires nothing until resumed, across restarts and "
    "deploys. Repeatable.",
)
@click.option(
    "--resume",
    "resume",
    metavar="NAME",
    multiple=True,
    help="Resume the paused schedule NAME from its next tick (ticks missed while paused never "
    "fire). Repeatable.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
def cron(
    app_ref: str, sync: bool, pause: tuple[str, ...], resume: tuple[str, ...], as_json: bool
) -> None:
    """Recurring jobs: each schedule with its ticks (cron expression and timezone, or every N
    seconds), catch-up policy, job, state, next and last run (UTC).

    Workers fire the ticks; each tick enqueues its job exactly once, whichever worker wins."""
    app = _app(app_ref)
    if sync:
        app.sync_schedules()
    for name in pause:
        app.pause_schedule(name)
        if not as_json:
            _echo(f"paused {name}")
    for name in resume:
        app.resume_schedule(name)
        if not as_json:
            _echo(f"resumed {name}")
    rows = views.schedules(app)
    if as_json:
        for row in rows:
            if not row.stored:
                continue
            click.echo(
                _dumps(
                    {
                        "name": row.name,
                        "cron": row.cron,
                        "every": row.every,
                        "timezone": row.timezone,
                        "catch_up": row.catch_up,
                        "job": row.job,
                        "queue": row.queue,
                        "active": row.active,
                        "paused": row.paused,
                        "next_run_at": _iso(row.next_run_at),
                        "last_run_at": _iso(row.last_run_at),
                    }
                )
            )
        return
    table = Table(title="schedules")
    columns = ("name", "ticks", "catch up", "job", "queue", "state", "next run", "last run")
    for column in (*columns, "in APP"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            cell(row.name),
            cell(_ticks(row)),
            cell(row.catch_up),
            cell(row.job),
            cell(row.queue),
            row.state,
            _at(row.next_run_at) if row.state == "active" else "",
            _at(row.last_run_at),
            "yes" if row.declared else "no",
        )
    _console().print(table)


def _ticks(sched: views.ScheduleRow) -> str:
    """A schedule's ticks in a few words: "0 9 * * 1-5 (Europe/Berlin)" or "every 30s"."""
    if sched.cron is None:
        every = sched.every
        return f"every {every:g}s" if isinstance(every, float | int) else f"every {every!r}"
    return sched.cron if sched.timezone == "UTC" else f"{sched.cron} ({sched.timezone})"


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _loopback(host: str) -> bool:
    """True for an address only this machine can reach."""
    import ipaddress

    if host.lower() in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@cli.command()
@click.argument("app_ref", metavar="APP")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8181, show_default=True)
@click.option(
    "--token",
    envvar="JOBYARD_DASHBOARD_TOKEN",
    default=None,
    help="Every request must carry it (the sign-in page asks for it); required on any address"
    " but a loopback one. Also $JOBYARD_DASHBOARD_TOKEN.",
)
@click.option(
    "--read-token",
    envvar="JOBYARD_DASHBOARD_READ_TOKEN",
    default=None,
    help="A second token that may only look. Also $JOBYARD_DASHBOARD_READ_TOKEN.",
)
@click.option("--read-only", is_flag=True, help="Show everything, allow no action.")
@click.option(
    "--refresh",
    type=click.FloatRange(min=0.5),
    default=3.0,
    show_default=True,
    help="Seconds between updates of the live parts while a tab is visible.",
)
def dashboard(
    app_ref: str,
    host: str,
    port: int,
    token: str | None,
    read_token: str | None,
    read_only: bool,
    refresh: float,
) -> None:
    """Serve the dashboard of APP (the web extra: pip install 'jobyard[web]').

    It binds 127.0.0.1 by default; any other address needs --token (or
    $JOBYARD_DASHBOARD_TOKEN). Every action is logged on the jobyard.web logger."""
    token = token or None
    read_token = read_token or None
    if not _loopback(host) and token is None and read_token is None:
        raise click.UsageError(
            f"refusing to serve the dashboard on {host} without a token: anyone who reaches it"
            " could retry, cancel and purge jobs; give --token or set JOBYARD_DASHBOARD_TOKEN"
            " (or bind 127.0.0.1)"
        )
    from .web import create_app

    app = _app(app_ref)
    try:
        asgi: Any = create_app(
            app, token=token, read_only=read_only, read_token=read_token, refresh=refresh
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if token is None and read_token is None:
        from .web._auth import only_hosts

        # No token: only this machine's own names, so that no other site's page can reach it
        # through a DNS name that points at 127.0.0.1 (DNS rebinding).
        asgi = only_hosts(asgi, (*LOOPBACK_HOSTS, host))
    logging.basicConfig(
        level=logging.ERROR, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("jobyard.web").setLevel(logging.INFO)
    import uvicorn

    shown = f"[{host}]" if ":" in host else host
    access = "read-only" if read_only else ("token required" if token or read_token else "open")
    click.echo(
        f"jobyard dashboard on http://{shown}:{port}/ ({access}; store {mask_url(app.url)})",
        err=True,
    )
    uvicorn.run(asgi, host=host, port=port, log_level="warning", access_log=False)


@cli.command()
@click.option(
    "--orders",
    type=click.IntRange(min=1, max=100_000),
    default=300,
    show_default=True,
    help="Orders to place.",
)
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    default=None,
    help="SQLite file to use and keep [default: a temporary one].",
)
@click.option("--workers", type=click.IntRange(min=1, max=16), default=2, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True)
def demo(orders: int, db: str | None, workers: int, concurrency: int) -> None:
    """The order example on SQLite: orders arrive, real worker processes send emails,
    invoices and thumbnails, some fail and are retried, and one ends in the dead letter."""
    from .demo import run

    code = run(orders=orders, db=db, workers=workers, concurrency=concurrency)
    if code:
        sys.exit(code)


# --- entry point --------------------------------------------------------------------------------


def _echo(line: str, err: bool = False) -> None:
    """One line of output holding values from jobs or the store: control characters escaped."""
    click.echo(printable(line), err=err)


def _fail(message: str, code: int) -> NoReturn:
    line = " ".join(scrub(message).split())  # a driver's error may quote its DSN
    _echo(f"error: {line}", err=True)
    sys.exit(code)


def _is_store_error(exc: BaseException) -> bool:
    """A driver's connection or operational error, whatever the driver."""
    if isinstance(exc, OSError | TimeoutError):
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"OperationalError", "ConnectionError", "InterfaceError", "RedisError"})


def main(argv: Sequence[str] | None = None) -> None:
    """The ``jobyard`` command (also ``python -m jobyard``)."""
    # A job's text may hold what no terminal encoding can print (a lone surrogate, stored as
    # given): shown escaped, never a UnicodeEncodeError halfway through a table.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        code = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="jobyard",
            standalone_mode=False,
        )
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else "", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        _fail(exc.format_message() + hint, EXIT_BAD_INPUT)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    except click.exceptions.Abort:
        _fail("aborted", 130)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("JOBYARD_DEBUG"):
            raise  # the whole traceback, for a bug report
        if isinstance(exc, ConfigurationError | JobNotFound | InvalidTransition | DuplicateJob):
            _fail(str(exc), EXIT_BAD_INPUT)
        if isinstance(exc, JobyardError):  # QueueFull, SchemaError: input fine, the store refused
            _fail(str(exc), EXIT_FAILURE)
        if _is_store_error(exc):
            store = f" {mask_url(_loaded[-1].url)}" if _loaded else ""
            _fail(f"the store{store} failed: {type(exc).__name__}: {exc}", EXIT_FAILURE)
        raise
    sys.exit(code if isinstance(code, int) else 0)
