"""SIGTERM to the one-command starter (`--hostfile`, over real ssh) is a preemption notice
for the whole job (issue 34): every host's launcher gets it, every rank saves the same step
(`should_stop`), and the job ends 143."""

from __future__ import annotations

import re
import signal

import pytest

from tests.e2e.cluster.test_ending import start, term_site, wait_running

pytestmark = pytest.mark.timeout(180)

# A worker that saves at the job's stop step; "RANK" once its first should_stop call armed
# it (a SIGTERM before that would end it as any script).
SAVER = """
import os, time
import paddlike.distributed as dist
rank = int(os.environ["PADDLE_TRAINER_ID"])
for step in range(10**9):
    time.sleep(0.02)
    if dist.should_stop(step):
        print("saved", rank, "step", step, flush=True)
        break
    if step == 0:
        print("RANK", rank, "x", "0", flush=True)
"""


def test_sigterm_to_the_starter_makes_every_rank_on_every_host_save_one_step(tmp_path) -> None:
    with term_site(tmp_path) as (s, tmp, env):
        s.worker.write_text(SAVER)
        proc = start(s, env)
        wait_running(proc, s.tmp / "log")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
        text = (out + err).decode()
        logs = "".join(p.read_text() for p in (s.tmp / "log").rglob("workerlog.*"))
        steps = {int(r): int(k) for r, k in re.findall(r"^saved (\d+) step (\d+)$", logs, re.M)}
        assert sorted(steps) == [0, 1, 2, 3, 4, 5], text
        assert len(set(steps.values())) == 1, steps
        assert proc.returncode == 143, text
        assert text.count("preemption notice: SIGTERM on node ") == 3, text
        assert list(tmp.iterdir()) == [] and s.leftovers() == {}
