"""The page places restart rounds where they began, to the millisecond: the run header
carries milliseconds (older headers, whole seconds, still read), and a failed bar's
mark stands beside its end, not on it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from paddlike.logformat import format_header, parse_header
from paddlike.logs.page.facts import job_facts, run_starts
from paddlike.logs.reader import load

pytestmark = pytest.mark.timeout(60)

# Each run prints when it began (the truth the page is held to), sleeps, and rank 1
# fails in the first two rounds.
ROUNDS = """import os, sys, time
print("began", time.time(), flush=True)
time.sleep(0.4)
if os.environ["PADDLE_TRAINER_ID"] == "1" and int(os.environ["PADDLIKE_RESTART_COUNT"]) < 2:
    sys.exit(3)
"""


def test_the_header_has_milliseconds_and_both_forms_are_read(tmp_path):
    new = format_header(role="trainer", rank=0, local_index=0, job_id="j", restart=1,
                        when=1_800_000_000.25, command="x")  # fmt: skip
    assert re.search(r" \d\d:\d\d:\d\d\.250 job j ", new) and parse_header(new) is not None
    old = re.sub(r"\.250 job", " job", new).replace("restart 1", "restart 0")
    (tmp_path / "workerlog.0").write_text(f"{old}\nout\n{new}\n")
    (t_old, r_old, _), (t_new, r_new, _) = run_starts(tmp_path / "workerlog.0")
    assert (r_old, r_new) == (0, 1) and t_new - t_old == pytest.approx(0.25, abs=1e-6)


def test_three_short_rounds_are_drawn_where_each_began(tmp_path):
    (tmp_path / "rounds.py").write_text(ROUNDS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    done = subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2", "--max_restarts",
         "2", "rounds.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=45,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    began: list[list[float]] = [[], [], []]
    for n in (0, 1):
        text = (tmp_path / "log" / f"workerlog.{n}").read_text()
        for k, t in enumerate(re.findall(r"^began (\S+)$", text, re.M)):
            began[k].append(float(t))
    facts = job_facts(load([tmp_path / "log"]))
    bands = [r["start"] for r in facts["rounds"]]
    assert [r["label"] for r in facts["rounds"]] == ["first run", "restart 1", "restart 2"]
    t0 = facts["t0"]
    for k in (1, 2):  # the header is written just before the worker starts (how long before
        # depends on the machine's load: only the order is the page's to keep)
        assert max(began[k - 1]) - t0 < bands[k] <= min(began[k]) - t0 + 0.01, (bands, began)
