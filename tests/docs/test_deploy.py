"""The deployment recipes of deploy/ (shown in docs/operations/deploy.md) are checked here as
far as this machine allows: every command they run is a real ``jobyard`` command whose
arguments the CLI accepts; every stop timeout outlasts the worker's ``--grace``; the systemd
unit passes ``systemd-analyze verify``; the Kubernetes manifests parse, and KEDA scales a
Deployment they define; and the worker command of the unit, run for real, drains on SIGTERM.

There is no Docker daemon here (the client alone is installed), so the Dockerfile is not built:
its instructions are parsed and checked instead."""

from __future__ import annotations

import configparser
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

import jobyard
from jobyard.cli import DURATION, cli
from tests.conftest import wait_until

from ._samples import ROOT

yaml = pytest.importorskip("yaml", reason="the dev extra installs pyyaml")

DEPLOY = ROOT / "deploy"
MARGIN = 5.0  # seconds a stop timeout must leave past --grace for the release itself
QUEUE_AGE = "jobyard_queue_oldest_pending_age_seconds"  # the gauge KEDA scales on (issue 19)


def parse_command(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """The jobyard command ``argv`` runs and its parsed parameters, as the CLI would parse
    them (click raises on an unknown command, option or a bad value)."""
    assert argv and argv[0] == "jobyard", f"not a jobyard command: {argv}"
    command = cli.commands.get(argv[1])
    assert command is not None, f"no command `jobyard {argv[1]}`"
    ctx = command.make_context(argv[1], list(argv[2:]))
    return argv[1], dict(ctx.params)


def grace_of(params: dict[str, Any]) -> float:
    return float(params["grace"])


# --- Dockerfile -----------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/docker/Dockerfile, continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in (DEPLOY / "docker" / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def test_the_dockerfile_runs_a_real_worker_command_as_pid_1() -> None:
    steps = dockerfile()
    kinds = [k for k, _ in steps]
    known = {"FROM", "ENV", "RUN", "WORKDIR", "COPY", "USER", "STOPSIGNAL", "ENTRYPOINT", "CMD"}
    assert kinds[0] == "FROM" and set(kinds) <= known, kinds
    # a Python jobyard supports
    image = dict(steps)["FROM"]
    assert image.startswith("python:3.")
    assert int(image.split(":3.")[1].split("-")[0].split(".")[0]) >= 11, image
    # exec form for both, so jobyard is PID 1 and gets SIGTERM itself
    entry, cmd = json.loads(dict(steps)["ENTRYPOINT"]), json.loads(dict(steps)["CMD"])
    name, params = parse_command([*entry, *cmd])
    assert name == "worker" and params["app_ref"] == "shop.tasks:app"
    assert dict(steps)["STOPSIGNAL"] == "SIGTERM"
    # not root, and the user it names is the one the Kubernetes manifests run as
    user = dict(steps)["USER"]
    assert user not in ("root", "0") and user == "10001"


def test_the_dockerfile_installs_extras_that_exist() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    installs = [args for kind, args in dockerfile() if kind == "RUN" and "pip install" in args]
    assert installs
    for args in installs:
        for word in shlex.split(args):
            if word.startswith("jobyard["):
                wanted = word.removeprefix("jobyard[").rstrip("]").split(",")
                assert set(wanted) <= set(extras), f"unknown extra in {word}"
    copied = [args.split()[0] for kind, args in dockerfile() if kind == "COPY"]
    assert "requirements.txt" in copied  # the -r file is copied before it is installed


# --- systemd --------------------------------------------------------------------------------

UNIT = DEPLOY / "systemd" / "jobyard-worker@.service"


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text(encoding="utf-8"))
    return parser


def unit_command(instance: str = "emails") -> list[str]:
    argv = shlex.split(unit()["Service"]["ExecStart"].replace("%i", instance))
    assert Path(argv[0]).name == "jobyard"
    return ["jobyard", *argv[1:]]


def test_the_unit_stops_gracefully_within_its_timeout() -> None:
    service = unit()["Service"]
    name, params = parse_command(unit_command())
    assert name == "worker" and params["queues"] == ("emails",)
    assert service["KillSignal"] == "SIGTERM"
    # mixed: SIGTERM to the main process only (a --processes child signalled twice stops now)
    assert service["KillMode"] == "mixed"
    timeout = DURATION.convert(service["TimeoutStopSec"], None, None)
    assert timeout >= grace_of(params) + MARGIN, (timeout, grace_of(params))


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    # given the unit as an instance, pointing at this venv's jobyard (verify checks that the
    # command exists) and without the User/Group/EnvironmentFile of the target host
    text = UNIT.read_text(encoding="utf-8").replace(
        "/opt/shop/venv/bin/jobyard", str(Path(sys.executable).with_name("jobyard"))
    )
    kept = [
        line
        for line in text.splitlines()
        if not line.startswith(("User=", "Group=", "EnvironmentFile=", "WorkingDirectory="))
    ]
    instance = tmp_path / "jobyard-worker@emails.service"
    instance.write_text("\n".join(kept) + "\n", encoding="utf-8")
    # when systemd checks it, then it has nothing to say
    done = subprocess.run(
        ["systemd-analyze", "verify", str(instance)], capture_output=True, text=True, timeout=60
    )
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if instance.name in ln]
    assert done.returncode == 0 and not lines, done.stdout + done.stderr


