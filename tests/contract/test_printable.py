"""The one rule for printing values from jobs (``jobyard._printable``): every control character
escaped in a visible form, text otherwise untouched; and every logger of the library applies it,
whoever wrote the value a line quotes."""

from __future__ import annotations

import ast
import json
import logging
import unicodedata

import pytest

import jobyard
from jobyard import _printable
from jobyard._printable import json_text, printable
from tests.contract.test_layers import SRC
from tests.e2e.hostile_app import C1, ESCAPES

CONTROLS = "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0)])) + "\u2028\u2029\u202e\u2066"
TEXT = "plain ascii, é, 日本語, emoji 🎉, a\\backslash, ZWJ 👩\u200d💻"


def controls_in(text: str, keep: str = "") -> list[str]:
    return [
        f"U+{ord(c):04X}"
        for c in text
        if c not in keep and (unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in "\u202e\u2066")
    ]


def test_every_control_character_is_escaped_and_text_is_left_alone() -> None:
    assert printable(TEXT) == TEXT and printable(TEXT, multiline=True) == TEXT
    one_line = printable(CONTROLS + "\ud800")
    assert not controls_in(one_line) and "\ud800" not in one_line
    assert one_line.startswith("\\x00\\x01") and "\\n\\x0b\\x0c\\r" in one_line
    assert "\\x1b" in one_line and "\\x7f\\x80" in one_line and "\\x9b" in one_line
    assert "\\u2028\\u2029\\u202e\\u2066\\ud800" in one_line
    # a multi-line section keeps its newlines, and only those
    multi = printable(f"a\n{ESCAPES}\r\nb\tc", multiline=True)
    assert multi == "a\n\\x1b[2J\\x1b[31mX\\x1b]0;pwned\\x07\\r\nb\\tc"
    assert printable(None) == "None" and printable(3) == "3"


def test_json_text_is_exact_json_with_no_control_character() -> None:
    value = {"error": CONTROLS + C1, "text": TEXT, "nested": [ESCAPES, 1, None]}
    out = json_text(value, indent=2)
    assert not controls_in(out, keep="\n")  # indentation's own newlines only
    assert json.loads(out) == value
    assert "日本語" in out and "\\u009b" in out and "\\u001b" in out


def logger_names() -> set[str]:
    """Every logger name the library's source asks for (``logging.getLogger("...")``)."""
    names = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "getLogger"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).startswith("jobyard")
            ):
                names.add(str(node.args[0].value))
    return names


def test_every_logger_of_the_library_is_guarded() -> None:
    found = logger_names()
    assert "jobyard.jobs" in found and "jobyard.worker" in found  # the scan does find them
    assert found <= set(_printable.LOGGERS), found - set(_printable.LOGGERS)


@pytest.mark.parametrize("name", _printable.LOGGERS)
def test_a_log_line_quoting_a_job_value_carries_no_control_character(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # given the library in use (an App guards its loggers)
    jobyard.App("memory://").close()
    caplog.set_level(logging.DEBUG, logger=name)
    log = logging.getLogger(name)
    # when a line quotes a hostile value, as text and in an exception, with a traceback
    try:
        raise RuntimeError(f"bad input {ESCAPES}\nforged line {C1}")
    except RuntimeError as exc:
        log.warning("job %s failed: %s", f"key{ESCAPES}", exc, exc_info=True)
    # then what every handler writes is one line of text, its traceback lines kept
    (record,) = [r for r in caplog.records if r.name == name]
    message = record.getMessage()
    assert not controls_in(message) and "key\\x1b[2J" in message and "\\nforged line" in message
    written = caplog.text
    assert not controls_in(written, keep="\n") and "RuntimeError: bad input \\x1b[2J" in written
    assert "Traceback (most recent call last):\n" in written
