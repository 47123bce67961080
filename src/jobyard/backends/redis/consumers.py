"""Consumers of Redis lists and streams that other programs write (seed 003).

:class:`ListConsumer` takes JSON entries any Redis client pushed onto a list (``LPUSH`` by seed
003's producers, ``RPUSH`` by seed 000's). Reliable (the default), it moves each entry to a
processing list and records it in a recovery set in one step, and a watchdog returns entries idle
longer than ``min_idle`` to the list; simple (``reliable=False``), it pops entries, so an entry
whose handler was cut short is gone (at most once).

:class:`StreamConsumer` reads a stream with a consumer group, acknowledges with ``XACK``, takes
over the entries of a consumer that stopped with ``XAUTOCLAIM``, and can turn each handler result
into a job (``reply=job_function``), optionally on a queue that lapses when nothing feeds it.

Handler outcomes, for both: return -> acknowledged; ``raise jobyard.Retry`` or any other
exception -> delivered again; ``raise jobyard.Drop`` or an entry that is not JSON -> moved to a
dead list (``<key>.dead``) and logged, never lost silently. That classification is the core's
(``runner=``, a ``base.EntryRunner`` the App hands over: ``jobyard.worker.executor.EntryRunner``,
which also emits the entry's ``Started`` and ``Finished`` events); a stream's reply jobs go
down through the core's enqueue step (``enqueue=``: its events and ``on_enqueue`` hooks).

``max_deliveries=N``, for both: an entry delivered N times without being acknowledged (its
handler kept failing, or the consumers holding it kept dying, SIGKILL included) goes to the dead
list with the reason instead of an (N+1)-th delivery, so a poison entry cannot be redelivered
forever. A stream counts with its own delivery count (the group's pending entries list); a list
keeps a count per entry beside its recovery set (``<key>.deliveries``), raised in the same
script that takes the entry back, and the reasons of its dead entries in ``<dead>.reasons``.

Both have ``start()`` / ``stop(grace)`` (safe to call twice) and ``run_once()`` for tests; a
worker started by ``app.run_worker`` runs the consumers its App registered.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import redis.exceptions
from redis.crc import key_slot

from ...errors import ConfigurationError
from ..base import (
    MAX_IDEMPOTENCY_KEY,
    EntryEnqueue,
    EntryRunner,
    EntryVerdict,
    Inserted,
    JobsInsertParams,
    NewJob,
)
from .keys import claims_key, dead_key, deliveries_key, processing_key, reasons_key

if TYPE_CHECKING:
    from ._core import Core

log = logging.getLogger("jobyard.redis.consumers")

Pop = Literal["right", "left"]


def hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes when the key has a hash tag, else ``None``."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return None


def _slot(key: str) -> int:
    return key_slot(key.encode())


def _no_runner(
    source: str, key: str, entry_id: str, handler: Callable[[Any], Any], decode: Callable[[], Any]
) -> EntryVerdict:
    raise ConfigurationError(
        f"the consumer of {source} {key!r} was made without runner=: make it with "
        "app.consume_list or app.consume_stream"
    )


def check_max_deliveries(value: object) -> int | None:
    """None or a whole number of at least 1, else ``ConfigurationError``."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(
            f"max_deliveries must be a whole number of at least 1, got {value!r}"
        )
    return value


