"""Peer libraries on the same workloads as ``bench/throughput.py``, side by side.

    python bench/peers.py --store {postgres,redis} --jobs N [-c C] [--work-ms MS [--async]]
        [--with-jobyard]

Each library runs in ``bench/.venv-peers`` (created here with pip from
``bench/requirements-peers.txt`` if it is missing; never jobyard's own venv) through its runner
``bench/peer_runners/bench_<lib>.py``, which prints the same four figures as throughput.py:
enqueue (one at a time), enqueue_many (the library's bulk API, else n/a), drain (no-op jobs, one
worker process of the library's own, concurrency 8 where it has a setting), and idle latency
p50/p95/p99 (enqueue-to-start, one job at a time, measured with a UDP datagram the handler sends
as it starts). Each library gets a fresh store: a private redis-server on a free port, or a fresh
PostgreSQL database ``bench_<lib>_<random>`` (dropped afterwards). ``--with-jobyard`` runs
jobyard's throughput.py in the same run (as ``bench/compare.py`` does) and prints one table.

``--work-ms MS``: the drained jobs (and the enqueued ones) wait MS ms on I/O instead of doing
nothing, in every library: ``time.sleep`` in a sync handler, or ``asyncio.sleep`` in an async one
with ``--async``, each library's closest equivalent where it cannot run that kind (each runner
prints a ``# handler:`` line saying what it ran, listed under the table); the table then has a
``slots %`` column beside the drain: the drain over what the library's slots could do, slots x
1000 / MS.

``--call {redis,postgres,http}`` and ``--cpu-ms MS`` (issue 18): every library's drained jobs
first make one call on a client of the worker process's own, then hold the interpreter lock for
MS ms, then wait ``--work-ms`` (the same handler bodies, ``bench/_calls.py``); each library's run
gets its own call target (a private redis-server, the local PostgreSQL, or a small HTTP server),
started here. With ``--call`` and no ``--work-ms`` the table has a ``per slot/s`` column (the
drain over the slots), with ``--cpu-ms`` a ``cpu %`` one (the drain over cores x 1000 / MS).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._calls import describe
from bench._common import (
    BENCH_DIR,
    CALLS,
    FIGURES,
    call_target,
    log,
    parse_figures,
    private_redis,
    scratch_database,
)
from jobyard.worker._cpu import default_processes

PEERS_VENV = BENCH_DIR / ".venv-peers"
PEERS_PYTHON = PEERS_VENV / "bin" / "python"
REQUIREMENTS = BENCH_DIR / "requirements-peers.txt"


@dataclass(frozen=True)
class Peer:
    label: str  # the row's name ({c}: the concurrency)
    module: str  # bench/peer_runners/bench_<module>.py
    variant: str = ""
    extra: bool = False  # only with --all-variants


PEERS: dict[str, list[Peer]] = {
    "postgres": [
        Peer("procrastinate", "procrastinate"),
        Peer("pgqueuer", "pgqueuer"),
        Peer("pgqueuer (batch 4)", "pgqueuer", "batch4", extra=True),
    ],
    "redis": [
        Peer("rq (fork per job)", "rq"),
        Peer("rq (SimpleWorker)", "rq", "simple"),
        Peer("celery (threads {c})", "celery"),
        Peer("celery (prefork {c})", "celery", "prefork", extra=True),
        Peer("dramatiq (a process per CPU)", "dramatiq"),
        Peer("dramatiq (1 process)", "dramatiq", "one"),
        Peer("arq", "arq"),
        Peer("saq", "saq"),
        Peer("huey (threads {c})", "huey"),
    ],
}

# The targets of issues 2-4, for the jobyard rows: (figure, bound, "min" or "max").
TARGETS: dict[str, list[tuple[str, float, str]]] = {
    "sqlite": [("drain", 3000, "min"), ("enqueue_many", 30000, "min")],
    "postgres": [
        ("drain", 5000, "min"),
        ("enqueue_many", 20000, "min"),
        ("latency p50", 5, "max"),
        ("latency p99", 25, "max"),
    ],
    "redis": [
        ("drain", 8000, "min"),
        ("enqueue_many", 50000, "min"),
        ("latency p50", 2, "max"),
        ("latency p99", 10, "max"),
    ],
}
TARGETS["redis_cluster"] = TARGETS["redis"]


def targets_for(args: argparse.Namespace, peer_rows: list[Row]) -> list[tuple[str, float, str]]:
    """The jobyard targets of this run. No-op jobs: issues 2-4. Jobs that wait (issue 8): a
    slot share of at least 75% (90% from 10 ms on) and, for sync handlers, at least twice the
    best peer's finished drain; the idle latency targets stay (the probe is the same). Handlers
    that call something or compute (issue 18) get the latency targets and, for sync handlers,
    the two-fold drain; the slot share is then a figure, not a target (the call takes time of its
    own). The idle latency, where peers ran (issue 18 section 2): a p50 at most the best peer's
    p50 and a p99 at most the best peer's p99, in the same run."""
    base = TARGETS[args.store]
    peers = peer_latency(peer_rows)
    if peers:
        base = [t for t in base if not t[0].startswith("latency")] + peers
    calls = bool(args.call) or args.cpu_ms > 0
    if args.work_ms <= 0 and not calls:
        return base
    out = [t for t in base if t[0].startswith("latency")]
    if args.use_async:
        return out
    if args.work_ms > 0 and not calls:
        out.append(("slot_share", 90.0 if args.work_ms >= 10 else 75.0, "min"))
    drains = [r.figures.get("drain") for r in peer_rows if not r.partial and not r.error]
    best = max((d for d in drains if d is not None), default=None)
    if best is not None:
        out.append(("drain", 2 * best, "min"))
    return out


