"""The dashboard's actions (POST): each is allowed by :class:`._auth.Guard` (an admin, a CSRF
token that matches, this site's origin), makes its moves through :mod:`._data`, logs one line
on ``jobyard.web`` (who, what, how many jobs) and redirects back with a message."""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..errors import ConfigurationError
from . import _data
from ._pages import _dead_filter
from ._site import Site, log_action, who


def _form(request: Request) -> dict[str, str]:
    form: dict[str, str] = request.state.form
    return form


def _field(form: dict[str, str], name: str) -> str:
    value = form.get(name, "").strip()
    if not value:
        raise ConfigurationError(f"the form lacks {name!r}")
    return value


def _job_path(job_id: str) -> str:
    from urllib.parse import quote

    return "/jobs/" + quote(job_id, safe=":")


def retry(site: Site, request: Request) -> Response:
    """Re-drive one failed or cancelled job."""
    form = _form(request)
    job_id = _field(form, "id")
    job = site.app.retry(job_id)
    log_action(request, "retry", f"job {job_id}", 1)
    back = form.get("next") or _job_path(job_id)
    return site.done(request, back, f"Job {job.id} is {job.status.value} again (attempts reset).")


def cancel(site: Site, request: Request) -> Response:
    """Cancel one job; a running one is asked to stop."""
    form = _form(request)
    job_id = _field(form, "id")
    job = _data.cancel(site.app, job_id, by=f"dashboard: {who(request)}")
    log_action(request, "cancel", f"job {job_id}", 1)
    if job.status.value == "running":
        message = f"Job {job.id} is running: cancellation requested."
    else:
        message = f"Job {job.id} is {job.status.value}."
    return site.done(request, form.get("next") or _job_path(job_id), message)


def cancel_workflow(site: Site, request: Request) -> Response:
    """Cancel what has not run yet of a workflow; ask its running jobs to stop."""
    form = _form(request)
    workflow_id = _field(form, "workflow")
    before = site.app.workflow(workflow_id)
    open_jobs = sum(1 for j in before.jobs if not j.status.finished)
    flow = _data.cancel_workflow(site.app, workflow_id, by=f"dashboard: {who(request)}")
    log_action(request, "cancel workflow", f"workflow {workflow_id}", open_jobs)
    cancelled = sum(1 for j in flow.jobs if j.status.value == "cancelled")
    running = sum(1 for j in flow.jobs if j.status.value == "running")
    message = f"Workflow {workflow_id}: {cancelled} cancelled" + (
        f", {running} running asked to stop." if running else "."
    )
    return site.done(request, form.get("next") or "/", message)


def resume_workflow(site: Site, request: Request) -> Response:
    """Run a failed or cancelled workflow's stopped jobs again, so that it completes."""
    form = _form(request)
    workflow_id = _field(form, "workflow")
    before = site.app.workflow(workflow_id)
    stopped = sum(1 for j in before.jobs if j.status.value in ("failed", "cancelled"))
    flow = _data.resume_workflow(site.app, workflow_id)
    log_action(request, "resume workflow", f"workflow {workflow_id}", stopped)
    running = sum(1 for j in flow.jobs if j.status.value == "running" and j.cancel_requested_at)
    message = f"Workflow {workflow_id}: {stopped} job(s) resumed, the workflow is {flow.status}" + (
        f"; {running} running job(s) asked to stop: if one ends cancelled, resume again."
        if running
        else "."
    )
    return site.done(request, form.get("next") or "/", message)


def queue(site: Site, request: Request) -> Response:
    """Pause, resume, or set a queue's max_concurrency (its other settings kept)."""
    form = _form(request)
    name = _field(form, "queue")
    op = _field(form, "op")
    back = form.get("next") or "/"
    if op in ("pause", "resume"):
        _data.pause_queue(site.app, name, op == "pause")
        log_action(request, op, f"queue {name}", 0)
        return site.done(request, back, f"Queue {name} {'paused' if op == 'pause' else 'resumed'}.")
    if op == "concurrency":
        raw = form.get("value", "").strip()
        try:
            value = None if raw == "" else int(raw)
        except ValueError:
            raise ConfigurationError(
                f"max_concurrency must be a whole number (empty: unlimited), got {raw!r}"
            ) from None
        _data.set_max_concurrency(site.app, name, value)
        log_action(request, f"set max_concurrency={value}", f"queue {name}", 0)
        shown = "unlimited" if value is None else str(value)
        return site.done(request, back, f"Queue {name}: max_concurrency {shown}.")
    raise ConfigurationError(f"unknown queue action {op!r}")