class _Consumer:
    """The lifecycle both consumers share: a thread that runs steps until stopped."""

    name = "consumer"

    def __init__(
        self, core: Core, block: float, sweep_interval: float, runner: EntryRunner | None
    ) -> None:
        if block < 0:
            raise ConfigurationError("block must not be negative")
        self.core = core
        self.runner: EntryRunner = runner or _no_runner
        self.block = block
        self.sweep_interval = sweep_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_sweep = float("-inf")
        self.acked = 0
        self.retried = 0
        self.dropped = 0
        self.recovered = 0

    def start(self) -> None:
        """Start consuming on a thread of its own (safe to call twice)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def stop(self, grace: float = 10.0) -> None:
        """Stop taking entries and let the one in hand finish for up to ``grace`` seconds (plus
        one blocking read). An entry still in hand then stays claimed: its watchdog (list) or
        another consumer (stream) delivers it again. Safe to call twice."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(grace + self.block + 1.0)
            if thread.is_alive():
                log.warning("%s: a handler is still running after %.1fs", self.name, grace)
            else:
                self._stopped()

    def run_once(self, block: float = 0.0) -> int:
        """Sweep for abandoned entries, then take and handle what is there (waiting up to
        ``block`` seconds for one). Returns how many entries were handled. For tests, and for
        callers that drive the consumer themselves instead of :meth:`start`."""
        if self._thread is not None:
            raise RuntimeError(f"{self.name} is running on its own thread")
        self._stop.clear()
        self._check_start()
        return self._step(block, sweep=True)

    def _loop(self) -> None:
        delay = 0.05
        while not self._stop.is_set():
            now = time.monotonic()
            sweep = now - self._last_sweep >= self.sweep_interval
            try:
                self._check_start()  # here, not in start(): a store that is down is waited out
                self._step(self.block, sweep)
                if sweep:
                    self._last_sweep = now
                delay = 0.05
            except Exception as exc:  # noqa: BLE001 - a store outage is waited out, not fatal
                log.warning(
                    "%s: %s: %s; retrying in %.2fs", self.name, type(exc).__name__, exc, delay
                )
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)

    def _now_ms(self) -> str:
        now = self.core.clock.now()
        return "" if now is None else str(int(now * 1000))

    def _check_start(self) -> None:
        """Work that needs the store before the first step (creating a consumer group)."""

    def _stopped(self) -> None:
        """Tidy up after the thread ended."""

    def _step(self, block: float, sweep: bool) -> int:
        raise NotImplementedError


