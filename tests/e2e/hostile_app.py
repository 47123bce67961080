"""Jobs whose values carry terminal escapes and rich markup, as an attacker's input would: the
app ``tests/e2e/test_cli_hostile.py`` drives, as ``tests.e2e.hostile_app:app`` on
``$JOBYARD_URL`` (worker processes) or, in the test's own process, as
``tests.e2e.hostile_app:current`` (any store, ``memory://`` included)."""

from __future__ import annotations

import jobyard

# Clear the screen, turn red, retitle the window (OSC, ended by BEL), then a C1 CSI (U+009B).
ESCAPES = "\x1b[2J\x1b[31mX\x1b]0;pwned\x07"
C1 = "\x9b2J"
MARKUP = "[bold red]x[/] [link=https://evil.example]y[/link] :warning:"
HOSTILE = f"{ESCAPES} {MARKUP} {C1}"


def declare(app: jobyard.App) -> jobyard.App:
    """Declare the jobs on ``app``."""

    @app.job(queue="hostile", max_attempts=1)
    def boom(text: str = HOSTILE) -> None:
        """Fail quoting its input, over two lines, as error messages often do."""
        raise RuntimeError(f"bad input {text}\nsecond line {ESCAPES}")

    @app.job(queue="hostile")
    def echo(text: str) -> str:
        """Return its input: a hostile result."""
        return text

    return app


app = declare(jobyard.App())
current: jobyard.App | None = None  # the test's own App, for the CLI run in the test's process