def _shop(tmp_path: Path) -> str:
    """An app with a slow job in queue emails, importable from ``tmp_path``; its store URL.
    The job touches ``started`` when its handler begins (a claimed job may still wait in a
    worker's buffer, and a stop hands such a job back instead of running it)."""
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").touch()
    (tmp_path / "shop" / "tasks.py").write_text(
        "import pathlib, time\nimport jobyard\napp = jobyard.App()\n\n"
        "@app.job(queue='emails')\ndef slow(seconds: float) -> str:\n"
        f"    pathlib.Path({str(tmp_path / 'started')!r}).touch()\n"
        "    time.sleep(seconds)\n    return 'done'\n",
        encoding="utf-8",
    )
    return f"sqlite:///{tmp_path}/jobyard.db"


def _stop_while_running(tmp_path: Path, url: str, argv: list[str]) -> tuple[int, jobyard.Job]:
    """Run ``argv`` (a jobyard command) with a 1.5 s job, SIGTERM its main process once the
    handler runs (as KillMode=mixed, docker stop and the kubelet do), and return its exit code
    and the job after."""
    app = jobyard.App(url)
    handle = app.by_name("slow", queue="emails").enqueue(1.5)
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("jobyard")), *argv[1:]],
        cwd=tmp_path,
        env={**os.environ, "JOBYARD_URL": url, "PYTHONPATH": str(tmp_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until((tmp_path / "started").exists, timeout=30, what="the handler to start")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=grace_of(parse_command(argv)[1]))
        return code, app.get(handle.id)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        app.close()


def test_the_units_worker_command_drains_on_sigterm(tmp_path: Path) -> None:
    # given the unit's own command, run here on an SQLite store, with a job running
    url = _shop(tmp_path)
    # when systemd stops it (KillSignal=SIGTERM to the main process)
    code, job = _stop_while_running(tmp_path, url, unit_command("emails"))
    # then it let the running job finish, and exited cleanly well within TimeoutStopSec
    assert code == 0 and job.status == "completed", (code, job.status)


def test_worker_processes_drain_when_the_main_process_is_signalled(tmp_path: Path) -> None:
    # given the unit's command with --processes 2 (as the thumbnails pool runs it)
    url = _shop(tmp_path)
    # when only the main process gets SIGTERM (KillMode=mixed; the kubelet; docker stop)
    code, job = _stop_while_running(tmp_path, url, [*unit_command("emails"), "--processes", "2"])
    # then it passes the signal on once and the child lets its job finish
    assert code == 0 and job.status == "completed", (code, job.status)


# --- Kubernetes -----------------------------------------------------------------------------


def manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return docs


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"]
    return list(spec["containers"])


def container_command(c: dict[str, Any]) -> list[str]:
    """What the container runs: its command, else the image's ENTRYPOINT, then its args."""
    entry = c.get("command") or json.loads(dict(dockerfile())["ENTRYPOINT"])
    return [*entry, *c.get("args", [])]


def test_every_container_runs_a_real_jobyard_command() -> None:
    runs = [
        container_command(c)
        for d in manifests()
        if "template" in d.get("spec", {})
        for c in containers(d)
    ]
    names = sorted(parse_command(argv)[0] for argv in runs)
    assert names == ["dashboard", "migrate", "worker", "worker", "worker"]


def test_every_worker_pool_drains_within_its_termination_grace() -> None:
    pools = [d for d in manifests() if d["kind"] == "Deployment"]
    served: list[str] = []
    for d in pools:
        spec = d["spec"]["template"]["spec"]
        period = float(spec["terminationGracePeriodSeconds"])
        for c in containers(d):
            name, params = parse_command(container_command(c))
            pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
            # a preStop runs inside the same grace period: only a sleep, and counted
            pause = float(pre[1]) if pre[:1] == ["sleep"] else 0.0
            assert not pre or pre[0] == "sleep", pre
            if name == "worker":
                assert not pre, f"{d['metadata']['name']}: a worker needs no preStop"
                assert period >= grace_of(params) + MARGIN, (d["metadata"]["name"], period)
                served += params["queues"]
            else:
                assert period >= pause + MARGIN, d["metadata"]["name"]
    # several pools, each with queues of its own
    assert len([q for q in served]) == len(set(served)) >= 3, served


def test_keda_scales_a_worker_pool_on_the_queue_age() -> None:
    docs = manifests()
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    scaled = [d for d in docs if d["kind"] == "ScaledObject"]
    assert scaled
    for s in scaled:
        assert s["apiVersion"].startswith("keda.sh/")
        target = deployments[s["spec"]["scaleTargetRef"]["name"]]
        (worker,) = containers(target)
        _, params = parse_command(container_command(worker))
        assert 1 <= s["spec"]["minReplicaCount"] <= s["spec"]["maxReplicaCount"]
        for trigger in s["spec"]["triggers"]:
            assert trigger["type"] == "prometheus"
            query = trigger["metadata"]["query"]
            assert QUEUE_AGE in query and float(trigger["metadata"]["threshold"]) > 0
            # it watches the queues that pool serves
            assert all(q in query for q in params["queues"]), (query, params["queues"])


def test_parse_command_refuses_what_the_cli_refuses() -> None:
    with pytest.raises(click.UsageError):
        parse_command(["jobyard", "worker", "shop.tasks:app", "--gracee", "30"])
    with pytest.raises(click.BadParameter):
        parse_command(["jobyard", "worker", "shop.tasks:app", "--grace", "soon"])