def peer_latency(peer_rows: list[Row]) -> list[tuple[str, float, str]]:
    """The best (lowest) idle p50 and p99 among the peers that measured them."""
    out = []
    for figure in ("latency p50", "latency p99"):
        seen = [r.figures.get(figure) for r in peer_rows if not r.error]
        values = [v for v in seen if v is not None and not math.isnan(v)]
        if values:
            out.append((figure, min(values), "max"))
    return out


@dataclass
class Row:
    """One library's figures; with several rounds, the median of each."""

    label: str
    rounds: list[dict[str, float | None]] = field(default_factory=list)
    partial: bool = False  # a drain timed out: its rate is that of the jobs done by then
    error: str = ""
    handler: str = ""  # the runner's "# handler:" line: what the drained jobs ran

    def add(self, figures: dict[str, float | None], partial: bool, error: str) -> None:
        if figures:
            self.rounds.append(figures)
        self.partial = self.partial or partial
        self.error = self.error or error

    @property
    def figures(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for figure in FIGURES:
            seen = [r[figure] for r in self.rounds if figure in r]
            if not seen:
                continue
            values = [v for v in seen if v is not None]
            out[figure] = statistics.median(values) if values else None
        return out


def ensure_peers_venv() -> None:
    """Create bench/.venv-peers with the pinned peers if it is not there yet."""
    stamp = PEERS_VENV / ".installed"
    if (
        PEERS_PYTHON.exists()
        and stamp.exists()
        and stamp.stat().st_mtime >= REQUIREMENTS.stat().st_mtime
    ):
        return
    log(f"creating {PEERS_VENV} (peer libraries, pinned in {REQUIREMENTS.name})")
    if not PEERS_PYTHON.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    pip = [str(PEERS_PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    stamp.touch()


@contextlib.contextmanager
def fresh_store(store: str, label: str) -> Iterator[str]:
    if store == "redis":
        with private_redis() as url:
            yield url
    else:
        with scratch_database(label) as url:
            yield url


def run_child(argv: list[str], timeout: float, row: Row, env: dict[str, str] | None = None) -> None:
    """Run one benchmark process and add its figures to ``row``."""
    try:
        res = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=None,
            text=True,
            timeout=timeout,
            cwd=BENCH_DIR,
            env=env,
        )
    except subprocess.TimeoutExpired:
        row.add({}, False, f"timed out after {timeout:.0f}s")
        return
    sys.stdout.write("".join(f"    {line}\n" for line in res.stdout.splitlines()))
    sys.stdout.flush()
    partial = any(
        line.startswith("drain:") and "TIMED OUT" in line for line in res.stdout.splitlines()
    )
    error = "" if res.returncode == 0 else f"exit {res.returncode}"
    for line in res.stdout.splitlines():
        if line.startswith("# handler:") and not row.handler:
            row.handler = line.removeprefix("# handler:").strip()
    row.add(parse_figures(res.stdout), partial, error)


def run_peer(peer: Peer, store: str, args: argparse.Namespace, row: Row) -> None:
    log(f"peer {peer.label}")
    script = BENCH_DIR / "peer_runners" / f"bench_{peer.module}.py"
    with fresh_store(store, peer.module) as url, call_target(args.call) as call_url:
        argv = [
            str(PEERS_PYTHON),
            str(script),
            "--url",
            url,
            "--jobs",
            str(args.jobs),
            "--concurrency",
            str(args.concurrency),
            "--latency-samples",
            str(args.latency_samples),
            "--drain-timeout",
            str(args.drain_timeout),
            *work_args(args),
        ]
        if call_url:
            argv += ["--call-url", call_url]
        if peer.variant:
            argv += ["--variant", peer.variant]
        run_child(argv, args.peer_timeout, row)


def work_args(args: argparse.Namespace) -> list[str]:
    """The handler options, as every runner and throughput.py take them."""
    out = ["--work-ms", f"{args.work_ms:g}"] if args.work_ms > 0 else []
    if args.call:
        out += ["--call", args.call]
    if args.cpu_ms > 0:
        out += ["--cpu-ms", f"{args.cpu_ms:g}"]
        if args.cpu_per_ms > 0:
            out += ["--cpu-per-ms", f"{args.cpu_per_ms:g}"]
    return [*out, "--async"] if args.use_async else out


def run_jobyard(
    backend: str, args: argparse.Namespace, row: Row, extra: Sequence[str] = (), src: str = ""
) -> None:
    """jobyard's throughput.py; ``extra``: its worker options beyond the defaults; ``src``: a
    copy of jobyard's ``src/`` to import (first on ``PYTHONPATH``, for its worker too)."""
    log(
        f"jobyard on {backend}"
        + (f", {' '.join(extra)}" if extra else "")
        + (f", {src}" if src else "")
    )
    argv = [
        sys.executable,
        str(BENCH_DIR / "throughput.py"),
        "--backend",
        backend,
        "--jobs",
        str(args.jobs),
        "--concurrency",
        str(args.concurrency),
        "--latency-samples",
        str(args.latency_samples),
        *work_args(args),
    ]
    env = None
    if src:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    run_child([*argv, *extra], args.peer_timeout, row, env)


def _fmt(value: float | None, figure: str) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if figure.startswith("latency"):
        return f"{value:.2f}"
    if figure in ("slot_share", "cpu_share"):
        return f"{value:.1f}"
    return f"{value:,.0f}"


def print_table(title: str, rows: list[Row], targets: list[tuple[str, float, str]]) -> None:
    """One row per library, the same columns for all; the targets as a last row."""
    names = {
        "enqueue": "enqueue/s",
        "enqueue_many": "enqueue_many/s",
        "drain": "drain/s",
        "slot_share": "slots %",
        "per_slot": "per slot/s",
        "cpu_share": "cpu %",
        "latency p50": "p50 ms",
        "latency p95": "p95 ms",
        "latency p99": "p99 ms",
    }
    # the shares and the per-slot rate only where some library has them (jobs that wait, call or
    # compute)
    optional = ("slot_share", "per_slot", "cpu_share")
    columns = [f for f in FIGURES if f not in optional or any(f in r.figures for r in rows)]
    heads = ["library", *(names[f] for f in columns)]
    table: list[list[str]] = []
    for row in rows:
        cells = [row.label]
        figures = row.figures
        for figure in columns:
            if figure not in figures:
                cells.append("-" if not row.error else "ERR")
            else:
                mark = "*" if figure == "drain" and row.partial else ""
                cells.append(_fmt(figures[figure], figure) + mark)
        table.append(cells)
    if targets:
        goal = {f: (">=" if kind == "min" else "<=") + _fmt(v, f) for f, v, kind in targets}
        table.append(["jobyard target", *(goal.get(f, "") for f in columns)])
    widths = [max(len(r[i]) for r in [heads, *table]) for i in range(len(heads))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest])

    print()
    print(title)
    print(line(heads))
    print("  ".join("-" * w for w in widths))
    for cells in table:
        print(line(cells))
    if any(r.partial for r in rows):
        print("  * the drain did not finish within --drain-timeout: the rate of the jobs done")
    if any(len(r.rounds) > 1 for r in rows):
        print(f"  median of {max(len(r.rounds) for r in rows)} rounds, libraries interleaved")
    for r in rows:
        if r.handler:
            print(f"  {r.label}: {r.handler}")
    errors = [r for r in rows if r.error]
    for r in errors:
        print(f"  {r.label}: {r.error}")
    sys.stdout.flush()


def selected_peers(args: argparse.Namespace) -> list[Peer]:
    peers = [p for p in PEERS[args.store] if args.all_variants or not p.extra]
    if args.libs:
        wanted = {x.strip() for x in args.libs.split(",")}
        peers = [p for p in PEERS[args.store] if p.module in wanted or p.label in wanted]
    return peers


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--store", choices=("postgres", "redis"), required=True)
    p.add_argument("--jobs", type=int, default=10_000, help="N (each drain runs 2N)")
    p.add_argument("--concurrency", "-c", type=int, default=8, help="slots of each worker")
    p.add_argument(
        "--work-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="each job waits MS ms on I/O (time.sleep; asyncio.sleep with --async); 0: no-op",
    )
    p.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="async handlers (asyncio.sleep(MS)) where the library runs them",
    )
    p.add_argument(
        "--call",
        choices=CALLS,
        default="",
        help="each job first makes one call on a client of its own: a Redis INCR, a PostgreSQL"
        " SELECT 1 or an HTTP GET to a local server (before --cpu-ms and --work-ms)",
    )
    p.add_argument(
        "--cpu-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="each job holds the GIL for MS ms of calibrated pure Python (after its call)",
    )
    p.add_argument(
        "--cpu-per-ms",
        type=float,
        default=0.0,
        metavar="N",
        help="--cpu-ms: the loop's iterations per ms for every library's processes (each still"
        " checks it), so that all do the same work; default: each process calibrates its own",
    )
    p.add_argument("--latency-samples", type=int, default=200)
    p.add_argument("--drain-timeout", type=float, default=60.0, help="a slower drain: partial rate")
    p.add_argument("--peer-timeout", type=float, default=900.0)
    p.add_argument("--libs", default="", help="comma-separated runner names (rq,celery,...)")
    p.add_argument("--all-variants", action="store_true", help="also the extra settings rows")
    p.add_argument(
        "--rounds", type=int, default=1, help="run every library this many times, interleaved"
    )
    return p


