"""The reader's table: why the launcher stopped the processes it stopped ("killed")."""

from __future__ import annotations

import pytest

from paddlike.logs.table import killed_because
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
