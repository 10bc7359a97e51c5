"""Modules stay small enough to read whole: under 500 lines each, split by concept when
one grows past that (README's "Architecture" section lists what each one is).

Checked for the runtime (`paddlike.distributed`), the log reader (`paddlike.logs`) and
the launcher (`paddlike.launch`);
the page's script and style are package data (paddlike/logs/page/assets/), not Python.
"""

from __future__ import annotations

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "paddlike"
MAX_LINES = 500
CHECKED = ("distributed", "logs", "launch")


@pytest.mark.parametrize("folder", CHECKED)
def test_every_module_is_under_500_lines(folder: str) -> None:
    too_long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) >= MAX_LINES
    }
    assert not too_long, f"split these by concept: {too_long}"
