"""The recorded parse_options calls (issue 33): every command line and environment of
recorded_parses.json — the tests' own calls, every spelling and variable of every option
with good and bad values, the other launchers' options, the docs' command lines — still
gives the record, or the error line and exit code, that it gave when recorded (before the
options were declared once). record_parses.py made the file and says how.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.launch.context.options.record_parses import DATA, compact, help_text, outcome

pytestmark = pytest.mark.timeout(300)


def test_every_recorded_call_parses_as_recorded():
    data = json.loads(Path(DATA).read_text())
    assert len(data["calls"]) > 4000
    assert outcome(["t.py"], {})["record"] == data["base"]
    wrong = []
    for call in data["calls"]:
        expected = {k: v for k, v in call.items() if k not in ("argv", "env")}
        got = compact(outcome(call["argv"], call["env"]), data["base"])
        if got != expected:
            wrong.append(f"{call['argv']} {call['env']}:\n  recorded {expected}\n  now      {got}")
    assert not wrong, f"{len(wrong)} calls differ, e.g.\n" + "\n".join(wrong[:5])


def test_help_reads_as_recorded():
    assert help_text() == json.loads(Path(DATA).read_text())["help"]
