"""``jobyard worker --reload``: restart the worker when the app's source changes (development
only). The watching is watchfiles' (in the ``dev`` extra); this module only decides what to
watch and what to run."""

from __future__ import annotations

import importlib.util
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from .app import import_from_working_directory
from .errors import ConfigurationError

log = logging.getLogger("jobyard.cli")


RELOAD_ROOT = "JOBYARD_RELOAD_ROOT"


def source_root(app_ref: str) -> Path:
    """The directory to watch for APP ``module:attribute``: ``$JOBYARD_RELOAD_ROOT`` if set
    (``manage.py jobyard_worker`` sets the project's directory: its APP lives in jobyard), else
    its top-level package's directory (``shop/`` for ``shop.tasks:app``), or the module's own
    directory for a lone module."""
    given = os.environ.get(RELOAD_ROOT)
    if given:
        return Path(given)
    top = app_ref.partition(":")[0].split(".")[0]
    import_from_working_directory()  # where the worker will import APP from
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        raise ConfigurationError(f"cannot find module {top!r} to watch: {exc}") from None
    if spec is None or spec.origin is None:
        raise ConfigurationError(f"cannot find module {top!r} to watch")
    if spec.submodule_search_locations:  # a package: watch all of it
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent


def run_reloading(app_ref: str, worker_args: Sequence[str], grace: float) -> int:
    """Run ``jobyard worker APP <worker_args>`` as a child process, and restart it (SIGINT:
    a graceful stop within ``grace`` seconds, then SIGKILL) whenever a Python file under the
    app's source root changes. Returns when stopped by SIGINT or SIGTERM."""
    try:
        import watchfiles
    except ImportError:
        raise ConfigurationError(
            "--reload needs watchfiles: pip install watchfiles (it is in jobyard's dev extra)"
        ) from None
    root = source_root(app_ref)
    command = shlex.join([sys.executable, "-m", "jobyard", "worker", app_ref, *worker_args])

    def changed(changes: set[tuple[watchfiles.Change, str]]) -> None:
        names = sorted({Path(p).name for _, p in changes})
        log.warning("reloading: %s changed", ", ".join(names))

    log.warning("watching %s for changes (--reload, development only)", root)
    watchfiles.run_process(
        root,
        target=command,
        target_type="command",
        callback=changed,
        watch_filter=watchfiles.PythonFilter(),
        sigint_timeout=int(grace) + 5,
        debounce=400,
    )
    return 0
