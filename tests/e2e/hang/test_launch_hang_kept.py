"""A hang that `--hang_timeout` diagnosed (`--on_hang dump`) is not forgotten when the job
is then interrupted (Ctrl-C to the launcher): summary.json keeps the diagnosis,
`python -m paddlike.logs` names the hung rank and points to its stacks, and the page
marks each rank's last collective (torch's flight record), the rank that skipped one
first. A real torch gloo job of 3 ranks whose rank 1 skips an all_reduce."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.summary import read_summary
from tests.support.hang_workers.running import REPO, logs, running_job, wait_until

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed"
)
HOST = os.uname().nodename
NAMED = (
    f"rank 1 ({HOST}, workerlog.1) entered barrier as #4 (default group); "
    "ranks 0, 2 are in all_reduce #4"
)


def diagnosed(log: Path):
    def check() -> bool:
        summary = read_summary(log)
        return summary is not None and bool(summary.hangs)

    return check


def reader(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "paddlike.logs", *args],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def page_facts(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="facts">(.*?)</script>', page, re.S)
    assert match, "the page carries its facts"
    return json.loads(match.group(1))


@needs_torch
@pytest.mark.timeout(180)
def test_a_diagnosed_hang_outlives_ctrl_c_in_the_summary_the_reader_and_the_page(tmp_path):
    out, log = tmp_path / "out", tmp_path / "log"
    out.mkdir()
    env = {"PADDLIKE_HANG_TIMEOUT": "3"}  # --on_hang dump (the default): the job goes on
    with running_job(tmp_path, "torch_skip.py", str(out), "3", nproc=3, env=env) as job:
        wait_until("the hang is diagnosed", diagnosed(log), job, tmp_path)
        job.send_signal(signal.SIGINT)
        console = job.communicate(timeout=60)[0]
    assert job.returncode == 130, console + logs(tmp_path)

    summary = json.loads((log / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    (hang,) = summary["hangs"]
    assert (hang["rank"], hang["summary"][0]) == (1, NAMED), hang
    assert (log / hang["stacks"] / "summary.txt").is_file()

    read = reader(str(log))
    assert read.returncode == 130, read.stderr
    (line,) = [x for x in read.stdout.splitlines() if x.startswith("  hang at ")]
    assert f": {NAMED}; stacks in {log / hang['stacks']}{os.sep}" in line, read.stdout
    as_json = json.loads(reader(str(log), "--json").stdout)
    assert as_json["nodes"][0]["hangs"] == summary["hangs"]

    target = tmp_path / "job.html"
    assert reader(str(log), "--html", str(target)).returncode == 0
    facts = page_facts(target.read_text())
    assert "hang at " in facts["report"] and NAMED in facts["report"]
    last = {p["rank"]: p["last"] for p in facts["procs"]}
    assert [last[r]["what"] for r in range(3)] == [
        "all_reduce #4 (running)", "barrier #4 (running)", "all_reduce #4 (running)"
    ]  # fmt: skip
    assert all(last[r]["t"] is not None and last[r]["t"] > 0 for r in range(3)), last
    assert [r for r in range(3) if last[r].get("first")] == [1]
