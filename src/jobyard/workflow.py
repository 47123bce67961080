"""Chains and groups: work composed of jobs, written once above the stores.

A workflow is inserted whole, in one batch: its first jobs ``pending``, every later step
``waiting`` on the jobs whose results it takes (``NewJob.after``). The store releases a step in
the same atomic move as the completion of its last input, so no worker ever blocks on another
job and a join is enqueued exactly once. When a step runs, the worker reads its inputs' results
and passes them as its first argument (``feed`` in its payload, see :func:`feed_value`).

The shape of what a node passes on: a job passes its result; a chain what its last node passes;
a group the list of what its members pass, in member order.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, Union

from ._codec import CorruptPayload, decode_payload, encode_step
from .backends.base import NewJob
from .errors import ConfigurationError, JobCancelled, JobFailed, JobNotFound
from .job import Job, JobHandle, Signature, Status

if TYPE_CHECKING:
    from ._enqueue import Enqueue

# Where a step's first argument comes from: a position in its ``depends_on`` (that job's
# result), or a list of such shapes (a group's results, nested as the groups nest).
MAX_WORKFLOW = 100_000  # jobs in one workflow: one insert, one listing
Feed: TypeAlias = int | list["Feed"]
Node: TypeAlias = Union[Signature, "Chain", "Group"]


@dataclass(frozen=True)
class Chain:
    """Nodes run one after another; each gets what the one before passes as its first argument.
    A step that ends failed (or cancelled) stops the chain: later steps stay ``waiting``, and
    ``app.retry`` of the failed step resumes it from there."""

    steps: tuple[Node, ...]

    def __post_init__(self) -> None:
        _check_nodes("chain", self.steps)

    def enqueue(self) -> WorkflowHandle:
        """Insert every step in one round trip (all or nothing); returns at once."""
        return _enqueue(self)


@dataclass(frozen=True)
class Group:
    """Nodes that run side by side; ``.then(join)`` runs ``join`` once, with the list of their
    results in member order, after every member has completed."""

    members: tuple[Node, ...]

    def __post_init__(self) -> None:
        _check_nodes("group", self.members)

    def then(self, *steps: Node) -> Chain:
        """A chain of this group and ``steps``: the first step joins the group."""
        return Chain((self, *steps))

    def enqueue(self) -> WorkflowHandle:
        """Insert every member in one round trip (all or nothing); returns at once."""
        return _enqueue(self)


def chain(*steps: Node) -> Chain:
    """``chain(fetch.s(url), resize.s(width=200), publish.s())``: each step's result is the
    next step's first argument."""
    return Chain(tuple(steps))


def group(*members: Node) -> Group:
    """``group(*[resize.s(u) for u in urls]).then(summarise.s())``: fan out, then join."""
    return Group(tuple(members))


def _check_nodes(kind: str, nodes: tuple[Any, ...]) -> None:
    if not nodes:
        raise ConfigurationError(f"a {kind} needs at least one step")
    for node in nodes:
        if not isinstance(node, Signature | Chain | Group):
            raise ConfigurationError(
                f"a {kind} takes signatures (fn.s(...)), chains and groups, not {node!r}"
            )


# --- compiling a workflow into one insert batch ----------------------------------------------


@dataclass
class _Batch:
    """The jobs of one workflow, in the order they are inserted (inputs before the steps that
    take them)."""

    workflow_id: str
    jobs: list[NewJob] = field(default_factory=list)
    enqueue: Enqueue | None = None
    reader: Any = None

    def place(self, node: Node, takes: Feed | None, at: str) -> Feed:
        """Add ``node`` fed by ``takes`` (batch positions); returns what it passes on."""
        if isinstance(node, Chain):
            for i, step in enumerate(node.steps):
                takes = self.place(step, takes, f"{at}c{i}/")
            assert takes is not None
            return takes
        if isinstance(node, Group):
            return [self.place(m, takes, f"{at}g{i}/") for i, m in enumerate(node.members)]
        return self._add(node, takes, at.rstrip("/"))

    def _add(self, sig: Signature, takes: Feed | None, at: str) -> int:
        fn = sig.fn
        if self.enqueue is None:
            self.enqueue, self.reader = fn._enqueue, fn._jobs
        elif fn._enqueue is not self.enqueue:
            raise ConfigurationError("every step of a workflow must come from the same App")
        opts = fn.opts
        if opts.idempotency_key is not None or opts.parent_id is not None:
            raise ConfigurationError(
                f"{fn.name}: a step of a chain or group cannot set idempotency_key or parent_id"
            )
        if opts.connection is not None:
            raise ConfigurationError(f"{fn.name}: a workflow cannot join a caller's transaction")
        after = _leaves(takes)
        feed = None if takes is None else _positions(takes, {p: i for i, p in enumerate(after)})
        # The step's own arguments are checked now; its first (fed) argument is a placeholder.
        fed_args = sig.args if takes is None else (None, *sig.args)
        fn.check_call(fed_args, sig.kwargs)
        new = opts.new_job(sig.args, sig.kwargs)
        payload = encode_step(new.payload, at, feed)
        self.jobs.append(
            replace(new, payload=payload, workflow_id=self.workflow_id, after=tuple(after))
        )
        return len(self.jobs) - 1


