"""The job page says what the pre-flight check found (issue 35), in the reader's words."""

from __future__ import annotations

import socket
from pathlib import Path

from paddlike.logs.page.facts import job_facts
from paddlike.logs.reader import load
from paddlike.summary import ProcessRecord, RunSummary, write_summary
from tests.launch.health.test_summary_rounds import check


def test_the_page_report_names_the_node_the_check_left_out(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.mkdir()
    (log / "workerlog.0").write_text("step 1\n")
    record = ProcessRecord("trainer", 0, 0, "198.18.0.1", "workerlog.0", pid=1, status="ok")
    write_summary(
        log,
        RunSummary(
            job_id="job-p", mode="collective", node_index=0, nnodes=3, host="198.18.0.1",
            hostname=socket.gethostname(), log_dir=str(log), start_time=1.0, end_time=2.0,
            status="succeeded", exit_code=0, processes=[record], preflight=check(0, False),
        ),
    )  # fmt: skip
    report = job_facts(load([log]))["report"].splitlines()
    assert "pre-flight check, round 0 (0.50 s): failed" in report, report
    assert "  node 3 (198.18.0.4): 1.6 MB/s to node 2, median 379 MB/s" in report, report