def dead(site: Site, request: Request) -> Response:
    """Retry one failed job, or retry or purge every one the filter matches (after the
    confirmation page said how many)."""
    form = _form(request)
    op = _field(form, "op")
    flt = _dead_filter(form)
    back = form.get("next") or "/dead"
    if op == "retry":
        done, problems = _data.retry_dead(site.app, flt)
        log_action(request, "retry dead letter", _describe(flt), done)
        message = f"Retried {done:,} failed job(s) ({form.get('expected', '?')} were shown)."
        if problems:
            message += f" {len(problems)} could not be: {problems[0]}"
        return site.done(request, back, message, ok=not problems)
    if op == "purge":
        purged = _data.purge_dead(site.app, flt)
        log_action(request, "purge dead letter", _describe(flt), purged)
        return site.done(
            request, back, f"Purged {purged:,} failed job(s) ({form.get('expected', '?')} shown)."
        )
    raise ConfigurationError(f"unknown dead-letter action {op!r}")


def _describe(flt: _data.DeadFilter) -> str:
    parts = [
        f"{k}={v!r}"
        for k, v in (
            ("queue", flt.queue),
            ("name", flt.name),
            ("error", flt.error_line),
            ("contains", flt.contains),
        )
        if v is not None
    ]
    return "matching " + (" ".join(parts) if parts else "everything")


def schedule(site: Site, request: Request) -> Response:
    """Pause, resume, or run a stored schedule's job now."""
    form = _form(request)
    name = _field(form, "name")
    op = _field(form, "op")
    back = form.get("next") or "/schedules"
    if op in ("pause", "resume"):
        _data.pause_schedule(site.app, name, op == "pause")
        log_action(request, f"{op} schedule", name, 0)
        verb = "paused" if op == "pause" else "resumed"
        return site.done(request, back, f"Schedule {name} {verb}.")
    if op == "run":
        job_id = _data.run_schedule_now(site.app, name)
        log_action(request, "run schedule now", name, 1)
        return site.done(request, _job_path(job_id), f"Schedule {name}: job {job_id} enqueued.")
    raise ConfigurationError(f"unknown schedule action {op!r}")


def _json(text: str, kind: type, label: str) -> Any:
    try:
        value = json.loads(text or ("[]" if kind is list else "{}"))
    except ValueError as exc:
        raise ConfigurationError(f"{label} is not JSON: {exc}") from None
    if not isinstance(value, kind):
        want = "an array" if kind is list else "an object"
        raise ConfigurationError(f"{label} must be {want}, got {type(value).__name__}")
    return value


def _options(form: dict[str, str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if form.get("queue", "").strip():
        options["queue"] = form["queue"].strip()
    if form.get("priority", "").strip():
        try:
            options["priority"] = int(form["priority"])
        except ValueError:
            raise ConfigurationError(
                f"priority must be a whole number, got {form['priority']!r}"
            ) from None
    if form.get("delay", "").strip():
        try:
            delay = float(form["delay"])
        except ValueError:
            raise ConfigurationError(f"delay must be seconds, got {form['delay']!r}") from None
        if not math.isfinite(delay) or delay < 0:
            raise ConfigurationError(f"delay must be seconds, got {form['delay']!r}")
        options["delay"] = delay
    if form.get("idempotency_key", ""):
        options["idempotency_key"] = form["idempotency_key"]
    return options


def enqueue(site: Site, request: Request) -> Response:
    """Enqueue a job of the app, its arguments checked against the handler's signature; bad
    input shows the form again with what was typed, and says why."""
    form = _form(request)
    name = form.get("job", "")
    try:
        args = _json(form.get("args", ""), list, "args")
        kwargs = _json(form.get("kwargs", ""), dict, "kwargs")
        job_id, created = _data.enqueue(site.app, name, args, kwargs, _options(form))
    except ConfigurationError as exc:
        return site.render(
            request,
            "enqueue.html",
            "enqueue",
            status=400,
            signatures=response_context(site, request)["signatures"],
            defaults={n: f.opts.queue for n, f in site.app.registry.items()},
            chosen=name if name in site.app.registry else None,
            form=form,
            problem=str(exc),
        )
    log_action(request, "enqueue", f"{name} as job {job_id}", 1 if created else 0)
    message = (
        f"Job {job_id} enqueued."
        if created
        else f"Idempotency key held by pending or running job {job_id}: no new job."
    )
    return site.done(request, _job_path(job_id), message)


def response_context(site: Site, request: Request) -> dict[str, Any]:
    """The enqueue form's signatures (shared with the page)."""
    del request
    return {
        "signatures": {
            name: f"{name}{fn.signature}" if fn.signature is not None else name
            for name, fn in sorted(site.app.registry.items())
        }
    }