def _leaves(takes: Feed | None) -> list[int]:
    if takes is None:
        return []
    if isinstance(takes, int):
        return [takes]
    return [leaf for t in takes for leaf in _leaves(t)]


def _positions(takes: Feed, where: dict[int, int]) -> Feed:
    """``takes`` (batch positions) as positions in the step's own ``depends_on``."""
    if isinstance(takes, int):
        return where[takes]
    return [_positions(t, where) for t in takes]


def compile_workflow(node: Node) -> tuple[_Batch, Feed]:
    """The insert batch of ``node`` and what it passes on (batch positions)."""
    batch = _Batch(workflow_id=uuid.uuid4().hex[:20])
    out = batch.place(node, None, "c0/" if isinstance(node, Signature) else "")
    if len(batch.jobs) > MAX_WORKFLOW:
        raise ConfigurationError(
            f"a workflow holds at most {MAX_WORKFLOW} jobs, this one {len(batch.jobs)}"
        )
    return batch, out


def _enqueue(node: Node) -> WorkflowHandle:
    batch, out = compile_workflow(node)
    assert batch.enqueue is not None
    inserted = batch.enqueue.insert(batch.jobs)
    ids = [i.id for i in inserted]
    return WorkflowHandle(batch.reader, batch.workflow_id, ids, _map(out, ids))


def _map(out: Feed, ids: list[str]) -> Any:
    return ids[out] if isinstance(out, int) else [_map(o, ids) for o in out]


def feed_value(feed: Any, results: Sequence[Any]) -> Any:
    """A step's first argument: ``feed`` with each position replaced by that input's result."""
    if isinstance(feed, bool) or not isinstance(feed, int | list):
        raise ValueError(f"a step's feed must be positions, got {feed!r}")
    if isinstance(feed, int):
        return results[feed]
    return [feed_value(f, results) for f in feed]


# --- reading a workflow back -------------------------------------------------------------------


@dataclass(frozen=True)
class StepNode:
    """One node of a workflow's tree: a job (``job``), or a chain or group of ``children``."""

    kind: str  # "job", "chain" or "group"
    job: Job | None = None
    children: tuple[StepNode, ...] = ()


@dataclass(frozen=True)
class Workflow:
    """A workflow as stored: its jobs and their tree (``app.workflow(id)``)."""

    id: str
    jobs: tuple[Job, ...]  # in workflow order
    tree: StepNode

    @property
    def status(self) -> str:
        """``failed`` or ``cancelled`` if a job ended so (the rest cannot finish), ``completed``
        when every job did, else ``running`` (some job is running or due) or ``waiting``."""
        statuses = {j.status for j in self.jobs}
        for stopped in (Status.FAILED, Status.CANCELLED):
            if stopped in statuses:
                return stopped.value
        if statuses == {Status.COMPLETED}:
            return "completed"
        if statuses & {Status.RUNNING, Status.PENDING}:
            return "running"
        return "waiting"

    @property
    def failed(self) -> list[Job]:
        """The jobs that ended failed: the members or steps that stopped the workflow."""
        return [j for j in self.jobs if j.status == Status.FAILED]

    def render(self) -> list[str]:
        """The tree as text lines, one per node (``jobyard show``)."""
        lines: list[str] = []
        _render(self.tree, "", "", lines)
        return lines


