"""A rank that fails silently in every round of `--max_restarts`: the launcher, the log
reader and the page all say its log is empty for this run, never quoting the launcher's
own run headers as if they were its output."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from paddlike.logformat import read_run_tail

pytestmark = pytest.mark.timeout(60)

SILENT = "import os, sys\nif os.environ['PADDLE_TRAINER_ID'] == '1':\n    sys.exit(3)\n"
H0 = (
    "==== paddlike run 2026-11-22 11:46:00 job j trainer rank 1 local 1 restart 0: python t.py ===="
)
H1 = H0.replace("restart 0", "restart 1")


@pytest.mark.parametrize(
    ("text", "tail"),
    [
        (f"{H0}\n{H1}\n", []),
        (f"{H0}\nround 0 said this\n{H1}\n", []),
        (f"{H0}\nround 0\n{H1}\nround 1\n", ["round 1"]),
        ("no header (Paddle's launcher)\nlast\n", ["no header (Paddle's launcher)", "last"]),
        ("", []),
    ],
)
def test_the_run_tail_leaves_out_the_header_and_earlier_runs(tmp_path, text, tail):
    (tmp_path / "workerlog.1").write_text(text)
    assert read_run_tail(tmp_path / "workerlog.1", 20) == tail


def _run(*argv: str, cwd) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=45
    )


def test_launcher_reader_and_page_agree_that_the_silent_log_is_empty(tmp_path):
    (tmp_path / "silent.py").write_text(SILENT)
    done = _run("paddlike.launch", "--nproc_per_node", "2", "--max_restarts", "1", "silent.py",
                cwd=tmp_path)  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "  workerlog.1 is empty" in done.stderr.splitlines()
    read = _run("paddlike.logs", "log", cwd=tmp_path)
    assert read.returncode == 3, read.stderr
    assert "  workerlog.1 is empty" in read.stdout.splitlines()
    assert "==== paddlike run" not in read.stdout
    page = _run("paddlike.logs", "log", "--html", "job.html", cwd=tmp_path)
    assert page.returncode == 0, page.stderr  # written; the outcome is the text view's
    html = (tmp_path / "job.html").read_text()
    assert "==== paddlike run" not in html and html.count('"tail":[]') == 2
