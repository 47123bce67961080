"""``jobyard demo``: seed 000's order example on the embedded SQLite store.

Orders arrive and are saved; each enqueues a confirmation email, an invoice and a thumbnail job.
Real worker processes (``python -m jobyard worker jobyard.demo:app``) run them. Handlers sleep a
few milliseconds and fail now and then (10 %, seeded, so every run tells the same story) to show
retries; the image of every hundredth order (order 3, 103, ...) is corrupt, so its thumbnail job
fails on every attempt and ends in the ``failed`` dead letter.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .app import App
from .backends.base import FINISHED
from .job import Job
from .retry import Backoff
from .worker.executor import current_job

SEED = 2024
FLAKY_RATE = 0.10
QUEUES: tuple[str, ...] = ("emails", "invoices", "thumbnails")
BACKOFF = Backoff("fixed", base=0.05, jitter=True)  # small, so the demo ends in seconds


def _flaky(service: str, order_id: int) -> random.Random:
    """Sleep like a call to ``service``; fail ~10 % of attempts, the same ones on every run."""
    attempt = current_job().attempt
    rng = random.Random(f"{SEED}:{service}:{order_id}:{attempt}")
    time.sleep(rng.uniform(0.005, 0.025))
    if rng.random() < FLAKY_RATE:
        raise ConnectionError(f"{service} did not answer in time (simulated, attempt {attempt})")
    return rng


def build_app(url: str | None = None) -> App:
    """The demo's App and its three handlers, on ``url`` (default: ``$JOBYARD_URL``)."""
    demo = App(url)

    @demo.job(queue="emails", max_attempts=5, backoff=BACKOFF, timeout=10.0)
    def send_confirmation(order_id: int, email: str) -> dict[str, Any]:
        """Send the order's confirmation email."""
        _flaky("smtp", order_id)
        return {"to": email, "message_id": f"<order-{order_id}@shop.example>"}

    @demo.job(queue="invoices", max_attempts=5, backoff=BACKOFF, timeout=10.0)
    def generate_invoice(order_id: int, total_cents: int) -> dict[str, Any]:
        """Render the order's invoice."""
        _flaky("invoicing", order_id)
        return {"invoice": f"INV-{order_id:06d}", "total": f"{total_cents / 100:.2f} EUR"}

    @demo.job(queue="thumbnails", max_attempts=3, backoff=BACKOFF, timeout=10.0)
    def make_thumbnail(order_id: int, image: str) -> dict[str, Any]:
        """Make a thumbnail of the ordered item's photo."""
        _flaky("imaging", order_id)
        if "corrupt" in image:
            raise ValueError(f"cannot decode {image}: not a JPEG file (bad header bytes ff d8 00)")
        return {"thumbnail": image.replace(".jpg", "-200x200.jpg")}

    return demo


app = build_app()  # what the demo's worker processes load: ``jobyard.demo:app``


# --- the run ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Tally:
    """This run's jobs of one queue."""

    ids: set[str] = field(default_factory=set)
    finished: int = 0
    done_at: float | None = None


def _save_order(orders: sqlite3.Connection, order_id: int, rng: random.Random) -> dict[str, Any]:
    order = {
        "id": order_id,
        "email": f"customer{order_id}@example.com",
        "total_cents": rng.randint(500, 25_000),
        "image": f"s3://shop-photos/item-{order_id}{'-corrupt' if order_id % 100 == 3 else ''}.jpg",
    }
    with orders:  # one transaction: the order is saved before any job about it exists
        orders.execute(
            "insert into orders (id, email, total_cents, image, created_at) values (?, ?, ?, ?, ?)",
            (order["id"], order["email"], order["total_cents"], order["image"], time.time()),
        )
    return order


def _open_orders(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    conn.execute("pragma journal_mode=wal")
    conn.execute(
        "create table if not exists orders (id integer primary key, email text not null,"
        " total_cents integer not null, image text not null, created_at real not null)"
    )
    conn.execute("delete from orders")
    conn.commit()
    return conn


@contextlib.contextmanager
def _workers(url: str, count: int, concurrency: int, logs: Path) -> Iterator[list[Any]]:
    """``count`` worker processes of ``jobyard.demo:app``; SIGTERM and reaped at the end."""
    env = {**os.environ, "JOBYARD_URL": url, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "jobyard", "worker", "jobyard.demo:app", "-c", str(concurrency)]
    argv += ["--processes", "1", "--grace", "5", "--poll-interval", "0.1", "--reap-interval", "0.5"]
    argv += ["--log-level", "WARNING"]
    procs: list[subprocess.Popen[bytes]] = []
    files = []
    try:
        for n in range(count):
            out = (logs / f"worker-{n + 1}.log").open("wb")
            files.append(out)
            procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT))
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        for f in files:
            f.close()


