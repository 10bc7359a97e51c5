"""examples/elastic_train.py: the same final weights whatever the world and however the run
was cut into rounds (real launcher, one node, 127.0.0.1).

The namespace tests with real membership changes (--nnodes MIN:MAX) reuse the script.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.support.collective_workers.launching import REPO, launch, logs
from tests.support.logwait import wait_until

SCRIPT = REPO / "examples" / "elastic_train.py"
STEPS, EVERY = 40, 5
FINAL = re.compile(r"^FINAL step=40 loss=\S+ weights_sha256=[0-9a-f]{64}$")


def train(tmp: Path, ckpt: Path, nproc: int, *extra: str, steps: int = STEPS) -> str:
    """One launch of the example to the end; its FINAL line (also checked against final.txt)."""
    tmp.mkdir(parents=True, exist_ok=True)
    args = ["--steps", str(steps), "--checkpoint_every", str(EVERY), "--checkpoint", str(ckpt)]
    run = launch(tmp, SCRIPT, *args, *extra, nproc=nproc, timeout=60)
    assert run.returncode == 0, run.stdout + logs(tmp)
    line = (ckpt / "final.txt").read_text().strip()
    assert line in (tmp / "log" / "workerlog.0").read_text(), logs(tmp)
    return line


def resumed_lines(tmp: Path) -> list[str]:
    text = (tmp / "log" / "workerlog.0").read_text()
    return [ln for ln in text.splitlines() if ln.startswith("RESUMED ")]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The FINAL line of one worker training all 40 steps in one go."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    line = train(tmp, tmp / "ckpt", 1)
    assert FINAL.match(line), line
    assert resumed_lines(tmp) == []
    return line


@pytest.mark.timeout(30)
def test_three_workers_end_with_the_same_final_weights_as_one_worker(
    tmp_path: Path, uninterrupted: str
) -> None:
    assert train(tmp_path, tmp_path / "ckpt", 3) == uninterrupted


@pytest.mark.timeout(30)
def test_a_run_stopped_early_and_resumed_on_another_world_size_ends_like_the_uninterrupted_run(
    tmp_path: Path, uninterrupted: str
) -> None:
    ckpt = tmp_path / "ckpt"
    first = train(tmp_path / "round0", ckpt, 2, steps=17)  # ends between two checkpoints
    assert first.startswith("FINAL step=17 ") and first != uninterrupted
    assert train(tmp_path / "round1", ckpt, 3) == uninterrupted
    assert resumed_lines(tmp_path / "round1") == ["RESUMED from step 17 world 3 restart 0"]


@pytest.mark.timeout(40)
def test_a_job_killed_after_a_checkpoint_resumes_from_it_on_another_world_size_with_the_same_result(
    tmp_path: Path, uninterrupted: str
) -> None:
    ckpt = tmp_path / "ckpt"
    killed = start_slow_run(tmp_path / "killed", ckpt, nproc=2)
    try:
        wait_for(lambda: (ckpt / "checkpoint.npz").exists(), killed, "the first checkpoint", ckpt)
        workers = killed_with_its_workers(killed)
    finally:
        if killed.poll() is None:
            os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
    psutil.wait_procs(workers, timeout=10)
    assert not [p for p in workers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not (ckpt / "final.txt").exists(), "the killed run finished before it was killed"

    assert train(tmp_path / "resumed", ckpt, 3) == uninterrupted
    (line,) = resumed_lines(tmp_path / "resumed")
    step = int(re.fullmatch(r"RESUMED from step (\d+) world 3 restart 0", line).group(1))
    assert 0 < step < STEPS and step % EVERY == 0, line  # from a checkpoint, not from scratch


@pytest.mark.timeout(30)
def test_a_checkpoint_past_the_requested_steps_is_refused_with_the_fix(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    train(tmp_path / "long", ckpt, 1, steps=10)
    (tmp_path / "short").mkdir()
    run = launch(tmp_path / "short", SCRIPT, "--steps", "5", "--checkpoint", str(ckpt), nproc=2)
    assert run.returncode != 0
    assert f"the checkpoint in {ckpt} is at step 10, past --steps 5" in run.stdout, run.stdout


def start_slow_run(tmp: Path, ckpt: Path, nproc: int) -> subprocess.Popen[str]:
    """The example at 0.05 s a step (2 s in all), so it can be killed midway."""
    tmp.mkdir()
    cmd = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", str(nproc),
           "--log_dir", str(tmp / "log"), str(SCRIPT), "--steps", str(STEPS), "--checkpoint_every",
           str(EVERY), "--checkpoint", str(ckpt), "--step_time", "0.05"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(cmd, cwd=tmp, env=env, text=True, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def wait_for(
    ready, proc: subprocess.Popen[str], what: str, under: Path, deadline_s: float = 20.0
) -> None:
    """Until `ready()` (files under `under`), failing if the launcher ends first."""
    try:
        done = wait_until(ready, under=under, timeout=deadline_s, what=what, writer=proc)
    except AssertionError:
        pytest.fail(f"no {what} after {deadline_s} s")
    if not done:
        pytest.fail(f"the launcher exited {proc.returncode} before {what}")


def killed_with_its_workers(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    """SIGKILL the launcher (as a lost node would be); its workers die with it."""
    workers = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGKILL)
    return workers
