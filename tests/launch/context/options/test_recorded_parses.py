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
    assert outcome(["t.py"], {})["record"] == data["base"], NEW_OPTION
    wrong = []
    for call in data["calls"]:
        expected = {k: v for k, v in call.items() if k not in ("argv", "env")}
        got = compact(outcome(call["argv"], call["env"]), data["base"])
        if _as_mapping(got) != _as_mapping(expected):
            wrong.append(f"{call['argv']} {call['env']}:\n  recorded {expected}\n  now      {got}")
    assert not wrong, f"{len(wrong)} calls differ, e.g.\n" + "\n".join(wrong[:5])


NEW_OPTION = (
    "a new option? record its default and --help: .venv/bin/python "
    "tests/launch/context/options/record_parses.py --new-option (anything else that differs "
    "is a change of behaviour)"
)


def test_help_reads_as_recorded():
    assert help_text() == json.loads(Path(DATA).read_text())["help"], NEW_OPTION


def _as_mapping(result: dict) -> dict:
    """`labels` as the mapping it is (`LaunchOptions.label` reads it as a dict): its pairs
    come in the order the options are read, which was values.CHECKS' and is the option
    table's since the options are declared once; only 8 calls have two labels."""
    record = result.get("record")
    if record is None or "labels" not in record:
        return result
    return {"record": {**record, "labels": dict(map(tuple, record["labels"]))}}
