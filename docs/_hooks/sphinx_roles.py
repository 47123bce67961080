"""MkDocs hook: the docstrings use Sphinx roles (``:class:`jobyard.Job```), which Markdown
renders as the role's name before the code span; drop the role and keep the code."""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|meth|attr|func|mod|data|exc|obj):(?=<code>)")


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub("", html)
