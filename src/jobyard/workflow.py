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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, Union

from ._codec import CorruptPayload, decode_payload, encode_step
from .backends.base import NewJob
from .errors import ConfigurationError, JobCancelled, JobFailed, JobNotFound
from .job import Job, JobHandle, Signature, Status

if TYPE_CHECKING:
    from ._enqueue import Enqueue

MAX_WORKFLOW = 100_000  # jobs in one workflow: one insert, one listing
# Chains and groups nested in one another at most this deep (a lone signature is 0 deep,
# ``chain(a, b)`` 1, ``chain(a, group(b, c))`` 2). Compiling a workflow recurses once per level
# (two frames in a group), so 100 levels stay far inside Python's recursion limit of 1,000
# whatever the caller's own stack; everything that reads a stored workflow back (its tree, a
# step's feed) walks iteratively and never depends on this bound.
MAX_DEPTH = 100
# Where a step's first argument comes from: a position in its ``depends_on`` (that job's
# result), or a list of such shapes (a group's results, nested as the groups nest).
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
        if opts.on_conflict != "keep":
            raise ConfigurationError(
                f"{fn.name}: a step of a chain or group cannot set on_conflict"
            )
        if opts.connection is not None:
            raise ConfigurationError(f"{fn.name}: a workflow cannot join a caller's transaction")
        after = _leaves(takes)
        feed = None if takes is None else _positions(takes, {p: i for i, p in enumerate(after)})
        # The step's own arguments are checked now; its first (fed) argument is a placeholder.
        fed_args = sig.args if takes is None else (None, *sig.args)
        fn.check_call(fed_args, sig.kwargs)
        new = opts.new_job(sig.args, sig.kwargs)
        payload = encode_step(new.payload, at, feed, self.workflow_id)
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


def _nesting(node: Node) -> int:
    """How deep chains and groups nest in ``node`` (a signature: 0), walked without recursion
    so that any depth can be measured, and refused, before anything recurses over it."""
    deepest = 0
    stack: list[tuple[Node, int]] = [(node, 0)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, Signature):
            deepest = max(deepest, depth)
        else:
            children = current.steps if isinstance(current, Chain) else current.members
            stack.extend((child, depth + 1) for child in children)
    return deepest


def compile_workflow(node: Node) -> tuple[_Batch, Feed]:
    """The insert batch of ``node`` and what it passes on (batch positions). A workflow nested
    deeper than :data:`MAX_DEPTH` is refused with a ConfigurationError naming the limit."""
    depth = _nesting(node)
    if depth > MAX_DEPTH:
        raise ConfigurationError(
            f"chains and groups nest at most {MAX_DEPTH} levels deep in a workflow, "
            f"this one {depth}: flatten it (a chain of chains is one chain)"
        )
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
    """A step's first argument: ``feed`` with each position replaced by that input's result.

    The feed comes from a stored payload, which may nest as deep as its JSON decoder allowed:
    it is walked with a stack of its own, never by recursion."""

    def leaf(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | list):
            raise ValueError(f"a step's feed must be positions, got {value!r}")
        return results[value] if isinstance(value, int) else None

    if not isinstance(feed, list):
        return leaf(feed)
    top: list[Any] = []
    stack: list[tuple[list[Any], list[Any]]] = [(feed, top)]  # (feed list, its output list)
    while stack:
        items, out = stack.pop()
        for item in items:
            if isinstance(item, list):
                inner: list[Any] = []
                out.append(inner)
                stack.append((item, inner))
            else:
                out.append(leaf(item))
    return top


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
        # Depth first, children in order, on a stack of its own: a stored tree may be deep.
        stack: list[tuple[StepNode, str, str]] = [(self.tree, "", "")]
        while stack:
            node, first, rest = stack.pop()
            if node.job is not None:
                j = node.job
                shown = j.error and j.status.finished
                extra = f" ({j.error.splitlines()[-1][:60]})" if shown and j.error else ""
                lines.append(f"{first}{j.name} #{j.id} {j.status.value}{extra}")
                continue
            lines.append(f"{first}{node.kind}")
            last = len(node.children) - 1
            for i in range(last, -1, -1):
                branch, indent = ("└─ ", "   ") if i == last else ("├─ ", "│  ")
                stack.append((node.children[i], rest + branch, rest + indent))
        return lines


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
    return Workflow(workflow_id, tuple(ordered), _tree(root))