def run(
    orders: int = 300,
    db: str | None = None,
    workers: int = 2,
    concurrency: int = 8,
    console: Console | None = None,
) -> int:
    """Run the demo; the exit status (0: every job reached an end state)."""
    console = console or Console(highlight=False, soft_wrap=True)
    with contextlib.ExitStack() as stack:
        if db is None:
            where = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jobyard-demo-")))
            db_path = where / "jobyard.db"
        else:
            db_path = Path(db).expanduser().resolve()
            db_path.parent.mkdir(parents=True, exist_ok=True)
            where = db_path.parent
        url = f"sqlite:///{db_path}"
        shop = build_app(url)
        stack.callback(shop.close)
        shop.migrate()
        orders_db = _open_orders(db_path.with_name(f"{db_path.stem}-orders.db"))
        stack.callback(orders_db.close)
        console.print(
            f"jobyard demo: {orders} orders, {workers} worker processes x {concurrency} "
            f"handlers, store {url}",
            markup=False,
        )
        return _run(console, shop, url, orders, orders_db, workers, concurrency, where, db)
    return 1  # not reached: mypy cannot tell that ExitStack never swallows the return


def _run(
    console: Console,
    shop: App,
    url: str,
    orders: int,
    orders_db: sqlite3.Connection,
    workers: int,
    concurrency: int,
    where: Path,
    db: str | None,
) -> int:
    tally = {q: _Tally() for q in QUEUES}
    by_queue = {jf.opts.queue: jf for jf in shop.registry.values()}
    baseline = _finished(shop)
    rng = random.Random(SEED)
    deadline_s = 30.0 + orders * 0.3
    progress = Progress(
        TextColumn("{task.description:<12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    placed = progress.add_task("orders", total=orders)
    bars = {q: progress.add_task(q, total=orders) for q in QUEUES}
    start = time.monotonic()
    timed_out = crashed = False
    with _workers(url, workers, concurrency, where) as procs, progress:
        # A worker process handles SIGTERM only once it has started; one still importing when
        # the last job finishes (the other did all the work, on a loaded machine) would die of
        # the signal instead of stopping cleanly. So no order is placed before all are ready.
        ready = _wait_registered(shop, procs, start + deadline_s)
        crashed = ready is False
        timed_out = ready is None

        def refresh() -> None:
            now_finished = _finished(shop)
            for q in QUEUES:
                t = tally[q]
                t.finished = now_finished.get(q, 0) - baseline.get(q, 0)
                progress.update(bars[q], completed=t.finished)
                if t.done_at is None and t.finished >= orders:
                    t.done_at = time.monotonic()

        last = 0.0
        for order_id in range(1, orders + 1 if ready else 1):
            order = _save_order(orders_db, order_id, rng)
            emails = by_queue["emails"].options(idempotency_key=f"order-{order_id}-confirmation")
            tally["emails"].ids.add(emails.enqueue(order_id, order["email"]).id)
            tally["invoices"].ids.add(
                by_queue["invoices"].enqueue(order_id, order["total_cents"]).id
            )
            tally["thumbnails"].ids.add(by_queue["thumbnails"].enqueue(order_id, order["image"]).id)
            progress.update(placed, completed=order_id)
            if time.monotonic() - last > 0.1:
                refresh()
                last = time.monotonic()
        while ready:
            refresh()
            if all(t.done_at is not None for t in tally.values()):
                break
            if all(p.poll() is not None for p in procs):
                crashed = True
                break
            if time.monotonic() - start > deadline_s:
                timed_out = True
                break
            time.sleep(0.1)
    elapsed = time.monotonic() - start
    codes = [p.returncode for p in procs]

    if crashed or timed_out:
        why = "the worker processes exited" if crashed else f"not done after {deadline_s:.0f}s"
        console.print(f"demo failed: {why}; worker logs follow", style="bold red")
        for log in sorted(where.glob("worker-*.log")):
            console.print(Text(f"--- {log.name}\n" + log.read_text(errors="replace")[-3000:]))
        return 1

    jobs = _this_run(shop, tally)
    _summary(console, tally, jobs, start, elapsed)
    _dead_letters(console, jobs, url, db)
    console.print(
        f"worker processes stopped with SIGTERM (exit codes {', '.join(map(str, codes))})",
        markup=False,
    )
    return 0 if all(c == 0 for c in codes) else 1


def _wait_registered(shop: App, procs: list[Any], deadline: float) -> bool | None:
    """Wait until every worker process is registered in the store (it registers once it is
    started and handles signals). True when all are; False if one exited; None at the deadline."""
    pids = {p.pid for p in procs}
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            return False
        if pids <= {w.pid for w in shop.workers()}:
            return True
        time.sleep(0.05)
    return None


def _last_line(error: str | None) -> str:
    lines = (error or "").strip().splitlines()
    return lines[-1] if lines else "(no error recorded)"


def _finished(shop: App) -> dict[str, int]:
    return {s.queue: sum(s.counts.get(k, 0) for k in FINISHED) for s in shop.stats(QUEUES)}


def _this_run(shop: App, tally: dict[str, _Tally]) -> dict[str, list[Job]]:
    """The jobs this run enqueued (a kept ``--db`` may hold older runs' jobs too)."""
    out: dict[str, list[Job]] = {}
    for q, t in tally.items():
        found: list[Job] = []
        offset = 0
        while len(found) < len(t.ids):
            page = shop.jobs(queue=q, limit=1000, offset=offset)
            if not page:
                break
            found.extend(j for j in page if j.id in t.ids)
            offset += len(page)
        out[q] = found
    return out


def _summary(
    console: Console,
    tally: dict[str, _Tally],
    jobs: dict[str, list[Job]],
    start: float,
    elapsed: float,
) -> None:
    table = Table(title="jobyard demo: done", box=box.SIMPLE_HEAD, title_justify="left")
    for column in ("queue", "jobs", "completed", "retried", "failed", "jobs/s"):
        table.add_column(column, justify="left" if column == "queue" else "right")
    totals = [0, 0, 0, 0]
    for q in QUEUES:
        js = jobs[q]
        row = [
            len(js),
            sum(1 for j in js if j.status == "completed"),
            sum(1 for j in js if j.attempts > 1),
            sum(1 for j in js if j.status == "failed"),
        ]
        took = (tally[q].done_at or start + elapsed) - start
        table.add_row(q, *map(str, row), f"{(row[1] + row[3]) / max(took, 1e-9):.0f}")
        totals = [a + b for a, b in zip(totals, row, strict=True)]
    table.add_section()
    table.add_row("all", *map(str, totals), f"{(totals[1] + totals[3]) / max(elapsed, 1e-9):.0f}")
    console.print(table)
    console.print(
        "retried: jobs that needed more than one attempt. failed: attempts spent, kept in the "
        "dead letter with their error.",
        markup=False,
    )


def _dead_letters(console: Console, jobs: dict[str, list[Job]], url: str, db: str | None) -> None:
    failed = sorted(
        (j for q in QUEUES for j in jobs[q] if j.status == "failed"), key=lambda j: j.created_at
    )
    if not failed:
        return
    console.print(f"\nfailed jobs ({len(failed)}):", style="bold", markup=False)
    for j in failed[:10]:
        args = ", ".join(map(repr, j.args))
        console.print(
            Text(
                f"  {j.id}  {j.name}({args})  after {j.attempts} attempts\n"
                f"      {_last_line(j.error)}"
            )
        )
    if len(failed) > 10:
        console.print(f"  ... and {len(failed) - 10} more", markup=False)
    if db is None:
        console.print(
            "the store was temporary: run `jobyard demo --db demo.db` to keep it, then "
            "`JOBYARD_URL=sqlite:///demo.db jobyard show jobyard.demo:app ID`",
            markup=False,
        )
    else:
        console.print(
            f"inspect: JOBYARD_URL={url} jobyard show jobyard.demo:app {failed[0].id}",
            markup=False,
        )
