"""The guide builds: ``mkdocs build --strict`` (a broken link or anchor, a page missing from
the nav or a nav entry without its page, a docstring mkdocstrings cannot render fail it), and
every relative link of the README, which MkDocs does not build, names a file that exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ._samples import ROOT

pytest.importorskip("mkdocs", reason="the dev extra installs mkdocs")

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # Never --quiet: it hides warnings from the count that --strict fails on (the build then
    # passes with a broken link; test_a_broken_link_fails_the_build would catch that).
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site),
        ],
        cwd=config.parent,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_guide_builds_in_strict_mode(tmp_path: Path) -> None:
    # when the guide is built as `make docs` builds it
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    # then it built, and the pages are there, the API reference rendered from docstrings
    assert done.returncode == 0, done.stdout + done.stderr
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "configure_queue" in api and "A jobyard application" in api
    for page in ("getting-started", "concepts", "stores/postgresql", "operations/deploy"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    # given the guide's own settings (theme, extensions, validation) on a page with one broken
    # link (without the API reference and the other pages, to keep it quick)
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    config.update(docs_dir="docs", nav=[{"Home": "index.md"}], plugins=["search"])
    config.pop("exclude_docs", None)
    config.pop("hooks", None)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# x\n\n[gone](no-such-page.md)\n")
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    # when it is built as the guide is, then the build fails and names the link
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stdout + done.stderr


def test_every_relative_link_of_the_readme_exists() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [a or b for a, b in _LINK.findall(text)]
    assert len(targets) > 10
    missing = [
        t
        for t in targets
        if "://" not in t and not t.startswith("#") and not (ROOT / t.split("#")[0]).exists()
    ]
    assert not missing, f"README.md links to files that do not exist: {missing}"
