"""``python manage.py jobyard_worker [--backend ALIAS] [jobyard worker's options]``."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand

from ..._backend import ALIAS_VARIABLE

WORKER_APP = "jobyard.django.worker:app"


class Command(BaseCommand):  # type: ignore[misc]
    """Run a jobyard worker for the project's tasks: ``jobyard worker``'s options, as given
    (``--help`` lists them), plus ``--backend ALIAS`` (the TASKS entry, ``default``)."""

    help = "Run a jobyard worker for this project's tasks (the options of `jobyard worker`)."

    def run_from_argv(self, argv: list[str]) -> None:
        # The options are jobyard worker's own (click), handed over untouched, so they are the
        # same flags by construction. Read here: --backend, and Django's --settings and
        # --pythonpath (manage.py has applied them already).
        rest: list[str] = []
        alias = "default"
        args = iter(argv[2:])
        for arg in args:
            name, eq, value = arg.partition("=")
            if name in ("--backend", "--settings", "--pythonpath"):
                value = value if eq else next(args, "")
                if name == "--backend":
                    alias = value
                continue
            rest.append(arg)
        self.execute_worker(alias, rest)

    def handle(self, *args: Any, **options: Any) -> None:  # call_command("jobyard_worker")
        self.execute_worker("default", [])

    def execute_worker(self, alias: str, args: list[str]) -> None:
        """Run ``jobyard worker jobyard.django.worker:app ARGS`` in this process."""
        from jobyard.cli import main

        # Child processes (--processes, --reload) set Django up from the same variables.
        os.environ[ALIAS_VARIABLE] = alias
        # --reload watches the project (where manage.py runs), not jobyard's own package.
        os.environ.setdefault("JOBYARD_RELOAD_ROOT", os.getcwd())
        if not any(_names_queue(a) for a in args):
            # Default: the backend's QUEUES (Django refuses a task on any other), else every
            # queue the project's tasks name.
            args = [f"--queue={q}" for q in default_queues(alias)] + args
        main(["worker", WORKER_APP, *args])


def _names_queue(arg: str) -> bool:
    return arg in ("-q", "--queue") or arg.startswith(("--queue=", "-q"))


def default_queues(alias: str) -> list[str]:
    """The queues a worker of backend ``alias`` takes when told none."""
    from ..._compat import task_backends
    from ...worker import backend_app

    app = backend_app(alias)

    configured = sorted(task_backends[alias].queues)
    return configured or sorted({jf.opts.queue for jf in app.registry.values()}) or ["default"]
