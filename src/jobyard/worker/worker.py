"""The worker's lifecycle: start, stop, signals, and watching its own side tasks.

Threads of one worker process:
- the producer claims jobs (``producer.py``) and queues them for the handler threads; while
  every handler thread is idle, one of them makes its waiting claim and runs the first job it
  brings (``producer.IdleClaim``: no hand-off on the idle path);
- ``concurrency`` handler threads run sync handlers; one event loop thread runs async ones;
- the completer acknowledges outcomes in batches (``completer.py``);
- the heartbeat renews leases, enforces timeouts and hands back buffered jobs that waited too
  long (``heartbeat.py``); maintenance reaps lapsed leases (``maintenance.py``).
``--processes`` runs several of these under a supervisor (``supervisor.py``).
What it holds, from claim to acknowledgement, is in its ledger (``ledger.py``); a job's steps
are the pipeline's runners (``executor.Pipeline.run_sync`` / ``run_async``); what its parts do
is told on the App's event bus (``jobyard.events``), free while nobody listens.
Only the handler threads run user code; every store call is made by the others, but for that
idle claim (made before the handler runs, never during it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from types import FrameType
from typing import Any

from ..backends.base import (
    Backend,
    ClaimedJob,
    Consumer,
    JobLimits,
    JobsAckParams,
    JobsClaimParams,
    LimitsSyncParams,
    Outcome,
    Schedule,
    WorkerInfo,
)
from ..events import Acked, Claimed, Events, LeaseLost, WorkerNote
from ..hooks import Hooks
from ..job import JobFunction, check_name
from . import executor, heartbeat, recurring
from ._cpu import check_cpu, pin_process
from ._held import Running
from ._slots import HOLD, PER_SLOT, Pace
from .completer import Completer
from .ledger import Ledger
from .maintenance import Maintenance, Ticker
from .producer import IdleClaim, Producer

log = logging.getLogger("jobyard.worker")


class Worker:
    """Runs jobs from ``queues`` with ``concurrency`` handlers at a time.

    ``concurrency``: default 8, or 100 when every handler is async (async handlers run as tasks
    on one event loop, not on a thread each). ``grace``: on stop, how long running jobs may take
    to finish before they are released back to pending (uncounted). ``prefetch``: jobs claimed
    ahead of free slots. By default (None) the worker decides: while handlers are short it keeps
    a few jobs ready (enough to outlast a slow claim round trip) and hands back any that wait
    longer than ``hold`` seconds; with long handlers it claims only for free slots (see
    ``_slots.py``). A number fixes the buffer (0 turns it off). ``poll_interval``: the longest
    sleep between claims when no push signal arrives. ``cpu``: pin this process to that CPU at
    start (see ``_cpu.py``: for handlers that wait on I/O; None leaves it to the OS).
    """

    def __init__(
        self,
        backend: Backend,
        registry: dict[str, JobFunction[Any, Any]],
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        *,
        hooks: Hooks | None = None,
        schedules: Sequence[Schedule] = (),
        consumers: Sequence[Consumer] = (),
        grace: float = 30.0,
        prefetch: int | None = None,
        hold: float = HOLD,
        poll_interval: float = 1.0,
        reap_interval: float = 1.0,
        retention: float | None = None,
        worker_id: str | None = None,
        cpu: int | None = None,
        events: Events | None = None,
        tracing: executor.Tracing | None = None,
    ) -> None:
        handlers = list(registry.values())
        all_async = bool(handlers) and all(jf.is_async for jf in handlers)
        if concurrency is None:
            concurrency = 100 if all_async else 8
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.backend = backend
        self.registry = registry  # job name -> handler
        self.schedules = schedules  # synced at start, ticked by maintenance
        self.consumers = consumers  # of foreign lists and streams, run beside the jobs
        names = list(queues) if queues else sorted({jf.opts.queue for jf in handlers})
        self.queues = tuple(check_name("queue", q) for q in (names or ["default"]))
        self.concurrency = concurrency
        self.cpu = None if cpu is None else check_cpu(cpu)
        self.pace = Pace(concurrency, None if prefetch is None else max(prefetch, 0), hold)
        # Outcomes waiting for their acknowledgement beyond this stop the claims: a store that
        # cannot keep up with the acks is not handed more work.
        # (Twice the slots plus the largest adaptive buffer, PER_SLOT per slot.)
        self._backlog = max(2 * (1 + PER_SLOT) * concurrency, 64)
        self._threads_wanted = 1 if all_async else concurrency
        self.grace = grace
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.info = WorkerInfo(
            id=self.id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=concurrency,
            started_at=0.0,  # set from the store's clock at start()
            last_seen=0.0,
        )
        self.claims = 0  # claim round trips that brought jobs
        self.claimed = 0  # jobs they brought
        self.handed_back = 0  # buffered jobs handed back unstarted (see _slots.py)
        # Every attempt held, from claim to acknowledgement, and the counts claims are paced
        # by (``ledger.py``); its lock is the worker's lock.
        self.ledger = Ledger()
        self._lock = self.ledger.lock
        self._slot_freed = threading.Event()
        self.events = events if events is not None else Events()
        self._halt = threading.Event()  # the worker is stopped for good: give up store retries
        self._stop_requested = threading.Event()
        self._force = threading.Event()
        self._started = False
        self._stopped = False
        self._tasks: queue.SimpleQueue[Running | IdleClaim | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # At most ``concurrency`` async handlers run at once: the buffer's jobs are tasks too,
        # and wait here (unstarted, so still handed back) for a slot. Made on the loop.
        self._async_slots: asyncio.Semaphore | None = None
        self.pipeline = executor.Pipeline(
            self.backend, registry, hooks or Hooks(), self.id, self.events, tracing
        )
        self.producer = Producer(
            self.backend,
            self.id,
            self.queues,
            self._wanted,
            self._dispatch,
            self._slot_freed,
            poll_interval,
            self._claimed,
            self._delegate,
        )
        self.completer = Completer(self.backend, self._on_acked, self._halt)
        self.heartbeat = Ticker("jobyard-heartbeat", 0.05, self._heartbeat)
        self.maintenance = Maintenance(
            self.backend,
            self.info,
            reap_interval,
            retention,
            schedules=bool(schedules),
            events=self.events,
        )

    # lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Start every part; jobs begin to run. Safe to call twice."""
        if self._started:
            return
        self._started = True
        if self.cpu is not None:  # before its threads start: they inherit it
            pin_process(self.cpu)
            log.info("worker %s pinned to CPU %d", self.id, self.cpu)
        for n in range(self._threads_wanted):
            t = threading.Thread(
                target=self._handler_thread, name=f"jobyard-handler-{n}", daemon=True
            )
            t.start()
            self._threads.append(t)
        if any(jf.is_async for jf in self.registry.values()):
            loop = asyncio.new_event_loop()
            t = threading.Thread(target=loop.run_forever, name="jobyard-asyncio", daemon=True)
            t.start()
            self._loop = loop
        now = self.backend.clock_now()  # the store's clock, as every other time it keeps
        self.info = dataclasses.replace(self.info, started_at=now, last_seen=now)
        self.maintenance.info = self.info
        if self.schedules:
            recurring.sync(self.backend, self.schedules)
        # The limits of the jobs this worker runs, so that every worker and every producer is
        # held by them (empty ones too: a limit removed from the code leaves the store).
        jobs = self.registry.values()
        declared = [jf.opts.limits or JobLimits(jf.opts.queue, jf.name) for jf in jobs]
        self.backend.limits_sync(LimitsSyncParams(declared))
        self.completer.start()
        self.heartbeat.start()
        self.maintenance.start()
        for consumer in self.consumers:
            consumer.start()
        self.producer.start()
        log.info(
            "worker %s started: queues=%s concurrency=%d",
            self.id,
            ",".join(self.queues),
            self.concurrency,
        )

    def stop(self, grace: float | None = None) -> None:
        """Stop claiming, let running jobs finish within ``grace`` seconds, release the rest to
        pending (their attempt is not counted), write every outcome, unregister. Safe twice."""
        if self._stopped or not self._started:
            return
        self._stopped = True
        with self._lock:
            self.ledger.stopping = True
        grace = self.grace if grace is None else grace
        # A claim in flight finishes first; what it brings back is released at once (_dispatch).
        self.producer.stop(timeout=grace + 30.0)
        self._release_unsettled(started=False)  # buffered jobs go back now, not after the grace
        for consumer in self.consumers:
            consumer.stop(grace)
        self.ledger.wait_open(time.monotonic() + grace, self._force)
        self._release_unsettled()
        for _ in self._threads:
            self._tasks.put(None)
        self.completer.stop()
        self.heartbeat.stop()
        self.maintenance.stop()
        self._halt.set()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        log.info(
            "worker %s stopped: %d jobs claimed in %d claims (%.1f ms each), %d buffered jobs "
            "handed back",
            self.id,
            self.claimed,
            self.claims,
            self.pace.claim_avg * 1000,
            self.handed_back,
        )

    def run(self) -> None:
        """Start, then block until SIGINT or SIGTERM; stop gracefully. A second signal stops at
        once, releasing whatever still runs."""
        in_main = threading.current_thread() is threading.main_thread()
        previous: dict[int, Any] = {}
        if in_main:
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, self._on_signal)
        try:
            self.start()
            while not self._stop_requested.wait(0.5):
                pass
            log.info(
                "worker %s stopping: waiting up to %.0fs for running jobs", self.id, self.grace
            )
            self.stop()
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def request_stop(self, force: bool = False) -> None:
        """Ask :meth:`run` to stop (as a signal would); ``force`` skips the grace period.
        Only sets events, so it is safe inside a signal handler (the stop loop polls them)."""
        if force or self._stop_requested.is_set():
            self._force.set()
        self._stop_requested.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop(force=self._stop_requested.is_set())

    # claiming and running ----------------------------------------------------------------------

    def _wanted_locked(self) -> int:
        """Jobs worth claiming now (0 when a claim would be too small to pay its round trip)."""
        ledger = self.ledger
        if self._stopped or len(ledger.running) - ledger.open > self._backlog:
            return 0
        pace = self.pace
        # held counts jobs handed to a thread or task and not returned (buffered, running, or
        # timed out but still on their thread); open counts those with no outcome yet.
        room = self.concurrency + pace.buffer() - max(ledger.held, ledger.open)
        return room if room >= pace.threshold() else 0

    def _wanted(self) -> int:
        with self._lock:
            return self._wanted_locked()

    def _claimed(self, seconds: float | None, count: int) -> None:
        with self._lock:
            if seconds is not None:
                self.pace.claimed(seconds)
            self.claims += 1
            self.claimed += count
        if self.events.active:
            self.events.emit(Claimed(self.id, count))

    def _delegate(self, params: JobsClaimParams) -> IdleClaim | None:
        """The producer's waiting claim, handed to a handler thread while every one is idle
        (see :class:`IdleClaim`); None while any holds a job."""
        with self._lock:
            if self.ledger.held or self._stopped or not self._threads:
                return None
            idle = IdleClaim(params)
            self._tasks.put(idle)
        return idle

    def _claim_here(self, idle: IdleClaim) -> Running | None:
        """On a handler thread: make the producer's waiting claim, hand out what it brought
        and keep the first sync job for this thread."""
        kept = None
        try:
            idle.jobs = self.backend.jobs_claim(idle.params)
            kept = self._dispatch(idle.jobs, keep=True) if idle.jobs else None
        except Exception as exc:  # noqa: BLE001 - the producer logs it and backs off
            idle.error = exc
        finally:
            idle.done.set()
        return kept

    def _dispatch(self, jobs: list[ClaimedJob], keep: bool = False) -> Running | None:
        """Hand claimed jobs to the handler threads and the event loop; with ``keep``, the
        first sync job is returned instead, for the calling handler thread to run."""
        now = time.monotonic()
        with self._lock:
            stopped = self._stopped
        if stopped:  # a claim that was in flight when stop() began: hand the jobs straight back
            back = [Outcome(j.id, j.token, "release") for j in jobs]
            with contextlib.suppress(Exception):
                self.backend.jobs_ack(JobsAckParams(back))
            if self.events.active:
                self.events.emit(WorkerNote("handed_back", len(back)))
            return None
        registry = self.registry
        on_loop: list[Running] = []
        kept = None
        with self._lock:
            for run in self.ledger.add(jobs, self.pipeline.context, now):
                job = run.job
                jf = registry.get(job.name)
                if jf is not None and jf.is_async and self._loop is not None:
                    on_loop.append(run)
                elif keep and kept is None:
                    kept = run
                else:
                    self._tasks.put(run)
        if on_loop:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._start_tasks, on_loop)
        return kept

    def _returned(self, seconds: float | None) -> None:
        """A thread or task is done with its job (its handler ran for ``seconds``)."""
        with self._lock:
            self.ledger.held -= 1
            if seconds is not None:
                self.pace.finished(seconds, time.monotonic())
            wake = self._wanted_locked() > 0
        if wake and not self._slot_freed.is_set():
            self._slot_freed.set()

    def _handler_thread(self) -> None:
        while True:
            run = self._tasks.get()
            if run is None:
                return
            if isinstance(run, IdleClaim):
                run = self._claim_here(run)
                if run is None:
                    continue
            seconds = None
            try:
                seconds = self._execute(run)
            except BaseException as exc:  # a worker bug must not lose the job
                # Counted as an attempt: a bug that repeats must not loop the job forever.
                log.exception("job %s: internal error", run.job.id)
                self._settle_elsewhere(run, executor.classify(run.job, exc))
            finally:
                self._returned(seconds)

    def _execute(self, run: Running) -> float | None:
        """Run one job on this thread (the pipeline's sync runner); returns how long its
        handler took."""
        return self.pipeline.run_sync(
            run.ctx,
            functools.partial(self._settle_here, run),
            functools.partial(self.ledger.begin, run, True),
            inline_async=False,
        )

    def _start_tasks(self, runs: list[Running]) -> None:
        """On the event loop: one task per async job, no thread each."""
        assert self._loop is not None
        if self._async_slots is None:
            self._async_slots = asyncio.Semaphore(self.concurrency)
        for run in runs:
            run.task = self._loop.create_task(self._execute_async(run))

    async def _execute_async(self, run: Running) -> None:
        assert self._async_slots is not None
        async with self._async_slots:
            await self._execute_async_in_slot(run)

    async def _execute_async_in_slot(self, run: Running) -> None:
        seconds = None
        try:
            # The pipeline's async runner; asyncio.timeout enforces the job's timeout.
            seconds = await self.pipeline.run_async(
                run.ctx,
                functools.partial(self._settle_here, run),
                functools.partial(self.ledger.begin, run, False),
            )
        except BaseException as exc:
            log.exception("job %s: internal error", run.job.id)
            self._settle_elsewhere(run, executor.classify(run.job, exc))
        finally:
            self._returned(seconds)

    def _settle_here(self, run: Running, outcome: Outcome, seconds: float | None) -> None:
        """Record the outcome the handler's own thread reached. If the job was settled already
        (it timed out, or was released at shutdown), the late outcome is discarded and a
        transaction the handler opened is rolled back, here, on the thread that used it."""
        with self._lock:
            first = self.ledger.mark_settled(run)
        conn = run.ctx._connection
        if not first:
            if outcome.kind != "release":
                log.warning("job %s: finished after it was settled; outcome discarded", run.job.id)
            if conn is not None:
                executor.discard_transaction(self.backend, run.job, conn)
            return
        left = self.pipeline.settle(run.ctx, outcome)
        if left is None:
            self._on_acked([outcome], [])
        else:
            self.completer.put(left)
        self.pipeline.record(run.job, left or outcome, seconds)

    def _settle_elsewhere(self, run: Running, outcome: Outcome) -> None:
        """Record an outcome decided off the handler's thread (a timeout, a shutdown release).
        Never touches the handler's connection: the handler may still be using it."""
        with self._lock:
            if not self.ledger.mark_settled(run):
                return
        self.completer.put(outcome)
        self.pipeline.record(run.job, outcome, None)

    def _on_acked(self, outcomes: list[Outcome], refused: list[Outcome]) -> None:
        """The store settled ``outcomes`` (``refused``: those it turned down, their lease lost):
        either way this worker is done with those attempts, and only those."""
        with self._lock:
            gone = self.ledger.forget(outcomes)
            wake = self._wanted_locked() > 0
        if wake:
            self._slot_freed.set()
        if self.events.active:
            self.events.emit(Acked(len(outcomes), len(refused)))
            if refused:
                lost = {(o.id, o.token) for o in refused}
                for run in gone:
                    if (run.job.id, run.job.token) in lost:
                        job = run.job
                        self.events.emit(
                            LeaseLost(job.id, job.name, job.queue, job.attempts, "ack")
                        )

    def _release_unsettled(self, started: bool = True) -> None:
        """Release what has no outcome yet: every such job, or (``started`` False) only those
        still waiting for a slot."""
        with self._lock:
            left = self.ledger.unsettled()
            back = self.ledger.hand_back(left)
        for outcome in back:
            self.completer.put(outcome)
        if back and self.events.active:
            self.events.emit(WorkerNote("handed_back", len(back)))
        if not started:
            return
        for run in left:
            if run.settled:
                continue
            if run.task is not None and self._loop is not None:
                self._loop.call_soon_threadsafe(run.task.cancel)
            if run.job.delivery == "at_most_once":
                # It may have had its effect already: never hand it out again.
                log.warning("job %s: at_most_once job interrupted at shutdown: failed", run.job.id)
                error = "interrupted by worker shutdown: an at_most_once job is not run again"
                self._settle_elsewhere(
                    run, Outcome(run.job.id, run.job.token, "failed", error=error)
                )
                continue
            log.warning("job %s: released to pending at shutdown", run.job.id)
            self._settle_elsewhere(run, Outcome(run.job.id, run.job.token, "release"))

    # heartbeat ---------------------------------------------------------------------------------

    def _heartbeat(self) -> None:
        now = time.monotonic()
        hold = self.pace.hold if self.pace.adaptive else None
        with self._lock:
            beat = heartbeat.scan(self.ledger.running.values(), now, hold)
            back = self.ledger.hand_back(beat.waited)
            if back:
                self.handed_back += len(back)
                self.pace.handed_back()  # the jobs got slow: stop buffering until they are fast
        for outcome in back:
            self.completer.put(outcome)
        if back:
            log.debug("handed back %d buffered jobs that waited over %.2fs", len(back), hold)
            if self.events.active:
                self.events.emit(WorkerNote("handed_back", len(back)))
        for run in beat.overdue:
            # A thread cannot be killed: the attempt fails now, the handler's thread keeps its
            # slot until the function returns, and what it returns then is discarded.
            log.warning("job %s: timed out after %ss", run.job.id, run.job.timeout)
            self._settle_elsewhere(run, executor.timed_out(run.job))
        try:
            asked = heartbeat.renew(
                self.backend, self.id, beat, self.ledger.running, self._lock, now, self.events
            )
        except Exception:
            if self.events.active:
                self.events.emit(WorkerNote("renew_failed", len(beat.renew)))
            raise
        if asked:
            self._cancel_requested(asked)

    def _cancel_requested(self, keys: list[tuple[str, str]]) -> None:
        """Someone asked to cancel these jobs: a job still waiting for a slot ends cancelled
        now; an async handler's task is cancelled; a sync handler sees
        ``current_job().cancel_requested`` and may stop (it cannot be interrupted)."""
        with self._lock:
            runs = [
                run
                for key in keys
                if (run := self.ledger.running.get(key)) is not None
                and not run.settled
                and not run.ctx._cancel_requested
            ]
            unstarted = [run for run in runs if not run.started and self.ledger.mark_settled(run)]
            for run in runs:
                run.ctx._cancel_requested = True
        for run in unstarted:
            log.info("job %s: cancelled before it started", run.job.id)
            outcome = executor.cancelled(run.job, "before the handler started")
            self.completer.put(outcome)
            self.pipeline.record(run.job, outcome, None)
        done = {id(run) for run in unstarted}
        for run in runs:
            if id(run) in done:
                continue
            log.info("job %s: cancellation requested", run.job.id)
            if run.task is not None and self._loop is not None:
                self._loop.call_soon_threadsafe(run.task.cancel)
