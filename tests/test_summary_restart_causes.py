"""After a restart and then success, why the job restarted stays readable: summary.json's
`restart_causes`, the line `paddlike.logs` prints under the node, the page's report."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from paddlike.summary import RunSummary

pytestmark = pytest.mark.timeout(60)

FLAKY = """import os, sys
if os.environ["PADDLE_TRAINER_ID"] == "1" and os.environ["PADDLIKE_RESTART_COUNT"] == "0":
    sys.exit(3)
"""
LINE = "1 restart: trainer rank 1 exited with code 3"


def _run(*argv: str, cwd) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=45
    )


def test_the_cause_of_a_restart_is_kept_after_the_job_succeeds(tmp_path):
    (tmp_path / "flaky.py").write_text(FLAKY)
    done = _run("paddlike.launch", "--nproc_per_node", "2", "--max_restarts", "2", "flaky.py",
                cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "log" / "summary.json").read_text())
    assert (summary["status"], summary["restarts"], summary["root_cause"]) == ("succeeded", 1, None)
    assert summary["restart_causes"] == [
        {"round": 1, "cause": "trainer rank 1 exited with code 3", "error": None}
    ]
    read = _run("paddlike.logs", "log", cwd=tmp_path)
    assert read.returncode == 0, read.stderr
    assert f"  {LINE}" in read.stdout.splitlines()
    as_json = json.loads(_run("paddlike.logs", "log", "--json", cwd=tmp_path).stdout)
    assert as_json["nodes"][0]["restart_causes"] == summary["restart_causes"]
    page = _run("paddlike.logs", "log", "--html", "job.html", cwd=tmp_path)
    assert page.returncode == 0, page.stderr
    assert LINE in (tmp_path / "job.html").read_text()


def test_a_summary_written_before_restart_causes_still_reads():
    old = {"job_id": "j", "mode": "collective", "node_index": 0, "nnodes": 1, "host": "h",
           "hostname": "h", "log_dir": "/l", "start_time": 1.0, "restarts": 1}  # fmt: skip
    assert RunSummary.from_json(old).restart_causes == []
