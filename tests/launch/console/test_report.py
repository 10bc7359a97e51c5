"""The launcher's last words on a round (launch/console/report.py): a failure that a
restart round follows is one line, the full report is kept for the failure that ends
the job, and a launcher stopped by a signal says STOPPED, not FAILED."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from paddlike.launch.console.output import Console
from paddlike.launch.console.report import report_failure
from paddlike.launch.plan.next_round import may_restart
from paddlike.summary import RootCause

FLAKY = """\
import os, sys
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"rank {os.environ['RANK']} restart {restart}", flush=True)
if os.environ["RANK"] == "1" and restart < int(sys.argv[1]):
    raise ValueError(f"bad batch in restart {restart}")
"""

CAUSE = RootCause(
    reason="trainer rank 1 exited with code 1",
    host="127.0.0.1",
    node_index=0,
    role="trainer",
    rank=1,
    local_index=1,
    exit_code=1,
    log_file="workerlog.1",
    tail=["Traceback (most recent call last):", "ValueError: bad batch in restart 0"],
)


def said(cause: RootCause, **kw: bool) -> str:
    err = io.StringIO()
    report_failure(Console(err), cause, "log", **kw)
    return err.getvalue()


def test_a_failure_with_restarts_left_is_one_line_and_the_last_one_the_full_report():
    assert said(CAUSE, restarts_left=True) == (
        "paddlike.launch: trainer rank 1 exited with code 1: ValueError: bad batch in "
        "restart 0 (log log/workerlog.1)\n"
    )
    assert said(CAUSE).startswith("FAILED: trainer rank 1 exited with code 1\n  where ")
    stopped = RootCause(reason="launcher on 127.0.0.1 received SIGINT", signal="SIGINT")
    left = may_restart(stopped, 0, 3)  # the one restart rule: a launcher's signal is not
    assert said(stopped, restarts_left=left).startswith("STOPPED: launcher on 127.0.0.1")


def test_another_nodes_stop_is_a_stop_and_its_failure_a_failure():
    from paddlike.launch.console.report import report_remote_failure

    stop = RootCause(reason="launcher on 198.18.0.2 received SIGTERM", signal="SIGTERM")
    for cause, line in [
        (stop, "the job was stopped on another node: launcher on 198.18.0.2 received SIGTERM"),
        (CAUSE.replace(log_file=None, tail=[]), "the job failed on another node: " + CAUSE.reason),
    ]:
        err = io.StringIO()
        report_remote_failure(Console(err), cause)
        assert err.getvalue() == f"paddlike.launch: {line}\n"


def launch(tmp_path: Path, max_restarts: int, fails: int) -> subprocess.CompletedProcess[str]:
    """Two workers; rank 1 fails in its first `fails` rounds."""
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLIKE_")}
    options = ["--nproc_per_node", "2", "--max_restarts", str(max_restarts), "--tee", "none"]
    argv = [*options, "--log_dir", str(tmp_path / "log"), str(script), str(fails)]
    return subprocess.run(
        [sys.executable, "-m", "paddlike.launch", *argv],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        check=False,
    )


def test_restarts_print_one_line_each_and_the_job_ends_ok(tmp_path):
    done = launch(tmp_path, max_restarts=2, fails=2)
    assert done.returncode == 0, done.stderr
    assert "FAILED" not in done.stderr, done.stderr
    log1 = tmp_path / "log" / "workerlog.1"
    lines = done.stderr.splitlines()
    lines = lines[next(i for i, ln in enumerate(lines) if "devices:" in ln) + 1 :]
    lines = [ln for ln in lines if ": stopping 1 other process" not in ln]  # rank 0 may run
    assert lines[:-1] == [
        "paddlike.launch: trainer rank 1 exited with code 1: ValueError: bad batch in "
        f"restart 0 (log {log1})",
        "paddlike.launch: restart 1 of 2 after: trainer rank 1 exited with code 1",
        "paddlike.launch: trainer rank 1 exited with code 1: ValueError: bad batch in "
        f"restart 1 (log {log1})",
        "paddlike.launch: restart 2 of 2 after: trainer rank 1 exited with code 1",
    ], done.stderr
    # the whole job's time, and the last round's (issue 32)
    ok = re.fullmatch(
        r"OK: 2 workers finished in ([\d.]+) s \(after 2 restarts, the last round ([\d.]+) s\), "
        rf"logs in {re.escape(str(tmp_path / 'log'))}",
        lines[-1],
    )
    assert ok is not None, lines[-1]
    assert float(ok.group(1)) > float(ok.group(2))


def test_the_failure_that_ends_the_job_gets_the_full_report(tmp_path):
    done = launch(tmp_path, max_restarts=1, fails=5)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("FAILED: trainer rank 1 exited with code 1\n") == 1, done.stderr
    full = done.stderr.index("FAILED:")
    assert done.stderr.index("restart 1 of 1 after:") < full
    assert "    | ValueError: bad batch in restart 1" in done.stderr[full:]
