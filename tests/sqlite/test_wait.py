"""The push signal: an idle worker wakes on a new job at once in its own process, within a few
milliseconds from another process, and not for commits that make nothing due."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from jobyard.backends.base import (
    JobsAckParams,
    JobsClaimParams,
    JobsListParams,
    JobsWaitParams,
    Outcome,
    QueueConfig,
)
from jobyard.backends.sqlite.backend import SQLiteBackend

from . import _procs
from .conftest import Child, insert, new, wait_until

# alone: the wake-ups are timed to the millisecond; make test runs them after the parallel part
pytestmark = pytest.mark.alone


def timed_wait(backend: SQLiteBackend, queues: list[str], timeout: float) -> tuple[bool, float]:
    started = time.monotonic()
    woken = backend.jobs_wait(JobsWaitParams(queues, timeout))
    return woken, time.monotonic() - started


@pytest.fixture
def in_background() -> Iterator[Callable[[Callable[[threading.Event], None]], None]]:
    """Run ``body(stop)`` in a thread until the test ends."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(body: Callable[[threading.Event], None]) -> None:
        thread = threading.Thread(target=body, args=(stop,), daemon=True)
        threads.append(thread)
        thread.start()

    yield start
    stop.set()
    for thread in threads:
        thread.join(10)


def test_without_news_a_wait_lasts_its_timeout(open_backend: Callable[..., SQLiteBackend]) -> None:
    backend = open_backend()
    woken, took = timed_wait(backend, ["q"], 0.2)
    assert not woken and 0.19 <= took < 2
    assert timed_wait(backend, ["q"], 0)[0] is False


def test_an_insert_in_this_process_wakes_a_waiter_at_once(
    open_backend: Callable[..., SQLiteBackend],
    in_background: Callable[[Callable[[threading.Event], None]], None],
) -> None:
    # given a waiter that would not look at the file for 60 s: only the in-process signal
    # can wake it
    waiter = open_backend()
    waiter.poll_interval = 60
    producer = open_backend()  # another backend object on the same file, in this process

    def produce(stop: threading.Event) -> None:
        while not stop.wait(0.02):
            insert(producer, new())

    # when jobs keep arriving
    in_background(produce)
    woken, took = timed_wait(waiter, ["q"], 30)
    # then the waiter wakes long before its timeout
    assert woken and took < 5


def test_an_insert_into_another_queue_does_not_wake(
    open_backend: Callable[..., SQLiteBackend],
    in_background: Callable[[Callable[[threading.Event], None]], None],
) -> None:
    waiter = open_backend()
    producer = open_backend()

    def produce(stop: threading.Event) -> None:
        while not stop.wait(0.01):
            insert(producer, new(queue="busy"))

    in_background(produce)
    wait_until(lambda: producer.jobs_list(JobsListParams()), what="a first insert")
    woken, took = timed_wait(waiter, ["idle"], 0.3)
    assert not woken and took >= 0.29


def test_a_settled_job_wakes_waiters_in_this_process(
    open_backend: Callable[..., SQLiteBackend],
    in_background: Callable[[Callable[[threading.Event], None]], None],
) -> None:
    waiter = open_backend()
    waiter.poll_interval = 60
    worker = open_backend()
    insert(worker, new(queue="loop"))

    def claim_and_release(stop: threading.Event) -> None:
        while not stop.wait(0.02):
            for c in worker.jobs_claim(JobsClaimParams("w", ["loop"], 1)):
                worker.jobs_ack(JobsAckParams([Outcome(c.id, c.token, "release")]))

    in_background(claim_and_release)
    woken, took = timed_wait(waiter, ["loop"], 30)
    assert woken and took < 5


def test_an_insert_by_another_process_wakes_a_waiter_within_milliseconds(
    open_backend: Callable[..., SQLiteBackend], url: str, spawn_child: Callable[..., Child]
) -> None:
    # given a process that inserts a job every 20 ms
    waiter = open_backend()
    producer = spawn_child(_procs.insert_until_stopped, url, "q", 0.0)
    wait_until(lambda: waiter.jobs_list(JobsListParams()), what="the first insert")
    # when a worker here waits for work, it wakes at the next insert
    for _ in range(3):
        woken, took = timed_wait(waiter, ["q"], 30)
        assert woken and took < 1.0  # inserts come every 20 ms; the file is polled every 5 ms
    assert isinstance(producer.finish(), int)


def test_an_insert_by_another_process_rings_a_waiter_that_would_not_look_for_a_minute(
    open_backend: Callable[..., SQLiteBackend], url: str, spawn_child: Callable[..., Child]
) -> None:
    # given a waiter that would not look at the file for 60 s: only the doorbell (the named
    # pipe beside the file) can wake it for another process's insert
    waiter = open_backend()
    waiter.poll_interval = 60
    producer = spawn_child(_procs.insert_until_stopped, url, "q", 0.0)
    wait_until(lambda: waiter.jobs_list(JobsListParams()), what="the first insert")
    # when it waits, then the next insert wakes it (inserts come every 20 ms)
    for _ in range(3):
        woken, took = timed_wait(waiter, ["q"], 30)
        assert woken and took < 5
    assert isinstance(producer.finish(), int)


def test_commits_that_make_nothing_due_do_not_wake_other_processes(
    open_backend: Callable[..., SQLiteBackend], url: str, spawn_child: Callable[..., Child]
) -> None:
    # given a process committing queue settings every 10 ms, and one that inserts only
    # delayed jobs
    waiter = open_backend()
    configurer = spawn_child(_procs.configure_until_stopped, url)
    delayer = spawn_child(_procs.insert_until_stopped, url, "q", 3600.0)
    wait_until(lambda: waiter.queues_list(), what="the first commit")
    wait_until(lambda: waiter.jobs_list(JobsListParams()), what="the first delayed job")
    # then an idle worker of q is not woken for nothing: its claim would find nothing
    woken, took = timed_wait(waiter, ["q"], 0.5)
    assert not woken and took >= 0.49
    assert configurer.finish() and delayer.finish()


def test_jobs_another_process_could_not_claim_do_not_wake_it(
    open_backend: Callable[..., SQLiteBackend], url: str, spawn_child: Callable[..., Child]
) -> None:
    # given due jobs in a paused queue and in a queue whose only slot is taken
    waiter = open_backend()
    waiter.queues_configure(QueueConfig("paused", paused=True))
    waiter.queues_configure(QueueConfig("full", max_concurrency=1))
    insert(waiter, new(queue="paused"), new(queue="full"), new(queue="full"))
    assert len(waiter.jobs_claim(JobsClaimParams("w", ["full"], 5))) == 1
    # when another process keeps committing
    configurer = spawn_child(_procs.configure_until_stopped, url)
    wait_until(lambda: len(waiter.queues_list()) == 3, what="the first foreign commit")
    # then a worker of those queues sleeps on: a claim would find nothing
    woken, took = timed_wait(waiter, ["paused", "full"], 0.5)
    assert not woken and took >= 0.49
    assert configurer.finish()