class ListConsumer(_Consumer):
    """Consume JSON entries of a Redis list that other programs push (a work queue).

    ``reliable=True`` (default): each entry moves to the processing list (``processing``, by
    default ``<key>.processing``) and is recorded in the recovery set (``recovery_zset``, default
    ``<key>.claims``) scored by the time it was taken, in one script; the handler's return removes
    it (LREM). The watchdog returns entries idle longer than ``min_idle`` seconds to the list.
    ``min_idle`` is required: set it above the longest a handler ever takes, or an entry is taken
    from a consumer still on it and handled twice. ``recovery_ttl`` (seconds, > min_idle) lets an
    abandoned recovery set expire. On Redis Cluster the list, its processing list, recovery set and
    dead list must share a hash slot: name the list with a hash tag, e.g. ``{thumbnails}``.

    ``reliable=False``: entries are popped before the handler runs (at most once).

    ``pop``: the end entries are taken from, ``"right"`` for producers that ``LPUSH``,
    ``"left"`` for producers that ``RPUSH``, so entries come out in push order.

    ``Retry(delay=...)`` on a reliable list leaves the entry taken, dated so that the watchdog
    returns it after ``delay`` seconds; without a delay, and after any other exception, the
    entry goes back behind what is queued, so one failing entry cannot hog the consumer.

    ``max_deliveries``: the most deliveries of an entry that end without an acknowledgement
    (a failed handler, a ``Retry``, a consumer that stopped holding it and whose entry the
    watchdog took back); the last of them moves the entry to the dead list, its reason in the
    hash ``<dead>.reasons``. Identical entries share one count. On Cluster the count's key
    ``<key>.deliveries`` shares the list's slot like the other keys.
    """

    def __init__(
        self,
        core: Core,
        key: str,
        handler: Callable[[Any], Any],
        *,
        reliable: bool = True,
        min_idle: float | None = None,
        recovery_ttl: float | None = None,
        processing: str | None = None,
        recovery_zset: str | None = None,
        dead: str | None = None,
        pop: Pop = "right",
        block: float = 1.0,
        sweep_interval: float | None = None,
        runner: EntryRunner | None = None,
        max_deliveries: int | None = None,
    ) -> None:
        if not isinstance(key, str) or not key:
            raise ConfigurationError("consume_list needs the list's key")
        self.max_deliveries = check_max_deliveries(max_deliveries)
        if pop not in ("right", "left"):
            raise ConfigurationError("pop must be 'right' (LPUSH producers) or 'left' (RPUSH)")
        self.key = key
        self.handler = handler
        self.reliable = reliable
        self.pop: Pop = pop
        self.dead = dead or dead_key(key)
        self.processing = processing or processing_key(key)
        self.recovery = recovery_zset or claims_key(key)
        self.deliveries = deliveries_key(key)
        self.reasons = reasons_key(self.dead)
        self.min_idle = min_idle
        self.recovery_ttl = recovery_ttl
        if reliable:
            if min_idle is None:
                raise ConfigurationError(
                    f"reliable list {key!r} needs min_idle: the seconds after which a taken entry "
                    "belongs to no live consumer and goes back on the list (set it above the "
                    "longest a handler takes); a reliable consumer without it does not start"
                )
            if min_idle <= 0:
                raise ConfigurationError("min_idle must be a positive number of seconds")
            if recovery_ttl is not None and recovery_ttl <= min_idle:
                raise ConfigurationError(
                    f"recovery_ttl ({recovery_ttl}s) must be longer than min_idle ({min_idle}s): "
                    "the recovery set would expire before its entries are recovered"
                )
            if core.cluster:
                self._check_slots()
        elif processing or recovery_zset or min_idle is not None or recovery_ttl is not None:
            raise ConfigurationError(
                "processing, recovery_zset, min_idle and recovery_ttl are for reliable lists"
            )
        elif core.cluster and self.max_deliveries is not None:
            self._check_slots()
        interval = min((min_idle or 4.0) / 4, 5.0) if sweep_interval is None else sweep_interval
        super().__init__(core, block, interval, runner)
        self.name = f"jobyard-list-{key}"
        self._client = core.client_for(binary=True)
        self._scripts = core.scripts

    def _check_slots(self) -> None:
        keys = {"dead": self.dead, "dead reasons": self.reasons}
        if self.reliable:
            keys.update(processing=self.processing, **{"recovery set": self.recovery})
        if self.max_deliveries is not None:
            keys["delivery counts"] = self.deliveries
        slot = _slot(self.key)
        off = {role: k for role, k in keys.items() if _slot(k) != slot}
        if not off:
            return
        tag = hash_tag(self.key)
        if tag is None:
            named = "{" + self.key + "}"
            hint = (
                f"name the list with the hash tag {{{self.key}}}, as {named!r}: its processing "
                f"list {processing_key(named)!r} then lands on the same slot"
            )
        else:
            hint = f"give those keys the list's hash tag {{{tag}}}, e.g. '{{{tag}}}.processing'"
        where = ", ".join(f"{role} {k!r}" for role, k in off.items())
        raise ConfigurationError(
            f"reliable list {self.key!r} and its {where} fall on different Redis Cluster slots, "
            f"so one step cannot move an entry between them: {hint}"
        )

    # steps ------------------------------------------------------------------------------------

    def _step(self, block: float, sweep: bool) -> int:
        if self.reliable:
            if sweep:
                self.sweep()
            entry = self._take(block)
        else:
            entry = self._pop(block)
        if entry is None:
            return 0
        self._settle(entry, self._handle(entry))
        return 1

    def _keys(self) -> list[str]:
        """The KEYS of list_recover and list_settle."""
        return [
            self.key,
            self.processing,
            self.recovery,
            self.dead,
            self.deliveries,
            self.reasons,
        ]

    def _cap(self) -> str:
        return "" if self.max_deliveries is None else str(self.max_deliveries)

    def sweep(self) -> list[bytes]:
        """The watchdog: return entries idle longer than min_idle to the list (or, past
        ``max_deliveries``, move them to the dead list). The entries returned."""
        assert self.min_idle is not None
        args = [
            self._now_ms(),
            str(int(self.min_idle * 1000)),
            self.pop,
            "" if self.recovery_ttl is None else str(int(self.recovery_ttl * 1000)),
            "1000",
            self._cap(),
        ]
        keys = self._keys()
        script = self._scripts["list_recover"]
        # Safe to repeat: a repeat finds the entries it returned no longer idle.
        back, dead = self.core.call(lambda: script(keys=keys, args=args, client=self._client))
        for entry in back:
            log.warning(
                "list %s: entry idle past min_idle returned to the list: %r", self.key, entry
            )
        for entry in dead:
            log.warning(
                "list %s: entry idle past min_idle reached max_deliveries=%s, moved to %s: %r",
                self.key,
                self.max_deliveries,
                self.dead,
                entry,
            )
        self.recovered += len(back)
        self.dropped += len(dead)
        return list(back)

    def _take(self, block: float) -> bytes | None:
        keys = [self.key, self.processing, self.recovery]
        ttl = "" if self.recovery_ttl is None else str(int(self.recovery_ttl * 1000))
        args = [self._now_ms(), self.pop, "1", ttl]
        # Sent once: a take whose reply was lost leaves its entry taken, back after min_idle.
        taken: list[bytes] = self.core.run_once("list_take", keys, args, binary=True)
        if taken:
            return taken[0]
        if block <= 0:
            return None
        # Nothing there: block on the list itself. BLMOVE cannot record the entry in the same
        # step; if this consumer stops before recording it, the watchdog dates it when it sees
        # it on the processing list without a record, so it still comes back.
        src = "RIGHT" if self.pop == "right" else "LEFT"
        once = self.core.client_for(binary=True, once=True)  # blocking takes are never repeated
        entry: bytes | None = once.blmove(self.key, self.processing, block, src, "LEFT")
        if entry is not None:
            now = self._now_ms()
            score = int(now) if now else int(self._client.time()[0]) * 1000
            self.core.call(lambda: self._client.zadd(self.recovery, {entry: score}))
        return entry

    def _pop(self, block: float) -> bytes | None:
        if block <= 0:
            popped: bytes | None = self.core.call_once(
                "list_pop",
                lambda c: c.rpop(self.key) if self.pop == "right" else c.lpop(self.key),
                binary=True,
            )
            return popped
        once = self.core.client_for(binary=True, once=True)  # blocking pops are never repeated
        fn = once.brpop if self.pop == "right" else once.blpop
        got = fn([self.key], timeout=block)
        return None if got is None else bytes(got[1])

    def _handle(self, entry: bytes) -> tuple[str, float, str]:
        """Run the handler (through the core's runner); the action to take: ack, requeue,
        hold (with a delay) or drop, and why (kept as a dead entry's reason)."""
        verdict = self.runner("list", self.key, "", self.handler, lambda: json.loads(entry))
        if verdict.action == "retry":
            if verdict.delay and self.reliable:
                return "hold", verdict.delay, verdict.reason
            return "requeue", 0.0, verdict.reason
        if verdict.action == "drop":
            log.warning(
                "list %s: entry dropped to %s (%s): %r", self.key, self.dead, verdict.reason, entry
            )
            return "drop", 0.0, verdict.reason
        return "ack", 0.0, ""

    def _settle(self, entry: bytes, outcome: tuple[str, float, str]) -> None:
        action, delay, why = outcome
        if action == "ack":
            self.acked += 1
        elif action == "drop":
            self.dropped += 1
        else:
            self.retried += 1
        if not self.reliable and self.max_deliveries is None:
            # Pushes are sent once: a repeat after a lost reply would push the entry twice.
            if action == "requeue":
                self.core.call_once(
                    "list_requeue",
                    lambda c: (c.lpush if self.pop == "right" else c.rpush)(self.key, entry),
                    binary=True,
                )
            elif action == "drop":
                self.core.call_once("list_drop", lambda c: c.rpush(self.dead, entry), binary=True)
            return
        hold = ""
        if action == "hold":
            assert self.min_idle is not None
            now = self._now_ms()
            now_ms = int(now) if now else int(self._client.time()[0]) * 1000
            hold = str(now_ms + int(delay * 1000) - int(self.min_idle * 1000))
        simple = "" if self.reliable else "1"
        args: list[bytes | str] = [entry, action, self.pop, hold, self._cap(), why[:500], simple]
        # Sent once: with identical entries taken, a repeat would settle another one's copy. A
        # settle whose reply was lost either ran or leaves the entry taken, back after min_idle.
        still = self.core.run_once("list_settle", self._keys(), args, binary=True)
        if still == 2:
            self.retried -= 1
            self.dropped += 1
            log.warning(
                "list %s: entry reached max_deliveries=%s, moved to %s: %r",
                self.key,
                self.max_deliveries,
                self.dead,
                entry,
            )
        elif not still:
            log.warning(
                "list %s: the watchdog had returned the entry to the list before its handler "
                "finished (min_idle too short?); it will be delivered again",
                self.key,
            )


