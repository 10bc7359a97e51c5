"""Hung jobs under the real launcher, diagnosed with `python -m paddlike.logs DIR --stacks`:
a torch gloo rank stuck in `load_batch`, mismatched and skipped collectives in paddlike's
runtime named from the flight record, and a straggler found from heartbeat counters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.distributed import progress
from paddlike.logs.hang import find_stragglers
from paddlike.logs.stacks import find_py_spy
from tests.support.hang_workers.running import REPO, all_blocked, logs, running_job, wait_until

needs_py_spy = pytest.mark.skipif(
    find_py_spy() is None, reason="py-spy is not installed (pip install py-spy)"
)


def stacks(log_dir: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "paddlike.logs", str(log_dir), "--stacks"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def ready(out: Path, n: int):
    return lambda: all((out / f"ready.{r}").exists() for r in range(n))


def dump_dir(log_dir: Path) -> Path:
    (only,) = (log_dir / "stacks").iterdir()
    return only


@needs_py_spy
@pytest.mark.timeout(120)
def test_stacks_of_a_torch_job_name_the_rank_stuck_in_load_batch_first(tmp_path):
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    out = tmp_path / "out"
    out.mkdir()
    with running_job(tmp_path, "torch_load_batch.py", str(out), nproc=4) as job:
        wait_until("every rank is about to block", ready(out, 4), job, tmp_path)
        wait_until("every rank blocks", all_blocked(tmp_path / "log"), job, tmp_path)
        run = stacks(tmp_path / "log")
    assert run.returncode == 0, run.stderr + logs(tmp_path)
    lines = run.stdout.splitlines()
    host = os.uname().nodename
    assert lines[0] == f"rank 3 ({host}, workerlog.3) is in `load_batch` at torch_load_batch.py:14"
    assert lines[1] == (
        "ranks 0–2 (3 of 4) wait in `all_reduce` called from torch_load_batch.py:26 (main)"
    )
    # torch's flight recorder is on by default (--straggler_check's probe): it says why too
    assert lines[2] == (
        "rank 3 never entered collective #1 (all_reduce, which ranks 0–2 are waiting in); "
        "rank 3 entered none of them"
    )
    written = dump_dir(tmp_path / "log")
    assert lines[3] == f"stacks of 4 ranks in {written}"
    names = sorted(p.name for p in written.iterdir())
    assert names == ["rank.0.txt", "rank.1.txt", "rank.2.txt", "rank.3.txt", "stacks.json",
                     "summary.txt"]  # fmt: skip
    assert "load_batch (" in (written / "rank.3.txt").read_text()
    assert "all_reduce (" in (written / "rank.0.txt").read_text()


def test_a_mismatched_collective_is_named_from_the_flight_record_after_the_job_failed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with running_job(tmp_path, "mismatch.py", str(out), "broadcast", nproc=4) as job:
        job.communicate(timeout=60)
    assert job.returncode != 0
    run = stacks(tmp_path / "log")
    assert run.returncode == 0, run.stderr + logs(tmp_path)
    lines = run.stdout.splitlines()
    assert lines[0].startswith("no running trainer of job ")
    assert lines[0].endswith("(the job failed); from the progress files of ranks 0–3:")
    assert lines[1] == (
        "rank 1 entered broadcast from rank 0 as #5 (default group); ranks 0, 2–3 entered "
        "all_reduce as #5"
    )
    rank1 = (dump_dir(tmp_path / "log") / "rank.1.txt").read_text()
    assert "#5 broadcast 4096 B float32 peer 0 (group 0, failed)" in rank1
    env = dict(os.environ, PYTHONPATH=str(REPO))
    as_json = subprocess.run(
        [sys.executable, "-m", "paddlike.logs", str(tmp_path / "log"), "--stacks", "--json"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    data = json.loads(as_json.stdout)
    assert data["summary"] == lines[:2] and data["stacks"] == []
    assert len(data["paths"]) == 1 and data["paths"][0].startswith(str(tmp_path / "log"))


@needs_py_spy
def test_a_rank_that_skipped_a_collective_is_named_by_its_stack_and_the_flight_record(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with running_job(tmp_path, "mismatch.py", str(out), "skip", nproc=4) as job:
        wait_until("every rank is about to block", ready(out, 4), job, tmp_path)
        wait_until(
            "ranks 0, 2, 3 are in their 5th collective",
            lambda: all(p.ops == 5 for r, p in _progress(tmp_path).items() if r != 1),
            job,
            tmp_path,
        )
        wait_until("every rank blocks", all_blocked(tmp_path / "log"), job, tmp_path)
        run = stacks(tmp_path / "log")
    assert run.returncode == 0, run.stderr + logs(tmp_path)
    lines = run.stdout.splitlines()
    assert lines[0].startswith("rank 1 (") and lines[0].endswith(
        "workerlog.1) is in `load_batch` at mismatch.py:16"
    )
    assert lines[1] == (
        "ranks 0, 2–3 (3 of 4) wait in `all_reduce` called from mismatch.py:28 (main)"
    )
    assert lines[2] == (
        "rank 1 never entered collective #5 (all_reduce, which ranks 0, 2–3 are waiting in); "
        "rank 1's last was #4 (all_reduce, done)"
    )


def _progress(tmp_path: Path) -> dict[int, progress.RankProgress]:
    return progress.read_all(tmp_path / "log", flight=False)


def test_a_rank_three_times_slower_per_step_is_reported_as_a_straggler(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with running_job(tmp_path, "straggler.py", str(out), nproc=4) as job:
        wait_until("ten steps", ready(out, 4), job, tmp_path)
        wait_until(
            "twenty steps",
            lambda: len(s := _progress(tmp_path)) == 4 and min(p.step for p in s.values()) >= 20,
            job,
            tmp_path,
        )
        snaps = _progress(tmp_path)
    found = find_stragglers(snaps.values(), lag_steps=5, slow_factor=2.0)
    assert [s.rank for s in found] == [2], found
    assert "the median time per step outside collectives" in found[0].reason
    # every rank's step takes as long as rank 2's: only the time outside collectives differs
    step_times = sorted(p.step_time for p in snaps.values())
    assert step_times[-1] < 1.5 * step_times[0]


@needs_py_spy
@pytest.mark.netns
@pytest.mark.timeout(180)
def test_stacks_of_a_two_node_job_write_a_file_per_rank_on_each_node(tmp_path):
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    from tests.support.multinode_common import start_launcher
    from tests.support.netns import netns_cluster

    out = tmp_path / "out"
    out.mkdir()
    script = REPO / "tests" / "support" / "hang_workers" / "torch_load_batch.py"
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        logs_a, logs_b = tmp_path / "nodes" / "a", tmp_path / "nodes" / "b"
        pa = start_launcher(a, "nodea,nodeb", logs_a, script, script_args=[str(out)])
        start_launcher(b, "nodea,nodeb", logs_b, script, script_args=[str(out)])
        wait_until("every rank is about to block", ready(out, 4), pa, tmp_path)
        wait_until("every rank blocks", all_blocked(logs_a, logs_b), pa, tmp_path)
        run = stacks(tmp_path / "nodes")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("rank 3 (") and lines[0].endswith(
        "workerlog.1) is in `load_batch` at torch_load_batch.py:14"
    ), run.stdout
    assert lines[1] == (
        "ranks 0–2 (3 of 4) wait in `all_reduce` called from torch_load_batch.py:26 (main)"
    )
    for node_dir, ranks in ((logs_a, [0, 1]), (logs_b, [2, 3])):
        written = dump_dir(node_dir)
        assert sorted(p.name for p in written.glob("rank.*.txt")) == [
            f"rank.{r}.txt" for r in ranks
        ]
        assert (written / "summary.txt").read_text().splitlines() == lines[:2]