def _render(node: StepNode, first: str, rest: str, lines: list[str]) -> None:
    if node.job is not None:
        j = node.job
        extra = f" ({j.error.splitlines()[-1][:60]})" if j.error and j.status.finished else ""
        lines.append(f"{first}{j.name} #{j.id} {j.status.value}{extra}")
        return
    lines.append(f"{first}{node.kind}")
    for i, child in enumerate(node.children):
        last = i == len(node.children) - 1
        _render(child, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "), lines)


def build_workflow(workflow_id: str, jobs: Sequence[Job], places: dict[str, str]) -> Workflow:
    """The tree of a workflow's ``jobs`` from each job's place (``places``: id -> "c0/g1")."""
    places = _placed(jobs, places)
    root: dict[Any, Any] = {}  # place segment ("c0", "g1") -> subtree; None -> the job there
    for job in jobs:
        node = root
        for part in places[job.id].split("/"):
            node = node.setdefault(part, {})
        node[None] = job
    ordered = sorted(jobs, key=lambda j: [_index(p) for p in places[j.id].split("/")])

    def tree(node: dict[Any, Any]) -> StepNode:
        if None in node:
            return StepNode("job", job=node[None])
        parts = sorted(node, key=_index)
        kind = "chain" if parts[0][:1] == "c" else "group"  # a segment names its container
        return StepNode(kind, children=tuple(tree(node[p]) for p in parts))

    return Workflow(workflow_id, tuple(ordered), tree(root))


def _placed(jobs: Sequence[Job], places: dict[str, str]) -> dict[str, str]:
    """Every job's place; a job without one (a corrupt payload) or sharing one goes after the
    rest, at the top of the tree, so that it is still shown."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    lost = []
    for job in jobs:
        place = places.get(job.id)
        if place is None or place in taken or not all(p[1:].isdigit() for p in place.split("/")):
            lost.append(job)
            continue
        out[job.id] = place
        taken.add(place)
    kind = next(iter(out.values()), "c")[:1]
    top = max((_index(p.split("/")[0]) for p in out.values()), default=-1)
    for i, job in enumerate(lost, top + 1):
        out[job.id] = f"{kind}{i}"
    return out


def _index(part: str) -> int:
    return int(part[1:]) if part[1:].isdigit() else 0


def place_of(payload: str) -> str | None:
    """A workflow job's place ("c0/g1") from its stored payload, or None (a corrupt one)."""
    try:
        return decode_payload(payload).at
    except CorruptPayload:
        return None


class WorkflowReader(Protocol):
    """What a workflow handle reads through (the App)."""

    def get(self, job_id: str) -> Job: ...

    def workflow(self, workflow_id: str) -> Workflow: ...

    def cancel_workflow(self, workflow_id: str, *, by: str | None = None) -> Workflow: ...

    def results(self, ids: Sequence[str]) -> dict[str, Job]: ...


class WorkflowHandle:
    """What a chain's or group's ``enqueue`` returns."""

    def __init__(self, reader: WorkflowReader, workflow_id: str, ids: list[str], out: Any):
        self._reader = reader
        self.id = workflow_id
        self.ids = ids  # every job of the workflow, in workflow order
        self._out = out  # the ids whose results make the workflow's result

    @property
    def jobs(self) -> list[JobHandle]:
        """A handle per job, in workflow order."""
        return [JobHandle(self._reader, i) for i in self.ids]

    def get(self) -> Workflow:
        """The workflow as stored now."""
        return self._reader.workflow(self.id)

    def cancel(self, *, by: str | None = None) -> Workflow:
        """Cancel what has not run yet and ask the running jobs to stop."""
        return self._reader.cancel_workflow(self.id, by=by)

    def result(self, timeout: float | None = None, poll: float = 0.05) -> Any:
        """Wait for the workflow to complete; its result (a chain's last result, a group's list).

        Raises :class:`JobFailed` or :class:`JobCancelled` for the first job that ended so
        (a stopped workflow never completes), ``TimeoutError`` after ``timeout`` seconds. It
        polls the jobs that make the result, and the whole workflow about once a second."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll
        wanted = _ids(self._out)
        whole_at = time.monotonic() + 1.0
        while True:
            done = self._reader.results(wanted)
            stopped = [j for j in done.values() if j.status in (Status.FAILED, Status.CANCELLED)]
            if not stopped and time.monotonic() >= whole_at:
                stopped = [j for j in self.get().jobs if j.status.finished]
                stopped = [j for j in stopped if j.status != Status.COMPLETED]
                whole_at = time.monotonic() + 1.0
            if stopped:
                job = stopped[0]
                if job.status == Status.FAILED:
                    raise JobFailed(job.id, job.error)
                raise JobCancelled(job.id)
            if len(done) < len(wanted):
                gone = next(i for i in wanted if i not in done)
                raise JobNotFound(gone, "purged before the workflow's result was read")
            if all(j.status == Status.COMPLETED for j in done.values()):
                return _pick(self._out, {i: j.result for i, j in done.items()})
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"workflow {self.id} is not complete after {timeout}s")
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
            time.sleep(delay if remaining is None else min(delay, remaining))
            delay = min(delay * 1.5, 0.5)

    def __repr__(self) -> str:
        return f"WorkflowHandle({self.id!r}, jobs={len(self.ids)})"


def _ids(out: Any) -> list[str]:
    return [out] if isinstance(out, str) else [i for o in out for i in _ids(o)]


def _pick(out: Any, results: dict[str, Any]) -> Any:
    return results[out] if isinstance(out, str) else [_pick(o, results) for o in out]