class StreamConsumer(_Consumer):
    """Consume a Redis stream with a consumer group (``XREADGROUP``, ``XACK``).

    Each entry reaches one consumer of ``group``. Entries a consumer read but never acknowledged
    (it stopped, or its handler raised) are taken over by a live consumer with ``XAUTOCLAIM``
    once idle for ``min_idle`` seconds. The handler gets the entry's fields as a dict of str, or,
    with ``field="name"``, that field's value decoded as JSON.

    ``reply=job_function``: each handler result (unless ``None``) becomes one job of that
    function, the result its single argument (an uploads stream feeding a thumbnail queue, say),
    inserted before the entry is acknowledged under the idempotency key
    ``stream:<stream>:<group>:<entry id>``, so a redelivered entry does not enqueue twice while
    the first reply job is pending or running. ``reply_ttl`` (seconds) re-arms an expiry on the
    reply queue at every push: a queue nobody fed for that long lapses with what it holds.

    ``start_id``: where a new group starts reading, ``"0"`` (the stream's whole history,
    default: nothing written before the first start is lost) or ``"$"`` (new entries only).

    ``insert``: how reply jobs reach the store (the backend's ``jobs_insert``), needed with
    ``reply``.

    ``max_deliveries``: the most times an entry is handed to a handler. The stream counts
    deliveries itself (each ``XREADGROUP`` and ``XAUTOCLAIM`` of an entry raises its count in
    the group's pending entries list); a takeover that finds an entry's count past the cap
    moves it to the dead list with the reason (as ``Drop`` does) instead of handling it, so an
    entry whose handler keeps failing, or whose consumers keep dying, ends there.
    """

    def __init__(
        self,
        core: Core,
        stream: str,
        handler: Callable[[Any], Any],
        *,
        insert: Callable[..., Any] | None = None,
        enqueue: EntryEnqueue | None = None,
        runner: EntryRunner | None = None,
        group: str | None = None,
        reply: Any = None,
        reply_ttl: float | None = None,
        consumer: str | None = None,
        min_idle: float = 60.0,
        field: str | None = None,
        start_id: str = "0",
        count: int = 10,
        dead: str | None = None,
        block: float = 1.0,
        sweep_interval: float | None = None,
        max_deliveries: int | None = None,
    ) -> None:
        if not isinstance(stream, str) or not stream:
            raise ConfigurationError("consume_stream needs the stream's key")
        self.max_deliveries = check_max_deliveries(max_deliveries)
        if not group:
            raise ConfigurationError("consume_stream needs group=: the consumer group's name")
        if min_idle <= 0:
            raise ConfigurationError("min_idle must be a positive number of seconds")
        if reply is not None and not callable(
            getattr(getattr(reply, "opts", None), "new_job", None)
        ):
            raise ConfigurationError("reply must be a job function (registered with @app.job)")
        if reply is not None and insert is None:
            raise ConfigurationError("reply= needs insert=, the store's jobs_insert")
        if reply_ttl is not None and (reply is None or reply_ttl <= 0):
            raise ConfigurationError("reply_ttl needs reply= and a positive number of seconds")
        if count < 1:
            raise ConfigurationError("count must be at least 1")
        interval = min(min_idle / 4, 5.0) if sweep_interval is None else sweep_interval
        super().__init__(core, block, interval, runner)
        self.stream = stream
        self.handler = handler
        self.group = group
        self.reply = reply
        self.reply_ttl = reply_ttl
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.min_idle = min_idle
        self.field = field
        self.start_id = start_id
        self.count = count
        self.dead = dead or dead_key(stream)
        self.name = f"jobyard-stream-{stream}"
        self._insert = insert
        self._enqueue = enqueue
        self._client = core.client_for(binary=True)
        self._group_ready = False

    def _check_start(self) -> None:
        if self._group_ready:
            return
        try:
            self.core.call(  # a repeat is refused with BUSYGROUP, below
                lambda: self._client.xgroup_create(
                    self.stream, self.group, id=self.start_id, mkstream=True
                )
            )
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    def _stopped(self) -> None:
        # A consumer that holds no entries leaves the group, so XINFO stays readable.
        try:
            pending = self._client.xpending_range(
                self.stream, self.group, min="-", max="+", count=1, consumername=self.consumer
            )
            if not pending:
                self._client.xgroup_delconsumer(self.stream, self.group, self.consumer)
        except redis.exceptions.RedisError as exc:
            log.debug("stream %s: could not leave group %s: %s", self.stream, self.group, exc)

    def _step(self, block: float, sweep: bool) -> int:
        handled = 0
        if sweep:
            handled += self.sweep()
        once = self.core.client_for(binary=True, once=True)  # a lost read waits out min_idle
        read = once.xreadgroup(
            self.group,
            self.consumer,
            {self.stream: ">"},
            count=self.count,
            block=int(block * 1000) if block > 0 else None,
        )
        for _stream, entries in read or []:
            for entry_id, fields in entries:
                if self._stop.is_set():
                    return handled  # stopping: the rest stay pending for another consumer
                self._handle(entry_id, fields)
                handled += 1
        return handled

    def sweep(self) -> int:
        """Take over entries other consumers left unacknowledged past min_idle, and handle them."""
        handled = 0
        cursor: Any = "0-0"
        while True:
            start = cursor
            # Sent once: a repeat after a lost reply would find the entries it took no longer
            # idle, and they would wait out min_idle again.
            reply = self.core.call_once(
                "xautoclaim",
                lambda c: self._autoclaim(c, start),  # noqa: B023 - called at once
                binary=True,
            )
            cursor, entries = reply[0], reply[1]
            counts = self._deliveries(entries)
            for entry_id, fields in entries:
                times = counts.get(entry_id, 0)
                if self.max_deliveries is not None and times > self.max_deliveries and fields:
                    reason = (
                        f"delivered {times - 1} times (max_deliveries={self.max_deliveries}) "
                        "without being acknowledged: its handler failed or its consumer stopped "
                        "each time"
                    )
                    self._drop(entry_id, fields, reason)
                    continue
                log.warning(
                    "stream %s: took over entry %r left unacknowledged", self.stream, entry_id
                )
                self.recovered += 1
                self._handle(entry_id, fields)
                handled += 1
            if cursor in (b"0-0", "0-0") or not entries:
                return handled

    def _deliveries(self, entries: list[Any]) -> dict[bytes, int]:
        """How many times each entry just taken over has been delivered, this takeover
        included (the group's own count, read from its pending entries list); {} without a
        cap. The entries of one XAUTOCLAIM are in id order and now all this consumer's."""
        if self.max_deliveries is None or not entries:
            return {}
        first, last = entries[0][0], entries[-1][0]
        rows = self.core.call(
            lambda: self._client.xpending_range(
                self.stream,
                self.group,
                min=first,
                max=last,
                count=len(entries) + 100,
                consumername=self.consumer,
            )
        )
        return {r["message_id"]: int(r["times_delivered"]) for r in rows}

    def _autoclaim(self, client: Any, cursor: Any) -> Any:
        return client.xautoclaim(
            self.stream,
            self.group,
            self.consumer,
            min_idle_time=int(self.min_idle * 1000),
            start_id=cursor,
            count=self.count,
        )

    def _decode(self, fields: dict[bytes, bytes]) -> Any:
        if self.field is None:
            return {k.decode(): v.decode() for k, v in fields.items()}
        return json.loads(fields[self.field.encode()])

    def _handle(self, entry_id: bytes, fields: dict[bytes, bytes] | None) -> None:
        if fields is None:  # deleted from the stream meanwhile: nothing to do
            self._ack(entry_id)
            return
        verdict = self.runner(
            "stream", self.stream, entry_id.decode(), self.handler, lambda: self._decode(fields)
        )
        if verdict.action == "drop":
            self._drop(entry_id, fields, verdict.reason)
            return
        if verdict.action == "retry":
            self.retried += 1  # stays pending: taken over again after min_idle
            return
        result = verdict.result
        if self.reply is not None and result is not None:
            try:
                job = self._reply_job(entry_id, result)
            except TypeError as exc:
                self._drop(entry_id, fields, f"the reply is not JSON: {exc}")
                return
            if self._enqueue is not None:
                self._enqueue([job], send=self._send_reply)
            else:
                self._send_reply(JobsInsertParams([job]))
        self._ack(entry_id)
        self.acked += 1

    def _send_reply(self, params: JobsInsertParams) -> list[Inserted]:
        assert self._insert is not None
        inserted: list[Inserted] = self._insert(params, queue_ttl=self.reply_ttl)
        return inserted

    def _reply_job(self, entry_id: bytes, result: Any) -> NewJob:
        job: NewJob = self.reply.opts.new_job((result,), {})
        eid = entry_id.decode()
        key = f"stream:{self.stream}:{self.group}:{eid}"
        if len(key) > MAX_IDEMPOTENCY_KEY:
            digest = hashlib.sha1(f"{self.stream}\0{self.group}".encode()).hexdigest()[:20]
            key = f"stream:{digest}:{eid}"
        return replace(job, idempotency_key=key)

    def _ack(self, entry_id: bytes) -> None:
        self.core.call(lambda: self._client.xack(self.stream, self.group, entry_id))

    def _drop(self, entry_id: bytes, fields: dict[bytes, bytes], reason: str) -> None:
        record = json.dumps(
            {
                "stream": self.stream,
                "group": self.group,
                "id": entry_id.decode(),
                "fields": {
                    k.decode(errors="replace"): v.decode(errors="replace")
                    for k, v in fields.items()
                },
                "reason": reason,
            }
        )
        # dead list first, then XACK: a stop in between records the entry twice, never zero times;
        # the push is sent once (a lost reply leaves the entry pending, dropped again later)
        self.core.call_once("stream_drop", lambda c: c.rpush(self.dead, record), binary=True)
        self._ack(entry_id)
        self.dropped += 1
        log.warning(
            "stream %s: entry %r dropped to %s (%s)", self.stream, entry_id, self.dead, reason
        )