def _tree(root: dict[Any, Any]) -> StepNode:
    """The StepNode of a nested dict of place segments, built bottom up on a stack of its own
    (a subtree once its children are built), so that no depth of stored places recurses."""
    built: dict[int, StepNode] = {}
    stack: list[tuple[dict[Any, Any], bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if None in node:
            built[id(node)] = StepNode("job", job=node[None])
            continue
        parts = sorted(node, key=_index)
        if not expanded:
            stack.append((node, True))
            stack.extend((node[p], False) for p in parts)
            continue
        kind = "chain" if parts[0][:1] == "c" else "group"  # a segment names its container
        built[id(node)] = StepNode(kind, children=tuple(built[id(node[p])] for p in parts))
    return built[id(root)]


def _placed(jobs: Sequence[Job], places: dict[str, str]) -> dict[str, str]:
    """Every job's place; a job without one (a corrupt payload), sharing one, or placed deeper
    than this version nests (:data:`MAX_DEPTH`) goes after the rest, at the top of the tree,
    so that it is still shown."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    lost = []
    for job in jobs:
        place = places.get(job.id)
        parts = [] if place is None else place.split("/")
        if (
            place is None
            or place in taken
            or len(parts) > MAX_DEPTH + 1
            or not all(p[1:].isdigit() for p in parts)
        ):
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


def purge_plan(
    matched: Sequence[Job], read: Callable[[Sequence[str]], dict[str, Job]]
) -> tuple[list[Job], int, int]:
    """What a purge would do to the finished jobs ``matched`` (those its filter selects), as
    the stores do it (``JobsPurgeParams``), for ``jobyard purge --dry-run``: the jobs it would
    delete among them, how many waiting steps downstream it would delete with them, and how
    many completed jobs it would keep because a step that has not completed needs them.
    ``read(ids)`` reads jobs by id (missing ones left out). Reads only the links of workflow
    jobs: a plain job costs nothing more."""
    by_id = {j.id: j for j in matched}
    linked = [j for j in matched if j.children]
    children = _read_all(read, [c for j in linked for c in j.children])

    def holders(job: Job, gone: set[str]) -> bool:
        return any(
            c in children and children[c].status != Status.COMPLETED and c not in gone
            for c in job.children
        )

    held = {j.id for j in linked if j.status == Status.COMPLETED and holders(j, set())}
    doomed = {i for i in by_id if i not in held}
    waiting: dict[str, Job] = {}
    frontier = [by_id[i] for i in doomed if by_id[i].status != Status.COMPLETED]
    while frontier:  # breadth first, level by level: one read per level
        ids = [c for j in frontier for c in j.children if c not in waiting and c not in doomed]
        frontier = [g for g in _read_all(read, ids).values() if g.status == Status.WAITING]
        waiting.update((g.id, g) for g in frontier)
    gone = doomed | waiting.keys()
    freed = {i for i in held if not holders(by_id[i], gone)}
    return [j for j in matched if j.id in doomed or j.id in freed], len(waiting), len(held - freed)


def _read_all(read: Callable[[Sequence[str]], dict[str, Job]], ids: list[str]) -> dict[str, Job]:
    unique = list(dict.fromkeys(ids))
    out: dict[str, Job] = {}
    for start in range(0, len(unique), 1000):
        out.update(read(unique[start : start + 1000]))
    return out


class WorkflowReader(Protocol):
    """What a workflow handle reads through (the App)."""

    def get(self, job_id: str) -> Job: ...

    def workflow(self, workflow_id: str) -> Workflow: ...

    def cancel_workflow(self, workflow_id: str, *, by: str | None = None) -> Workflow: ...

    def resume_workflow(self, workflow_id: str) -> Workflow: ...

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

    def resume(self) -> Workflow:
        """Run again what ended failed or cancelled, so that the workflow completes
        (``app.resume_workflow``)."""
        return self._reader.resume_workflow(self.id)

    def result(self, timeout: float | None = None, poll: float = 0.05) -> Any:
        """Wait for the workflow to complete; its result (a chain's last result, a group's list).

        Raises :class:`JobFailed` or :class:`JobCancelled` for the first job that ended so
        (a stopped workflow never completes), :class:`JobNotFound` once a job it needs was
        purged (the step a failed or cancelled job stopped goes with it when that job is
        purged), ``TimeoutError`` after ``timeout`` seconds. It polls the jobs that make the
        result, and the whole workflow about once a second."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll
        wanted = _ids(self._out)
        whole_at = time.monotonic() + 1.0
        while True:
            done = self._reader.results(wanted)
            stopped = [j for j in done.values() if j.status in (Status.FAILED, Status.CANCELLED)]
            if not stopped and time.monotonic() >= whole_at:
                flow = self.get()
                stopped = [j for j in flow.jobs if j.status.finished]
                stopped = [j for j in stopped if j.status != Status.COMPLETED]
                if not stopped:
                    _raise_if_stranded(flow)
                whole_at = time.monotonic() + 1.0
            if stopped:
                job = stopped[0]
                if job.status == Status.FAILED:
                    raise JobFailed(job.id, job.error)
                raise JobCancelled(job.id)
            if len(done) < len(wanted):
                gone = next(i for i in wanted if i not in done)
                raise JobNotFound(
                    gone,
                    f"purged before the result of workflow {self.id} was read; a step that "
                    "could never run is purged with the failed or cancelled job it waited for",
                )
            if all(j.status == Status.COMPLETED for j in done.values()):
                return _pick(self._out, {i: j.result for i, j in done.items()})
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"workflow {self.id} is not complete after {timeout}s")
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
            time.sleep(delay if remaining is None else min(delay, remaining))
            delay = min(delay * 1.5, 0.5)

    def __repr__(self) -> str:
        return f"WorkflowHandle({self.id!r}, jobs={len(self.ids)})"


def _raise_if_stranded(flow: Workflow) -> None:
    """JobNotFound if a step of ``flow`` waits for a job that is gone: it can never run (a store
    written before purges took such steps with them, or one of their inputs expired)."""
    present = {j.id for j in flow.jobs}
    for job in flow.jobs:
        if job.status == Status.WAITING:
            gone = next((i for i in job.depends_on if i not in present), None)
            if gone is not None:
                raise JobNotFound(
                    gone, f"purged while step {job.id} of workflow {flow.id} waited for it"
                )


def _ids(out: Any) -> list[str]:
    return [out] if isinstance(out, str) else [i for o in out for i in _ids(o)]


def _pick(out: Any, results: dict[str, Any]) -> Any:
    return results[out] if isinstance(out, str) else [_pick(o, results) for o in out]
