"""The log directory's formats (paddlike/logformat.py): what the launcher writes, the
reader reads back; and the reader never needs the launcher to do it."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from paddlike import logformat
from paddlike.logformat import (
    HEADER_PREFIX,
    endpoints_text,
    format_header,
    last_run_header,
    last_run_start,
    match_log_name,
    parse_endpoints,
    read_owner,
    read_tail,
    write_owner,
)

PACKAGE = Path(logformat.__file__).resolve().parent


@pytest.mark.parametrize(
    ("extra", "facts"),
    [
        ({}, {"round": None, "stage": None}),
        ({"round_": 3}, {"round": "3", "stage": None}),
        ({"stage": "2"}, {"round": None, "stage": "2"}),
    ],
)
def test_a_run_header_reads_back_as_the_facts_it_was_written_with(extra, facts):
    line = format_header(
        role="heter", rank=4, local_index=1, job_id="job-x", restart=2, when=0.0,
        command="python -u train.py --lr 0.1", **extra,
    )  # fmt: skip
    assert line.startswith(HEADER_PREFIX) and line.endswith(": python -u train.py --lr 0.1 ====")
    parsed = logformat.parse_header(line)
    assert parsed is not None
    assert parsed.groupdict() == {
        "job": "job-x", "role": "heter", "rank": "4", "local": "1", "restart": "2", **facts,
    }  # fmt: skip
    assert logformat.parse_header("epoch 1 " + line) is None


def test_the_last_run_of_a_log_starts_at_its_last_header(tmp_path):
    log = tmp_path / "workerlog.0"
    first = format_header(role="trainer", rank=0, local_index=0, job_id="a", restart=0,
                          when=0.0, command="x")  # fmt: skip
    second = first.replace("restart 0", "restart 1")
    log.write_text(f"{first}\nold error\n{second}\nnew 1\nnew 2\n")
    start = last_run_start(log)
    assert log.read_bytes()[start:].startswith(second.encode())
    assert last_run_header(log).group("restart") == "1"
    assert read_tail(log, 5, start=start) == [second, "new 1", "new 2"]
    assert read_tail(log, 1) == ["new 2"]
    assert last_run_start(tmp_path / "missing") == 0 and read_tail(tmp_path / "missing") == []


def test_the_owner_file_reads_back_and_a_missing_one_is_none(tmp_path):
    assert read_owner(tmp_path) is None
    owner = logformat.owner_record("198.18.0.1", "key", "job j")
    write_owner(tmp_path, owner)
    assert read_owner(tmp_path) == owner
    assert owner["pid"] == os.getpid() and owner["job"] == "key"
    assert sorted(p.name for p in tmp_path.iterdir()) == [logformat.OWNER_FILE]


def test_endpoints_and_log_names_read_back():
    text = endpoints_text(["a:1", "a:2"], ["a:9"])
    assert parse_endpoints("# paddlike round 2: 1 node a\n" + text) == {
        "PADDLE_TRAINER_ENDPOINTS": ["a:1", "a:2"],
        "PADDLE_PSERVERS_IP_PORT_LIST": ["a:9"],
    }
    assert match_log_name("serverlog.12").groups() == ("serverlog", "12")
    assert match_log_name("workerlog.0.err") is None


def test_the_reader_imports_nothing_of_the_launcher():
    found = []
    for path in [*sorted((PACKAGE / "logs").rglob("*.py")), PACKAGE / "logformat.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            found += [f"{path.name}: {n}" for n in names if n.startswith("paddlike.launch")]
    assert found == []
