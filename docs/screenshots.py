"""Take the dashboard's screenshots in docs/ (the README shows them).

    .venv/bin/python docs/screenshots.py [--out docs] [--width 1280]

Fills a temporary SQLite store with an orders app (emails, invoices, thumbnails, a group of
resizes joined by a summary, a failing payment job with a traceback, a schedule), runs a worker
in this process, serves the dashboard on a free loopback port and photographs it with Debian's
chromium through Playwright (never a downloaded browser). Also a narrow window (390 px) of the
overview, kept out of docs/ unless --narrow is given.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import jobyard
import jobyard.web

CHROMIUM = "/usr/bin/chromium"


def build_app(url: str) -> tuple[jobyard.App, dict[str, Any]]:
    """The orders app the screenshots show."""
    app = jobyard.App(url)
    gate = threading.Event()

    @app.job(queue="emails")
    def send_confirmation(order_id: int, email: str) -> dict[str, Any]:
        return {"to": email, "message_id": f"order-{order_id}"}

    @app.job(queue="invoices", max_attempts=3, backoff="fixed")
    def charge_card(order_id: int, customer_id: int, amount_cents: int) -> None:
        if order_id % 7 == 0:
            raise ConnectionError("payment gateway timed out after 30.0 s (POST /v1/charges)")
        if order_id % 11 == 0:
            raise ValueError("card declined: insufficient_funds")
        if order_id % 13 == 0:
            raise KeyError("billing_address")

    @app.job(queue="thumbnails")
    def resize(image: str, width: int = 200) -> str:
        ctx = jobyard.current_job()
        for step in range(10):
            ctx.progress(step / 10, f"resized {step} of 10 tiles")
            if gate.wait(0.05 if image.endswith("-fast.jpg") else 3.0):
                break
        return image.replace(".jpg", f"-{width}.jpg")

    @app.job(queue="thumbnails")
    def summarise(paths: list[str]) -> dict[str, int]:
        return {"thumbnails": len(paths)}

    @app.cron("0 9 * * 1-5", timezone="Europe/Berlin", name="daily-report")
    @app.job(queue="reports")
    def daily_report() -> None: ...

    @app.cron(every=300, name="poll-inbox")
    @app.job(queue="emails")
    def poll_inbox() -> None: ...

    return app, {
        "send_confirmation": send_confirmation,
        "charge_card": charge_card,
        "resize": resize,
        "summarise": summarise,
        "gate": gate,
    }


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(asgi: Any) -> tuple[str, Any]:
    """Serve ``asgi`` with uvicorn on a thread; (base URL, the server to stop)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(asgi, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the dashboard did not start")
        time.sleep(0.02)
    return f"http://127.0.0.1:{port}", server


def fill(app: jobyard.App, fns: dict[str, Any]) -> dict[str, str]:
    """Jobs of every kind; the ids worth a picture."""
    fns["send_confirmation"].enqueue_many(
        [((i, f"customer{i}@example.com"), {}) for i in range(1, 240)]
    )
    fns["charge_card"].enqueue_many([((i, 1000 + i % 40, 1999 + i), {}) for i in range(1, 160)])
    flow = jobyard.group(*[fns["resize"].s(f"s3://photos/{i}.jpg") for i in range(6)]).then(
        fns["summarise"].s()
    )
    handle = flow.enqueue()
    fast = jobyard.group(
        *[fns["resize"].s(f"s3://photos/{i}-fast.jpg") for i in range(3)]
    ).then(fns["summarise"].s())
    fast.enqueue()
    app.configure_queue("invoices", max_concurrency=4, max_attempts=3, backoff="fixed")
    fns["send_confirmation"].options(delay=3600).enqueue(999, "later@example.com")
    app.pause_queue("reports")
    return {"workflow_join": handle.ids[-1]}


def main(argv: list[str] | None = None) -> None:
    """Fill a store, serve the dashboard, photograph four pages."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent))
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--narrow", action="store_true", help="Also save overview-narrow.png.")
    args = parser.parse_args(argv)
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import sync_playwright

    out = Path(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        app, fns = build_app(f"sqlite:///{tmp}/orders.db")
        ids = fill(app, fns)
        app.sync_schedules()
        worker = app.worker(concurrency=4, poll_interval=0.1, reap_interval=0.5)
        worker.start()
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                counts = {s.queue: s.counts for s in app.stats()}
                left = counts.get("invoices", {}).get("pending", 1) + counts.get(
                    "emails", {}
                ).get("pending", 1)
                if left <= 1:
                    break
                time.sleep(0.2)
            failed = app.jobs(status="failed", name="charge_card", limit=1)
            base, server = serve(jobyard.web.create_app(app))
            try:
                with sync_playwright() as p:
                    browser = p.chromium.launch(executable_path=CHROMIUM)
                    page = browser.new_page(viewport={"width": args.width, "height": 900})
                    shots = [
                        ("overview.png", "/"),
                        ("failed-job.png", f"/jobs/{failed[0].id}" if failed else "/jobs"),
                        ("dead-letter.png", "/dead"),
                        ("workflow.png", f"/jobs/{ids['workflow_join']}"),
                    ]
                    for name, path in shots:
                        page.goto(base + path)
                        page.screenshot(path=str(out / name), full_page=True)
                        print(f"saved {out / name}")
                    if args.narrow:
                        narrow = browser.new_page(viewport={"width": 390, "height": 844})
                        narrow.goto(base + "/")
                        narrow.screenshot(path=str(out / "overview-narrow.png"), full_page=True)
                        print(f"saved {out / 'overview-narrow.png'}")
                    browser.close()
            finally:
                server.should_exit = True
        finally:
            fns["gate"].set()
            worker.stop(grace=5)
            app.close()


if __name__ == "__main__":
    main()
