"""`--hang_timeout 5 --on_hang abort` under the real launcher names the rank that holds
the others up — in the console's FAILED line and summary.json's root cause — however
few ranks there are: a torch gloo rank that skipped an all_reduce (from torch's flight
record), a rank of two in `load_batch` (torch, and paddlike's own collectives), a rank
stuck before `init_process_group`, the same without py-spy, and a stopped rank."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
from pathlib import Path

import pytest

from paddlike.logs.stacks import find_py_spy
from tests.support.hang_workers.running import logs, running_job, wait_until, without_py_spy

HANG_EXIT = 124  # docs/cli.md: --on_hang abort
ABORT = {"PADDLIKE_HANG_TIMEOUT": "5", "PADDLIKE_ON_HANG": "abort"}
HOST = os.uname().nodename

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed"
)
needs_py_spy = pytest.mark.skipif(
    find_py_spy() is None, reason="py-spy is not installed (pip install py-spy)"
)


def ready(out: Path, n: int):
    return lambda: all((out / f"ready.{r}").exists() for r in range(n))


def hang_abort(
    tmp_path: Path,
    script: str,
    *args: str,
    nproc: int,
    env: dict[str, str] | None = None,
    python: str | None = None,
) -> tuple[str, str, str]:
    """Run the job until the launcher aborts it for a hang: (console, the FAILED line's
    text, summary.json's root-cause reason)."""
    out = tmp_path / "out"
    out.mkdir()
    extra = {"python": python} if python else {}
    with running_job(
        tmp_path, script, str(out), *args, nproc=nproc, env={**ABORT, **(env or {})}, **extra
    ) as job:
        wait_until("every rank is about to block", ready(out, nproc), job, tmp_path)
        console = job.communicate(timeout=90)[0]
    assert job.returncode == HANG_EXIT, console + logs(tmp_path)
    failed = [line for line in console.splitlines() if line.startswith("FAILED: ")]
    assert len(failed) == 1, console
    summary = json.loads((tmp_path / "log" / "summary.json").read_text())
    return console, failed[0].removeprefix("FAILED: "), summary["root_cause"]["reason"]


@needs_torch
@pytest.mark.timeout(150)
def test_a_torch_rank_that_skipped_an_all_reduce_is_named_from_torchs_flight_record(tmp_path):
    console, cause, reason = hang_abort(tmp_path, "torch_skip.py", "3", nproc=3)
    named = (
        f"rank 1 ({HOST}, workerlog.1) entered barrier as #4 (default group); "
        "ranks 0, 2 are in all_reduce #4"
    )
    assert cause == reason == named, console
    (dump,) = (tmp_path / "log" / "stacks").iterdir()
    rank1 = (dump / "rank.1.txt").read_text()
    assert "torch flight record (last 4 collectives, oldest first):" in rank1
    assert "    #4 barrier (group 0, running)\n" in rank1
    data = json.loads((dump / "stacks.json").read_text())
    assert [op["op"] for op in data["torch_flight"]["0"]] == ["all_reduce"] * 4


@needs_torch
@needs_py_spy
@pytest.mark.timeout(150)
def test_of_two_torch_ranks_the_one_in_load_batch_is_named_not_rank_0_that_waits(tmp_path):
    console, cause, reason = hang_abort(tmp_path, "torch_load_batch.py", "1", nproc=2)
    assert (
        cause
        == reason
        == f"rank 1 ({HOST}, workerlog.1) is in `load_batch` at torch_load_batch.py:14"
    )
    assert (
        "rank 1 never entered collective #1 (all_reduce, which rank 0 is waiting in); "
        "rank 1 entered none of them"
    ) in console


@needs_torch
@pytest.mark.timeout(150)
def test_without_py_spy_the_workers_probe_gives_the_stacks_and_rank_1_is_named(tmp_path):
    python, env = without_py_spy()
    _console, cause, reason = hang_abort(
        tmp_path, "torch_load_batch.py", "1", nproc=2, env=env, python=python
    )
    assert (
        cause
        == reason
        == f"rank 1 ({HOST}, workerlog.1) is in `load_batch` at torch_load_batch.py:14"
    )
    assert (
        "Python frames from paddlike's probe in the worker (py-spy not found"
        in (next((tmp_path / "log" / "stacks").iterdir()) / "rank.1.txt").read_text()
    )


@needs_torch
@pytest.mark.timeout(150)
def test_a_rank_stuck_before_init_process_group_is_named_not_the_one_waiting_in_init(tmp_path):
    console, cause, reason = hang_abort(tmp_path, "torch_before_init.py", nproc=2)
    assert (
        cause
        == reason
        == f"rank 1 ({HOST}, workerlog.1) is in `load_config` at torch_before_init.py:14"
    )
    assert "rank 0 (" in console and "waits in `init_process_group` called from" in console


@pytest.mark.timeout(150)
def test_of_two_ranks_with_paddlikes_collectives_the_one_in_load_batch_is_named(tmp_path):
    console, cause, reason = hang_abort(tmp_path, "mismatch.py", "skip", nproc=2)
    assert cause == reason == f"rank 1 ({HOST}, workerlog.1) is in `load_batch` at mismatch.py:16"
    assert (
        "rank 1 never entered collective #5 (all_reduce, which rank 0 is waiting in); "
        "rank 1's last was #4 (all_reduce, done)"
    ) in console


@pytest.mark.timeout(150)
def test_without_py_spy_paddlikes_flight_record_and_the_probe_name_rank_1(tmp_path):
    python, env = without_py_spy()
    _console, cause, reason = hang_abort(
        tmp_path, "mismatch.py", "skip", nproc=2, env=env, python=python
    )
    assert cause == reason == f"rank 1 ({HOST}, workerlog.1) is in `load_batch` at mismatch.py:16"


@pytest.mark.timeout(150)
def test_a_stopped_rank_is_named_in_the_console_and_the_summary(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with running_job(tmp_path, "steps.py", str(out), nproc=3, env=ABORT) as job:
        wait_until("every rank did 3 steps", ready(out, 3), job, tmp_path)
        summary = json.loads((tmp_path / "log" / "summary.json").read_text())
        pid = next(p["pid"] for p in summary["processes"] if p["rank"] == 1)
        os.kill(pid, signal.SIGSTOP)
        try:
            console = job.communicate(timeout=90)[0]
        finally:
            if _state(pid) == "T":  # the launcher did not end it: let it go on and end
                os.kill(pid, signal.SIGCONT)
    assert job.returncode == HANG_EXIT, console + logs(tmp_path)
    stopped = f"rank 1 ({HOST}, workerlog.1) is stopped (SIGSTOP, or held by a debugger): no stack"
    assert f"FAILED: {stopped}\n" in console
    assert f"paddlike.launch:   {stopped}\n" in console
    summary = json.loads((tmp_path / "log" / "summary.json").read_text())
    assert summary["root_cause"]["reason"] == stopped
    cause = summary["root_cause"]
    assert (cause["role"], cause["rank"], cause["log_file"]) == ("trainer", 1, "workerlog.1")
    # the teardown continues it (SIGCONT) rather than waiting --kill_timeout for it
    assert (
        f"trainer rank 1 (pid {pid}) is stopped (SIGSTOP, or held by a debugger): "
        "sending SIGCONT after SIGTERM so that it can exit\n"
    ) in console
    assert "make it exit on SIGTERM" not in console


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2 :].split()[0]
