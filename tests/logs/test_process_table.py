"""The reader's table: why the launcher stopped the processes it stopped ("killed")."""

from __future__ import annotations

import pytest

from paddlike.logs.process_table import killed_because
from paddlike.summary import HANG_EXIT_CODE, RootCause

SIGNAL = RootCause(reason="launcher on nodeb received SIGTERM", node_index=1, signal="SIGTERM")
LOST = RootCause(reason="node 1 (198.18.0.2) stopped sending heartbeats for 10 s", node_index=1)


@pytest.mark.parametrize(
    ("cause", "why"),
    [
        (None, "stopped by the launcher"),
        (
            RootCause(reason="trainer rank 1 exited with code 3", role="trainer", rank=1),
            "stopped by the launcher after another process failed",
        ),
        (SIGNAL, "stopped because the launcher on nodeb received SIGTERM"),
        (
            RootCause(reason="rank 1 never entered collective #4", exit_code=HANG_EXIT_CODE),
            "stopped by the launcher because the job hung (--on_hang abort)",
        ),
        (
            RootCause(reason="rank 1 is stopped", role="trainer", rank=1, exit_code=HANG_EXIT_CODE,
                      stacks="stacks/20261125-215905/summary.txt"),
            "stopped by the launcher because the job hung (--on_hang abort)",
        ),
        (LOST.replace(membership="lost"), "stopped by the launcher when the job's nodes changed"),
        (LOST, "stopped by the launcher because node 1 (198.18.0.2) stopped sending heartbeats "
         "for 10 s"),
    ],
)  # fmt: skip
def test_killed_says_why_from_the_jobs_root_cause(cause, why):
    assert killed_because(cause) == why


def test_a_hang_diagnosis_is_one_line_naming_the_rank_and_its_stacks(tmp_path):
    from paddlike.logs.diagnosed import hang_line, hang_lines

    hang = {
        "time": 1795000000.0,
        "stalled": "no progress for 3 s on any rank",
        "summary": ["rank 2 (vm, workerlog.2) is in `load_batch` at ddp.py:26", "ranks 0–1 ..."],
        "rank": 2,
        "stacks": "stacks/20261127-124121",
    }
    line = hang_line(hang, "log")
    assert line.startswith("hang at ") and line.endswith(
        " (no progress for 3 s on any rank): rank 2 (vm, workerlog.2) is in `load_batch` at "
        "ddp.py:26; stacks in log/stacks/20261127-124121/"
    )
    unwritten = hang_line({**hang, "stacks": None}, "log")
    assert unwritten.endswith("; its stacks could not be written to the log directory")
    many = hang_lines([hang] * 7, "log")
    assert many[0] == "  (2 earlier hangs in summary.json)" and len(many) == 6
