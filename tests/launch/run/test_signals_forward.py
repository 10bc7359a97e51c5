"""--signals_to_handle under the real launcher, one node, two workers: SIGUSR1 to the
launcher reaches both workers' scripts (they catch it and write a marker) and the job goes
on to exit 0; `paddlike.logs --stacks` still takes the stacks meanwhile (its trigger is
SIGRTMIN+4, not SIGUSR1); a bad list is one line, exit 2, nothing started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.hang_workers.running import REPO, logs, wait_until

WORKER = REPO / "tests" / "support" / "signal_workers" / "catch.py"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "SLURM_", "PET_"))}
    env["PYTHONPATH"] = str(REPO)
    return env


def _launch(tmp: Path, out: Path, *options: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2"]
    cmd += ["--log_dir", str(tmp / "log"), "--kill_timeout", "2", *options, str(WORKER), str(out)]
    return subprocess.Popen(
        cmd, cwd=tmp, env=_env(), text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _caught(out: Path, name: str) -> list[str]:
    return sorted(p.name for p in out.glob(f"caught.*.{name}.*"))


@pytest.mark.timeout(120)
def test_sigusr1_given_to_handle_reaches_every_worker_and_the_job_goes_on(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    job = _launch(tmp_path, out, "--signals_to_handle", "SIGUSR1")
    try:
        wait_until(
            "both workers ready", lambda: len(list(out.glob("ready.[0-9]"))) == 2, job, tmp_path
        )
        job.send_signal(signal.SIGUSR1)
        wait_until(
            "both workers caught SIGUSR1", lambda: len(_caught(out, "SIGUSR1")) == 2, job, tmp_path
        )
        assert job.poll() is None, "SIGUSR1 ended the job"
        # the stacks, asked as a user would, while SIGUSR1 is the workers'
        asked = subprocess.run(
            [sys.executable, "-m", "paddlike.logs", str(tmp_path / "log"), "--stacks"],
            env=_env(), capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert job.poll() is None, "taking the stacks ended the job"
        (out / "stop").write_text("")
        console = job.communicate(timeout=60)[0]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode == 0, console + logs(tmp_path)
    assert _caught(out, "SIGUSR1") == ["caught.0.SIGUSR1.1", "caught.1.SIGUSR1.1"]
    assert "received SIGUSR1: passed on to 2 workers" in console
    assert asked.returncode == 0, asked.stdout + asked.stderr
    assert "received SIGRTMIN+4: taking the stacks of 2 workers" in console
    dumps = sorted((tmp_path / "log" / "stacks").iterdir())
    assert len(dumps) == 1 and (dumps[0] / "stacks.json").exists()
    assert asked.stdout.splitlines()[-1] == f"stacks of 2 ranks in {dumps[0]}"
    for rank in (0, 1):
        log = (tmp_path / "log" / f"workerlog.{rank}").read_text()
        assert f"rank {rank} done after 1 signals" in log


@pytest.mark.timeout(120)
def test_without_the_option_sigusr1_still_takes_the_stacks_and_the_workers_never_see_it(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    job = _launch(tmp_path, out)
    try:
        wait_until(
            "both workers ready", lambda: len(list(out.glob("ready.[0-9]"))) == 2, job, tmp_path
        )
        job.send_signal(signal.SIGUSR1)
        stacks = tmp_path / "log" / "stacks"
        wait_until("the stacks", lambda: any(stacks.glob("*/stacks.json")), job, tmp_path)
        (out / "stop").write_text("")
        console = job.communicate(timeout=60)[0]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode == 0, console + logs(tmp_path)
    assert "received SIGUSR1: taking the stacks of 2 workers" in console
    assert _caught(out, "SIGUSR1") == []


def test_a_bad_signal_name_is_one_line_and_exit_2_with_nothing_started(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    started = time.monotonic()
    job = _launch(tmp_path, out, "--signals_to_handle", "SIGFOO")
    console = job.communicate(timeout=60)[0]
    assert job.returncode == 2, console
    lines = console.strip().splitlines()
    assert len(lines) == 1, console
    assert "--signals_to_handle: SIGFOO is not a signal name" in lines[0]
    assert "got 'SIGFOO'" in lines[0]
    assert not list(out.iterdir()) and not (tmp_path / "log").exists()
    assert time.monotonic() - started < 30


@pytest.mark.timeout(120)
def test_sigquit_ends_the_job_with_a_report_when_the_list_leaves_it_out(tmp_path):
    """--signals_to_handle SIGUSR1 (no SIGQUIT): SIGQUIT still ends the job like SIGTERM,
    exit 131 and a summary, instead of a core dump with nothing said."""
    out = tmp_path / "out"
    out.mkdir()
    job = _launch(tmp_path, out, "--signals_to_handle", "SIGUSR1")
    try:
        wait_until(
            "both workers ready", lambda: len(list(out.glob("ready.[0-9]"))) == 2, job, tmp_path
        )
        job.send_signal(signal.SIGQUIT)
        console = job.communicate(timeout=60)[0]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode == 131, console + logs(tmp_path)
    assert "SIGQUIT" in console
    assert (tmp_path / "log" / "summary.json").exists()
