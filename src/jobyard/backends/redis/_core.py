"""What every part of the Redis store shares: one :class:`Core` holding the client, the Lua
scripts, the key names and the clock, through which every call is made. ``backend.py`` (the
Backend protocol), ``_admin.py`` (queues, workers, counts), ``_schedules.py`` (recurring jobs) and
``consumers.py`` (foreign lists and streams) depend on it and on nothing private of each other.

Which calls are retried
-----------------------
A call that fails on a dropped connection may have run: Redis applied it and the reply was lost.
Sending it again is safe only when a repeat leaves the store as one run would. :meth:`Core.call`
and :meth:`Core.run` retry through outages for up to ``retry_for`` seconds (redis-py's own quick
retries included). They are for:

- reads: jobs, lists, counts, queues, workers, schedules, ``TIME``, ``PING``, a claim's peek;
- fenced writes: an ack or a lease renewal carries the claim's token, so a repeat of one that was
  applied is refused as stale and changes nothing (the worker then hears "stale" for an outcome
  that was in fact recorded: logged, never redone);
- writes that set a state whole or converge: queue settings, worker beats, schedule syncs, the
  lease reaper, retention and purges (a repeat finds less to do), wake tokens, ``XACK``, a
  consumer group;
- a schedule's tick or skip (a compare-and-set on its next run), its pause or resume, and an
  insert whose every job carries an idempotency key (a repeat finds the key held and returns the
  job, ``created`` false);
- every step of a staged batch after its numbers are reserved (``_insert.py``): a slice names
  the numbers of its jobs and a repeat finds them written (it answers as the first did); a
  batch's commit, publication, merge, abort and close move it to a state a repeat finds
  reached.

:meth:`Core.call_once` and :meth:`Core.run_once` send the command once, on a client without
redis-py's retries, and send it again only when the failure proves it never ran
(:func:`~._connection.never_sent`: the connection could not be opened, or Redis answered LOADING,
TRYAGAIN or CLUSTERDOWN), so an outage is still waited out. They are for calls whose repeat is
another call: a claim (a repeat takes the next batch), a one-script insert without idempotency
keys (a repeat inserts the jobs twice), a sequence take or a staged batch's opening (a repeat
reserves other numbers), cancel and retry by id (a repeat is refused and
the caller told so although its move happened), taking, popping, pushing or settling an entry of
a list other programs write (identical entries: a repeat would settle another consumer's copy),
``XAUTOCLAIM``.

When such a call fails after it may have been sent, the error goes to the caller, is logged, and
counted in :attr:`Core.unsure` by call name. The caller's own loop decides what next: the
worker's producer claims again after its backoff; a claim whose reply was lost leaves its jobs
running under a lease nobody renews, so the reaper returns them to pending once it lapses, the
attempt counted (a lapsed lease is a failed attempt). A list entry taken that way comes back after
``min_idle``. A one-script enqueue that raised may or may not have inserted its jobs: give them
an idempotency key to enqueue again safely. A staged one that raised inserted nothing (it is
deleted, by its producer or the reaper), unless it had been committed: then it returns.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from redis.commands.core import Script
from redis.exceptions import NoScriptError

from ...clock import Clock
from ...events import Events, WorkerNote
from .._lean import Lean
from ._connection import TRANSIENT, Outage, Scripts, call, make_client, never_sent, parse_url
from .keys import Keys

log = logging.getLogger("jobyard.redis")
T = TypeVar("T")


# Built once: json.dumps with options builds a new encoder on every call, a sixth of the Python
# an enqueue runs before its send. An encoder keeps nothing between calls: threads share it.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    """A script argument as compact JSON (what ``json.dumps(value, separators=(",", ":"),
    ensure_ascii=False)`` returns)."""
    return _COMPACT.encode(value)


class Core:
    """The client, scripts, keys and clock of one Redis store, and the one way to call it."""

    def __init__(self, url: str, clock: Clock) -> None:
        self.clock = clock
        self.settings = parse_url(url)
        self.cluster = self.settings.cluster
        self.keys = Keys(self.settings.prefix)
        self.client: Any = make_client(self.settings)  # decoded, with retries
        self.scripts = Scripts(self.client)
        # Calls sent once whose reply was lost, by name (see the module docstring).
        self.unsure: Counter[str] = Counter()
        self.events = Events()  # the App's bus, once attached (base.attach_events)
        self._clients: dict[tuple[bool, bool], Any] = {}  # (binary, once) -> client
        self._lock = threading.Lock()
        self._closed = False
        self._outage = Outage()
        self._lean = Lean()  # (lean script, queue) handed to the general script lately

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a blocked read that fails then is no outage)."""
        return self._closed

    def client_for(self, *, binary: bool = False, once: bool = False) -> Any:
        """The client that returns bytes (``binary``: entries other programs wrote, maybe not
        UTF-8) and/or sends each command once (``once``); each made on first use."""
        if not binary and not once:
            return self.client
        with self._lock:
            client = self._clients.get((binary, once))
            if client is None:
                client = make_client(self.settings, decode=not binary, retries=not once)
                self._clients[(binary, once)] = client
            return client

    # calls ------------------------------------------------------------------------------------

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` (a call that is safe to repeat) through connection outages."""
        return call(fn, self.settings.retry_for, lambda: self._closed, self._outage)

    def call_once(self, name: str, fn: Callable[[Any], T], *, binary: bool = False) -> T:
        """Run ``fn(client)`` (a call that is not safe to repeat) on a client that sends each
        command once; sent again only while it surely never reached Redis. A failure after it
        may have run is counted under ``name``, logged and raised."""
        client = self.client_for(binary=binary, once=True)
        try:
            return call(
                lambda: fn(client),
                self.settings.retry_for,
                lambda: self._closed,
                self._outage,
                retry_if=never_sent,
            )
        except TRANSIENT as exc:
            if not never_sent(exc) and not self._closed:
                with self._lock:
                    self.unsure[name] += 1
                if self.events.active:
                    self.events.emit(WorkerNote("unsure", 1, name))
                log.warning(
                    "redis: %s failed after it was sent (%s: %s); not sent again, as it may "
                    "have run",
                    name,
                    type(exc).__name__,
                    exc,
                )
            raise

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run the script ``name`` (safe to repeat) through connection outages."""
        script = self.scripts[name]
        return self.call(lambda: evalsha(self.client, script, keys, args))

    def run_once(
        self, name: str, keys: Sequence[str], args: Sequence[Any], *, binary: bool = False
    ) -> Any:
        """Run the script ``name`` (not safe to repeat) once; see :meth:`call_once`."""
        script = self.scripts[name]
        return self.call_once(name, lambda c: evalsha(c, script, keys, args), binary=binary)

    def lean(self, script: str, queue: str) -> bool:
        """Whether to try the lean ``script`` on ``queue`` (a single node, and not after it
        handed that queue's work to the general script lately: see ``backends/_lean.py``)."""
        return not self.cluster and self._lean.ok((script, queue))

    def not_lean(self, script: str, queue: str) -> None:
        """The lean ``script`` handed ``queue``'s work to the general script: skip it a while."""
        self._lean.handed_over((script, queue))

    # time -------------------------------------------------------------------------------------

    def now(self) -> str:
        """ "now" as the scripts take it: the frozen clock's instant, or "" for Redis's TIME."""
        now = self.clock.now()
        return "" if now is None else repr(float(now))

    def clock_now(self) -> float:
        """The frozen clock's now, else Redis's ``TIME``."""
        now = self.clock.now()
        if now is not None:
            return float(now)
        secs, micros = self.call(lambda: self.client.time())
        return int(secs) + int(micros) / 1_000_000

    # queues -----------------------------------------------------------------------------------

    def slices(self, queues: Sequence[str]) -> list[list[str]]:
        """Queues per script call: all at once on one node, one at a time on Cluster."""
        names = list(dict.fromkeys(queues))
        if not names:
            return []
        return [[q] for q in names] if self.cluster else [names]

    def group_keys(self, queues: Sequence[str]) -> list[str]:
        """The keys of each queue in turn, as the job scripts take them."""
        return [key for q in queues for key in self.keys.queue(q)]

    def known_queues(self) -> list[str]:
        """Every queue ever written to or configured, by name."""
        return sorted(self.call(lambda: self.client.smembers(self.keys.queues)))

    def wake_after(self, counts: dict[str, int]) -> None:
        """Cluster only: push the wake tokens the scripts could not (another slot)."""
        due = {q: c for q, c in counts.items() if c > 0}
        if due:
            keys = [self.keys.wake(q) for q in due]
            self.run("wake", keys, [str(c) for c in due.values()])

    def close(self) -> None:
        """Close every client's connection pool (safe to call twice)."""
        self._closed = True
        with self._lock:
            clients = [self.client, *self._clients.values()]
            self._clients.clear()
        for client in clients:
            client.close()


def evalsha(client: Any, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """What ``script(keys, args, client)`` does, without redis-py's layers around EVALSHA (an
    import, tuple copies and a deprecation wrapper that inspects the call's arguments: 0.03-0.07
    ms of the 0.5 ms of Python an enqueue runs before its send when the process was idle).
    NOSCRIPT (a restarted server's empty cache) loads the script and sends it again, as
    ``Script`` does."""
    try:
        return client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
    except NoScriptError:
        script.sha = client.script_load(script.script)
        return client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
