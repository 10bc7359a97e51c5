"""A preemption notice under a real Slurm (issue 34): Slurm's warning signal (`sbatch
--signal=USR1@N` before the time limit, `scancel --signal=USR1`) and `scancel`'s SIGTERM
reach one launcher per node; every rank of the job saves the same step (`should_stop`) and the job
ends 138 / 143, which a batch script can requeue on."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.slurm import test_slurm_jobs
from tests.e2e.slurm.test_slurm_jobs import launcher_env, ready, wait_for
from tests.support.slurm import SlurmCluster, slurm_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[3]
SAVER = REPO / "tests" / "support" / "signal_workers" / "save_at_stop.py"


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with slurm_cluster(2) as cluster:
        yield cluster


job_dir = test_slurm_jobs.job_dir  # the same fixture: idle nodes before, no job left after


@pytest.mark.parametrize(("how", "code"), [(["--signal=USR1"], 138), ([], 143)])
def test_slurm_s_warning_or_scancel_makes_every_rank_save_the_same_step(how, code, slurm, job_dir):
    out = job_dir / "out"
    line = (
        f"exec {sys.executable} -m paddlike.launch --nproc_per_node 2 "
        f"--log_dir {job_dir}/log/$SLURMD_NODENAME {SAVER} {out} 0.02"
    )
    srun = slurm.popen(
        ["srun", "-N2", "--ntasks-per-node=1", f"--chdir={job_dir}", "sh", "-c", line],
        env=launcher_env(), text=True, stdout=-1, stderr=-2,
    )  # fmt: skip
    wait_for("4 ranks on 2 nodes", ready(out, 4), srun, slurm, out)
    squeue = slurm.command(["squeue", "-h", "-o", "%i"], timeout=15).stdout.split()
    assert len(squeue) == 1, squeue
    done = slurm.command(["scancel", *how, squeue[0]], timeout=15)
    assert done.returncode == 0, done.stderr
    output = srun.communicate(timeout=90)[0]
    saved = {int(p.suffix[1:]): int(p.read_text()) for p in out.glob("saved.*")}
    assert sorted(saved) == [0, 1, 2, 3], output
    assert len(set(saved.values())) == 1, saved
    signal = "SIGUSR1" if how else "SIGTERM"
    assert f"preemption notice: {signal} on node " in output
    for node in slurm.nodes[:2]:
        summary = json.loads((job_dir / "log" / node.hostname / "summary.json").read_text())
        assert summary["exit_code"] == code, (summary, output)
        assert summary["preemption"]["stop_step"] == saved[0]


@pytest.mark.timeout(150)
def test_sbatch_signal_usr1_before_the_time_limit_saves_one_step_and_the_script_requeues(
    slurm, job_dir
):
    """`#SBATCH --signal=USR1@60` with a one-minute limit: Slurm's warning is due at once,
    sent on slurmctld's next periodic check of time limits (every 30 s); the batch script
    sees 138 (docs/cli.md's recipe would requeue on it)."""
    out = job_dir / "out"
    script = job_dir / "job.sh"
    script.write_text(
        "#!/bin/sh\n#SBATCH --time=1\n#SBATCH --signal=USR1@60\n"
        f"srun -N2 --ntasks-per-node=1 sh -c 'exec {sys.executable} -m paddlike.launch "
        f"--nproc_per_node 2 --log_dir {job_dir}/log/$SLURMD_NODENAME {SAVER} {out} 0.02'\n"
        f"echo batch saw $? > {job_dir}/code\n"
    )
    sbatch = slurm.popen(
        ["sbatch", "-N2", "--wait", f"--chdir={job_dir}", f"--output={job_dir}/batch.out",
         str(script)],
        env=launcher_env(), text=True, stdout=-1, stderr=-2,
    )  # fmt: skip
    wait_for("4 ranks on 2 nodes", ready(out, 4), sbatch, slurm, out)
    output = sbatch.communicate(timeout=90)[0]
    batch = (job_dir / "batch.out").read_text() if (job_dir / "batch.out").exists() else ""
    saved = {int(p.suffix[1:]): int(p.read_text()) for p in out.glob("saved.*")}
    assert sorted(saved) == [0, 1, 2, 3], output + batch
    assert len(set(saved.values())) == 1, saved
    assert "preemption notice: SIGUSR1 on node " in batch, batch
    assert (job_dir / "code").read_text().split() == ["batch", "saw", "138"], batch