def main(argv: list[str] | None = None, with_jobyard: bool = False) -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--with-jobyard", action="store_true", help="jobyard's figures in the table")
    p.add_argument(
        "--no-cluster", action="store_true", help="redis: no jobyard row on a Redis Cluster"
    )
    p.add_argument(
        "--jobyard-prefetch",
        type=int,
        default=0,
        help="also a jobyard row whose worker runs with --prefetch N (claims ahead of free slots)",
    )
    p.add_argument(
        "--jobyard-pin",
        action="store_true",
        help="also a jobyard row whose worker runs with --pin (its process on one CPU)",
    )
    p.add_argument(
        "--jobyard-src",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also jobyard rows (the defaults, and --processes 1 where the default runs more)"
        " importing jobyard from DIR (a copy of another commit's src/), labelled LABEL,"
        " interleaved with the others: before and after, in the same minutes",
    )
    args = p.parse_args(argv)
    if min(args.work_ms, args.cpu_ms, args.cpu_per_ms) < 0 or args.concurrency < 1:
        p.error("--work-ms, --cpu-ms and --cpu-per-ms must be >= 0, --concurrency >= 1")
    with_jobyard = with_jobyard or args.with_jobyard
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    ensure_peers_venv()
    peers = selected_peers(args)
    # (backend, worker options, label, src) of each jobyard row: the defaults, then --prefetch,
    # then --pin, then the Cluster; each --jobyard-src's rows after this tree's defaults
    variants: list[tuple[str, list[str], str, str]] = []
    if with_jobyard:
        for label, src in [("", ""), *(x.split("=", 1) for x in args.jobyard_src)]:
            at = f", {label}" if label else ""
            variants.append((args.store, [], at, src))
            if default_processes() > 1:  # the worker's default runs one per CPU: also one alone
                variants.append((args.store, ["--processes", "1"], f"{at}, 1 process", src))
        if args.jobyard_prefetch:
            pre = str(args.jobyard_prefetch)
            variants.append((args.store, ["--prefetch", pre], f", prefetch {pre}", ""))
        if args.jobyard_pin:
            variants.append((args.store, ["--pin"], ", pinned", ""))
        if args.store == "redis" and not args.no_cluster:
            variants.append(("redis_cluster", [], "", ""))
    jobyard = [Row(f"jobyard ({b}{label})") for b, _, label, _ in variants]
    rows = [Row(p.label.format(c=args.concurrency)) for p in peers]
    for n in range(args.rounds):
        if args.rounds > 1:
            log(f"round {n + 1} of {args.rounds}")
        for (backend, extra, _, src), row in zip(variants, jobyard, strict=True):
            run_jobyard(backend, args, row, extra, src)
        for peer, row in zip(peers, rows, strict=True):
            run_peer(peer, args.store, args, row)
    targets = targets_for(args, rows) if with_jobyard else []
    rows = jobyard + rows
    what = "no-op jobs"
    if args.call or args.cpu_ms > 0:
        body = describe(args.work_ms, args.call, args.cpu_ms, args.use_async)
        what = f"{'async' if args.use_async else 'sync'} jobs: {body}"
    elif args.work_ms > 0 or args.use_async:
        kind = "asyncio.sleep" if args.use_async else "time.sleep"
        what = f"jobs in {kind}({args.work_ms:g} ms)"
    title = (
        f"{args.store}: {args.jobs} jobs one at a time, {args.jobs} in bulk, drain of "
        f"{2 * args.jobs} {what} by one worker process -c {args.concurrency}, "
        f"{args.latency_samples} idle samples"
    )
    print_table(title, rows, targets)
    if with_jobyard and (args.work_ms > 0 or args.call or args.cpu_ms > 0):
        if args.use_async:
            print("  jobyard target (issue 8, async): a drain of >= 80% of its no-op drain")
        else:
            print("  jobyard target (issue 8): drain >= 2 x the best peer's finished drain")


if __name__ == "__main__":
    main()
