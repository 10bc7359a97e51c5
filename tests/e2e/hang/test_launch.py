"""`--hang_timeout` and SIGUSR1 under the real launcher, one node: a torch gloo job whose
rank 3 is stuck in `load_batch` is named on the console, in the dump and (with
`--on_hang abort`) as the root cause with exit code 124; a quiet job that keeps calling
heartbeat() is never taken for hung; SIGUSR1 (sent by `python -m paddlike.logs --stacks`)
makes the launcher write every rank's stack while the job goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paddlike.launch.context.options import UsageError, parse_options
from paddlike.logs.stacks import find_py_spy
from tests.support.hang_workers.running import REPO, logs, running_job, wait_until

needs_py_spy = pytest.mark.skipif(
    find_py_spy() is None, reason="py-spy is not installed (pip install py-spy)"
)

HANG_EXIT = 124  # docs/cli.md: --on_hang abort


def ready(out: Path, n: int):
    return lambda: all((out / f"ready.{r}").exists() for r in range(n))


def dumps(log_dir: Path) -> list[Path]:
    root = log_dir / "stacks"
    return sorted(root.iterdir()) if root.exists() else []


def dump_written(log_dir: Path):
    return lambda: any((d / "stacks.json").exists() for d in dumps(log_dir))


@needs_py_spy
@pytest.mark.timeout(120)
def test_a_hung_torch_job_is_aborted_with_code_124_naming_the_rank_in_load_batch(tmp_path):
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    out = tmp_path / "out"
    out.mkdir()
    env = {"PADDLIKE_HANG_TIMEOUT": "5", "PADDLIKE_ON_HANG": "abort"}
    with running_job(tmp_path, "torch_load_batch.py", str(out), nproc=4, env=env) as job:
        wait_until("every rank is about to block", ready(out, 4), job, tmp_path)
        blocked = time.monotonic()
        console = job.communicate(timeout=60)[0]
        took = time.monotonic() - blocked
    assert job.returncode == HANG_EXIT, console + logs(tmp_path)
    host = os.uname().nodename
    odd = f"rank 3 ({host}, workerlog.3) is in `load_batch` at torch_load_batch.py:14"
    others = "ranks 0–2 (3 of 4) wait in `all_reduce` called from torch_load_batch.py:26 (main)"
    assert f"paddlike.launch:   {odd}\n" in console
    assert f"paddlike.launch:   {others}\n" in console
    assert f"FAILED: {odd}\n" in console
    assert "  exit    code 124\n" in console
    # the report names the odd rank's process and log, and where the stacks are
    assert "  where   node 0 (127.0.0.1), trainer rank 3\n" in console
    assert f"  log     {tmp_path / 'log' / 'workerlog.3'}\n" in console
    assert f"  stacks  {tmp_path / 'log' / 'stacks'}/" in console
    # 5 s of silence, then the stacks (py-spy, native frames: seconds), then the teardown
    assert took < 5 + 10 + 5, f"the hang ended the job {took:.1f} s after the ranks blocked"
    summary = json.loads((tmp_path / "log" / "summary.json").read_text())
    assert summary["exit_code"] == HANG_EXIT
    assert summary["root_cause"]["reason"] == odd
    cause = summary["root_cause"]
    assert (cause["role"], cause["rank"], cause["log_file"]) == ("trainer", 3, "workerlog.3")
    (dump,) = dumps(tmp_path / "log")
    assert cause["stacks"] == str((dump / "summary.txt").relative_to(tmp_path / "log"))
    assert sorted(p.name for p in dump.glob("rank.*.txt")) == [f"rank.{r}.txt" for r in range(4)]
    assert (dump / "summary.txt").read_text().splitlines()[:2] == [odd, others]
    shown = subprocess.run(
        [sys.executable, "-m", "paddlike.logs", str(tmp_path / "log")],
        env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert f"FAILED: {odd}\n" in shown.stdout


@needs_py_spy
@pytest.mark.timeout(120)
def test_with_on_hang_dump_a_stall_is_dumped_once_and_the_job_keeps_running(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = {"PADDLIKE_HANG_TIMEOUT": "2"}  # --on_hang dump is the default
    with running_job(tmp_path, "mismatch.py", str(out), "skip", nproc=2, env=env) as job:
        wait_until("the ranks reach the 5th collective", ready(out, 2), job, tmp_path)
        wait_until("the hang's dump", dump_written(tmp_path / "log"), job, tmp_path)
        # Nothing to await for "no second dump": give the rule two more periods to err.
        time.sleep(2 * 2 + 1)
        assert job.poll() is None, "the launcher ended the job though --on_hang is dump"
        job.terminate()
        console = job.communicate(timeout=30)[0]
    assert "--on_hang dump: the job keeps running" in console
    assert len(dumps(tmp_path / "log")) == 1, console
    lines = (dumps(tmp_path / "log")[0] / "summary.txt").read_text().splitlines()
    assert any(
        line.startswith("rank 1 (") and "is in `load_batch` at mismatch.py:" in line
        for line in lines
    ), lines
    assert lines[-1].startswith("no progress for 2 s on any rank"), lines


@needs_py_spy
@pytest.mark.timeout(120)
def test_a_quiet_job_that_keeps_calling_heartbeat_is_not_hung_and_sigusr1_dumps_it(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = {"PADDLIKE_HANG_TIMEOUT": "2"}
    # 3 ranks, rank 2 three times slower per step; silent, but heartbeat() every step.
    with running_job(tmp_path, "straggler.py", str(out), "250", nproc=3, env=env) as job:
        wait_until("step 10 on every rank", ready(out, 3), job, tmp_path)
        asked = subprocess.run(
            [sys.executable, "-m", "paddlike.logs", str(tmp_path / "log"), "--stacks"],
            env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        console = job.communicate(timeout=90)[0]
    assert asked.returncode == 0, asked.stderr
    assert job.returncode == 0, console + logs(tmp_path)
    assert "received SIGRTMIN+4: taking the stacks of 3 workers" in console  # logs --stacks
    assert "hang:" not in console  # 250 steps of ~0.1 s, never 2 s without a heartbeat
    (dump,) = dumps(tmp_path / "log")
    assert sorted(p.name for p in dump.glob("rank.*.txt")) == [f"rank.{r}.txt" for r in range(3)]
    assert asked.stdout.splitlines()[-1] == f"stacks of 3 ranks in {dump}"
    # (which rank straggles is timing on a shared machine: test_hang_jobs.py's straggler
    # test checks the report on a job built to make it unambiguous)


def test_hang_options_come_from_the_command_line_or_the_environment_and_are_off_by_default():
    given = parse_options(["--hang_timeout", "30", "--on_hang", "abort", "train.py"], {})
    assert (given.hang_timeout, given.on_hang) == (30.0, "abort")
    from_env = parse_options(["train.py"], {"PADDLIKE_HANG_TIMEOUT": "5"})
    assert (from_env.hang_timeout, from_env.on_hang) == (5.0, "dump")
    default = parse_options(["train.py"], {})
    assert (default.hang_timeout, default.on_hang) == (None, "dump")


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (["--on_hang", "kill"], {}, "--on_hang: expected dump or abort, got 'kill'"),
        (
            [],
            {"PADDLIKE_HANG_TIMEOUT": "0"},
            "--hang_timeout (from PADDLIKE_HANG_TIMEOUT): expected a number of seconds > 0, "
            "got '0'",
        ),
    ],
)
def test_a_bad_hang_option_is_one_line_naming_the_value_and_what_was_expected(
    argv, environ, message
):
    with pytest.raises(UsageError) as err:
        parse_options([*argv, "train.py"], environ)
    assert str(err.value) == message
