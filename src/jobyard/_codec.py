"""A job's payload and result as stored: JSON text, compact, written and read here only.

A payload is ``{"args": [...], "kwargs": {...}}``; a workflow step's adds its place in the
workflow (``"at"``) and, when it takes its inputs' results, its feed (``"feed"``, see
``jobyard.workflow``). :func:`encode_payload` refuses what JSON cannot hold faithfully with a
``TypeError`` naming the argument (no pickle, no silent ``str()``); :func:`decode_payload` reads
what a store hands back, which may be corrupt (written by something else), and says why in a
:class:`CorruptPayload`. The producer (``job.py``), workflows, the enqueue step's hooks and the
worker's executor all go through these, so one rule says what a payload is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class CorruptPayload(ValueError):
    """A stored payload that is not a payload: not JSON, no ``args`` list or ``kwargs``
    object. Its message says what is wrong."""


@dataclass(slots=True)
class Payload:
    """A decoded payload (not frozen: one is made for every job run, and a frozen dataclass
    costs three times as much to make)."""

    args: list[Any]
    kwargs: dict[str, Any]
    at: str | None = None  # a workflow step's place ("c0/g1"), else None
    feed: Any = None  # a workflow step's feed (positions of its inputs), else None
    trace: Any = None  # the producer's trace context (``"tc"``, jobyard._otel), else None
    workflow: str | None = None  # a workflow step's workflow id (``"wf"``), else None


# Built once: json.dumps with options builds a new encoder per call (~half of enqueue_many's
# Python time). An encoder keeps no state between calls, so threads can share it.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_ESCAPED = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)
# The C encoder _COMPACT makes inside each encode() call, made once: that call's Python layers
# were a tenth of enqueue_many's Python time. Without the circular-reference bookkeeping (a dict
# that would be shared across threads), a cycle recurses until RecursionError; _COMPACT then
# encodes the value again and raises what it always raised.
_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_FAST = (
    None
    if _C_ENCODER is None
    else _C_ENCODER(
        None, _COMPACT.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
)


def _dumps(value: Any) -> str:
    try:
        text = _COMPACT.encode(value) if _FAST is None else "".join(_FAST(value, 0))
    except RecursionError:
        text = _COMPACT.encode(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate cannot be stored as UTF-8 by any store: escape everything instead.
        text = _ESCAPED.encode(value)
    return text


def _bad_key(value: Any) -> object:
    """A dict key in ``value`` that is not a string (JSON would turn ``1`` into ``"1"``, and
    ``{1: "a", "1": "b"}`` into one entry), else ``_NO_BAD_KEY``. ``value`` was encoded already,
    so it holds no cycle."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    return k
                if isinstance(v, _CONTAINERS):
                    stack.append(v)
        elif isinstance(item, list | tuple):
            stack.extend(v for v in item if isinstance(v, _CONTAINERS))
    return _NO_BAD_KEY


_NO_BAD_KEY = object()
_CONTAINERS = (dict, list, tuple)


def _key_error(label: str, key: object) -> TypeError:
    return TypeError(f"{label} is not JSON: dict key {key!r} is not a string")


def encode_payload(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """JSON-encode a call's arguments; a TypeError names the argument that is not JSON."""
    try:
        text = _dumps({"args": list(args), "kwargs": dict(kwargs)})
    except (TypeError, ValueError, RecursionError):
        pass
    else:
        if text.count("{") == 2:
            return text  # no dict inside the arguments (the outer two are the payload's own)
        # Only a dict can hold a key JSON would turn into a string: scan the containers alone.
        for i, a in enumerate(args):
            if isinstance(a, _CONTAINERS) and (key := _bad_key(a)) is not _NO_BAD_KEY:
                raise _key_error(f"argument {i}", key)
        for name, v in kwargs.items():
            if isinstance(v, _CONTAINERS) and (key := _bad_key(v)) is not _NO_BAD_KEY:
                raise _key_error(f"argument {name!r}", key)
        return text
    named = [(f"argument {i}", a) for i, a in enumerate(args)] + [
        (f"argument {k!r}", v) for k, v in kwargs.items()
    ]
    for label, value in named:
        if not isinstance(label, str):
            continue
        try:
            _dumps(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(f"{label} is not JSON serializable: {exc}") from None
    bad = [k for k in kwargs if not isinstance(k, str)]
    raise TypeError(f"keyword argument names must be strings, got {bad!r}")


def encode_result(value: Any) -> str:
    """JSON-encode a handler's return value (TypeError if it is not JSON)."""
    if value is None:  # most handlers return nothing
        return "null"
    try:
        text = _dumps(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"the handler's result is not JSON serializable: {exc}") from None
    if (key := _bad_key(value)) is not _NO_BAD_KEY:
        raise _key_error("the handler's result", key)
    return text


def encode_step(payload: str, at: str, feed: Any = None, workflow: str | None = None) -> str:
    """A workflow step's payload: ``payload`` (from :func:`encode_payload`) with the step's
    place ``at``, its ``workflow`` id (``"wf"``) and, when it takes its inputs' results, its
    ``feed`` (ints and lists only)."""
    extra: dict[str, Any] = {"at": at}
    if workflow is not None:
        extra["wf"] = workflow
    if feed is not None:
        extra["feed"] = feed
    # The payload object gains the step's place and feed beside its args and kwargs.
    return payload[:-1] + "," + _dumps(extra)[1:]


# json.loads' own scanner, called directly: loads and JSONDecoder.decode around it (a call and
# two whitespace matches) were a third of decoding a small payload, once per job. What it cannot
# read whole (leading or trailing whitespace, extra data, not JSON) goes through json.loads,
# which then decides, and words its errors, as it always did.
_SCAN: Any = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _loads(text: str) -> Any:
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError, TypeError):
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value


def decode_payload(text: str) -> Payload:
    """The arguments (and a workflow step's place and feed) of a stored payload;
    :class:`CorruptPayload` if it holds no ``args`` list and ``kwargs`` object."""
    try:
        data = _loads(text)
        args, kwargs = data["args"], data["kwargs"]
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise TypeError("args must be a list and kwargs an object")
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptPayload(str(exc)) from None
    except RecursionError:  # nested past the decoder's limit: not ours
        raise CorruptPayload("nested too deep to decode") from None
    at = data.get("at")
    wf = data.get("wf")
    return Payload(
        args,
        kwargs,
        at if isinstance(at, str) else None,
        data.get("feed"),
        data.get("tc"),
        wf if isinstance(wf, str) else None,
    )


def with_trace(payload: str, carrier: Mapping[str, str]) -> str:
    """``payload`` carrying a trace context (``"tc"``: the W3C ``traceparent`` and
    ``tracestate`` a propagator wrote), for the worker's span to be its child."""
    if not carrier:
        return payload
    return payload[:-1] + ',"tc":' + _dumps(dict(carrier)) + "}"


def decode_result(text: str | None) -> Any:
    """A stored result (``None`` for none); ``ValueError`` if it is not JSON (or is nested past
    the decoder's limit)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("result nested too deep to decode") from None
