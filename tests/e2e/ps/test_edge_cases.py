"""Parameter-server edge cases, through the real launcher: `assign` by worker 0,
trainers that end without stop_worker(), a declaration mismatch, and a failing server's own
exit code. Worker scripts are written into the test's directory."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.support.ps_workers.cluster import launch_ps, logs_of

ASSIGN = """
    import sys
    import numpy as np
    from paddlike.distributed import ps
    ps.init()
    if ps.is_server():
        ps.run_server()
        sys.exit(0)
    ps.init_worker(mode="sync")
    tid = ps.trainer_id()
    w = ps.dense_table("w", shape=(3, 5), optimizer=ps.SGD(lr=1.0))
    if tid == 0:
        w.assign(np.arange(15, dtype=np.float32).reshape(3, 5))
        try:
            w.assign(np.zeros(4))
        except ValueError as exc:
            print("wrong assign:", exc, flush=True)
    ps.barrier_worker()
    print("pulled", w.pull().ravel().tolist(), flush=True)
    w.push(np.full((3, 5), tid + 1.0, np.float32))  # sync: the mean, 1.5, is applied
    print("after push", w.pull().ravel().tolist(), flush=True)
    try:
        ps.dense_table("w", shape=(4,))
    except ps.PsError as exc:
        print("mismatch:", exc, flush=True)
    sys.exit(0)  # no stop_worker(): the launcher still has to stop the servers
"""


def test_assign_by_worker_0_is_what_every_worker_pulls_and_the_job_ends_without_stop_worker(
    tmp_path: Path,
) -> None:
    script = tmp_path / "assign.py"
    script.write_text(textwrap.dedent(ASSIGN))
    done = launch_ps(tmp_path, script, servers=2, workers=2, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr + logs_of(tmp_path)
    start = [float(v) for v in range(15)]
    for tid in (0, 1):
        text = (tmp_path / "log" / f"workerlog.{tid}").read_text()
        assert f"pulled {start}" in text, text
        assert f"after push {[v - 1.5 for v in start]}" in text, text
        assert "mismatch:" in text and "shape=(3, 5)" in text and "shape=(4,)" in text, text
    assert "wrong assign: table 'w'" in (tmp_path / "log" / "workerlog.0").read_text()
    summary = json.loads((tmp_path / "log" / "summary.json").read_text())
    codes = sorted((p["role"], p["rank"], p["exit_code"]) for p in summary["processes"])
    assert codes == [("server", 0, 0), ("server", 1, 0), ("trainer", 0, 0), ("trainer", 1, 0)]


SERVER_FAILS = """
    import sys, time
    import numpy as np
    from paddlike.distributed import ps
    ps.init()
    if ps.is_server():
        if ps._role().server_index == 1:
            sys.exit(5)
        ps.run_server()
        sys.exit(0)
    ps.init_worker(mode="sync", timeout=30)
    w = ps.dense_table("w", shape=(8,))
    while True:  # ends when the launcher tears the job down
        w.push(np.ones(8, np.float32))
        w.pull()
"""


def test_a_server_that_exits_5_ends_the_job_with_code_5_and_names_it(tmp_path: Path) -> None:
    script = tmp_path / "server_fails.py"
    script.write_text(textwrap.dedent(SERVER_FAILS))
    done = launch_ps(tmp_path, script, servers=2, workers=2, timeout=60)
    assert done.returncode == 5, done.stdout + done.stderr + logs_of(tmp_path)
    assert "server rank 1 exited with code 5" in done.stdout + done.stderr
