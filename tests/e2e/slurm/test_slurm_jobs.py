"""paddlike under a real Slurm (tests/support/slurm.py: slurmctld, a slurmd per namespace
node, munge): `srun` and `sbatch` start one launcher per node, which read Slurm's own
environment (no variable set by hand) for the nodes, this node's index and the ranks;
`scancel` ends every worker on every node; a signal from Slurm (`scancel --signal=USR1`,
`sbatch --signal=USR1@60`) reaches the workers' script, which catches it, and the job
goes on.

One cluster of three compute nodes serves the whole module (it starts in about a second,
but a cluster per test would still be most of each test's time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.logwait import wait_until
from tests.support.second_user import PROC_SPY
from tests.support.slurm import SlurmCluster, slurm_cluster

pytestmark = pytest.mark.netns

REPO = Path(__file__).resolve().parents[3]
WORKER = REPO / "tests" / "support" / "signal_workers" / "catch.py"
NODES = 3
DEADLINE = 60.0
FORWARD_USR1 = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2"  # passed on to the workers


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with slurm_cluster(NODES) as cluster:
        yield cluster


@pytest.fixture
def job_dir(slurm: SlurmCluster, tmp_path: Path) -> Iterator[Path]:
    """A folder every node writes to (one file system), and no job left behind: each test
    starts and ends with every node idle."""
    slurm.wait_idle(time.monotonic() + DEADLINE)
    tmp_path.chmod(0o755)
    (tmp_path / "out").mkdir()
    yield tmp_path
    slurm.command(["scancel", "--partition", slurm.partition], timeout=15)
    slurm.wait_idle(time.monotonic() + DEADLINE)
    assert slurm.job_processes_left() == {}


def launcher_env() -> dict[str, str]:
    """What the submitting shell passes on (srun and sbatch export it): nothing of
    paddlike's or torchrun's options, the repository on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    env["PYTHONPATH"] = str(REPO)
    return env


def launch_line(job: Path, *options: str) -> str:
    """One launcher per node, its log directory that node's own (SLURMD_NODENAME)."""
    opts = " ".join(options)
    return (
        f"exec {sys.executable} -m paddlike.launch --nproc_per_node 2 --kill_timeout 2 "
        f"--log_dir {job}/log/$SLURMD_NODENAME {opts} {WORKER} {job}/out"
    )


def wait_for(
    what: str, ready: Callable[[], bool], proc: subprocess.Popen | None, slurm, under: Path
) -> None:
    """Until `ready()` (files the workers write under `under`), failing if srun ends first."""
    try:
        done = wait_until(ready, under=under, timeout=DEADLINE, what=what, writer=proc)
    except AssertionError:
        pytest.fail(f"timed out waiting for {what}\n{slurm.logs_tail()}")
    if not done and proc is not None:
        out = proc.communicate()[0]
        pytest.fail(f"srun exited {proc.returncode} before {what}:\n{out}")


def ready(out: Path, n: int) -> Callable[[], bool]:
    return lambda: len(list(out.glob("ready.[0-9]"))) == n


def facts(out: Path) -> dict[int, dict]:
    return {int(p.name.split(".")[1]): json.loads(p.read_text()) for p in out.glob("ready.[0-9]")}


def endpoints_log(log_dir: Path) -> list[str]:
    lines = (log_dir / "endpoints.log").read_text().splitlines()
    assert lines[0].startswith("PADDLE_TRAINER_ENDPOINTS:"), lines
    return [line.strip() for line in lines[1:] if line.strip()]


@pytest.mark.timeout(120)
def test_srun_on_three_nodes_gives_ranks_endpoints_and_logs_by_slurm_s_node_order(slurm, job_dir):
    out = job_dir / "out"
    (out / "stop").write_text("")  # the workers report and exit at once
    done = slurm.command(
        [
            "srun",
            "-N3",
            "--ntasks-per-node=1",
            f"--chdir={job_dir}",
            "sh",
            "-c",
            launch_line(job_dir),
        ],
        env=launcher_env(),
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = facts(out)
    assert sorted(seen) == list(range(6))
    addrs = {n.hostname: n.addr for n in slurm.nodes}
    for rank, f in seen.items():
        node = slurm.nodes[rank // 2]
        assert f["SLURMD_NODENAME"] == node.hostname, (rank, f)
        assert (f["WORLD_SIZE"], f["LOCAL_RANK"], f["PADDLE_NNODES"]) == ("6", str(rank % 2), "3")
        assert f["PADDLE_CURRENT_ENDPOINT"].startswith(node.addr + ":"), (rank, f)
        assert f["MASTER_ADDR"] == addrs["sn0"]
    expected = seen[0]["PADDLE_TRAINER_ENDPOINTS"].split(",")
    assert [e.rsplit(":", 1)[0] for e in expected] == [n.addr for n in slurm.nodes for _ in (0, 1)]
    assert [seen[r]["PADDLE_CURRENT_ENDPOINT"] for r in range(6)] == expected
    for node in slurm.nodes:
        log_dir = job_dir / "log" / node.hostname
        assert endpoints_log(log_dir) == expected
        for local in (0, 1):
            assert "ready" in (log_dir / f"workerlog.{local}").read_text()
        summary = json.loads((log_dir / "summary.json").read_text())
        assert summary["exit_code"] == 0


@pytest.mark.timeout(120)
def test_sbatch_with_srun_on_two_of_its_three_nodes_runs_a_two_node_job(slurm, job_dir):
    """The step's nodes, not the allocation's: SLURM_JOB_NODELIST lists three, the step
    (SLURM_STEP_NODELIST, SLURM_NNODES) two."""
    out = job_dir / "out"
    (out / "stop").write_text("")
    script = job_dir / "job.sh"
    script.write_text(f"#!/bin/sh\nsrun -N2 --ntasks-per-node=1 sh -c '{launch_line(job_dir)}'\n")
    done = slurm.command(
        [
            "sbatch",
            "-N3",
            "--wait",
            f"--chdir={job_dir}",
            f"--output={job_dir}/batch.out",
            str(script),
        ],
        env=launcher_env(),
        timeout=90,
    )
    batch = (job_dir / "batch.out").read_text() if (job_dir / "batch.out").exists() else ""
    assert done.returncode == 0, done.stdout + done.stderr + batch
    seen = facts(out)
    assert sorted(seen) == [0, 1, 2, 3], batch
    assert {f["WORLD_SIZE"] for f in seen.values()} == {"4"}
    assert [seen[r]["SLURMD_NODENAME"] for r in range(4)] == ["sn0", "sn0", "sn1", "sn1"]
    assert not (job_dir / "log" / "sn2").exists()


def _start_long_job(slurm: SlurmCluster, job_dir: Path, *options: str) -> subprocess.Popen[str]:
    return slurm.popen(
        ["srun", "-N2", "--ntasks-per-node=1", f"--chdir={job_dir}", "sh", "-c",
         launch_line(job_dir, *options)],
        env=launcher_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


@pytest.mark.timeout(120)
def test_scancel_ends_every_worker_on_every_node(slurm, job_dir):
    out = job_dir / "out"
    srun = _start_long_job(slurm, job_dir)
    wait_for("4 workers on 2 nodes", ready(out, 4), srun, slurm, out)
    job_id = facts(out)[0]["SLURM_JOB_ID"]
    pids = {r: f["pid"] for r, f in facts(out).items()}
    cancelled = time.monotonic()
    done = slurm.command(["scancel", job_id], timeout=15)
    assert done.returncode == 0, done.stderr
    output = srun.communicate(timeout=60)[0]
    took = time.monotonic() - cancelled
    assert srun.returncode != 0, output
    assert slurm.job_processes_left() == {}, "left after scancel"
    for rank, pid in pids.items():
        assert not Path(f"/proc/{pid}").exists(), (
            f"rank {rank}'s worker (pid {pid}) outlived scancel"
        )
    for node in slurm.nodes[:2]:
        summary = json.loads((job_dir / "log" / node.hostname / "summary.json").read_text())
        assert summary["exit_code"] == 143, summary  # SIGTERM from Slurm, the launcher's teardown
    assert took < 15, f"scancel took {took:.1f} s to end the job"  # KillWait is 10 s


@pytest.mark.timeout(120)
def test_scancel_signal_usr1_reaches_every_worker_s_script_and_the_job_goes_on(slurm, job_dir):
    out = job_dir / "out"
    # SIGUSR1 listed: the workers' (by default under Slurm it is a preemption notice:
    # tests/e2e/slurm/test_slurm_preempt.py)
    srun = _start_long_job(slurm, job_dir, "--signals_to_handle", FORWARD_USR1)
    wait_for("4 workers on 2 nodes", ready(out, 4), srun, slurm, out)
    job_id = facts(out)[0]["SLURM_JOB_ID"]
    done = slurm.command(["scancel", "--signal=USR1", job_id], timeout=15)
    assert done.returncode == 0, done.stderr
    caught = lambda: len(list(out.glob("caught.*.SIGUSR1.*"))) == 4  # noqa: E731
    wait_for("SIGUSR1 in all 4 workers", caught, srun, slurm, out)
    assert srun.poll() is None, "SIGUSR1 ended the job"
    (out / "stop").write_text("")
    output = srun.communicate(timeout=60)[0]
    assert srun.returncode == 0, output
    # once each: the launcher passed it on, and no worker got it twice
    assert sorted(p.name for p in out.glob("caught.*")) == [
        f"caught.{r}.SIGUSR1.1" for r in range(4)
    ]
    for node in slurm.nodes[:2]:
        log = (job_dir / "log" / node.hostname / "workerlog.0").read_text()
        assert "done after 1 signals" in log


@pytest.mark.timeout(150)
def test_sbatch_signal_usr1_before_the_time_limit_reaches_the_workers(slurm, job_dir):
    """`#SBATCH --signal=USR1@60` with a one-minute limit: Slurm's warning is due at once,
    sent on slurmctld's next periodic check of time limits (every 30 s)."""
    out = job_dir / "out"
    script = job_dir / "job.sh"
    script.write_text(
        "#!/bin/sh\n#SBATCH --time=1\n#SBATCH --signal=USR1@60\n"
        f"srun -N2 --ntasks-per-node=1 sh -c "
        f"'{launch_line(job_dir, '--signals_to_handle', FORWARD_USR1)}'\n"
    )
    sbatch = slurm.popen(
        ["sbatch", "-N2", "--wait", f"--chdir={job_dir}", f"--output={job_dir}/batch.out",
         str(script)],
        env=launcher_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    wait_for("4 workers on 2 nodes", ready(out, 4), sbatch, slurm, out)
    caught = lambda: len(list(out.glob("caught.*.SIGUSR1.*"))) == 4  # noqa: E731
    end = time.monotonic() + 45
    while not caught() and time.monotonic() < end and sbatch.poll() is None:
        time.sleep(0.2)  # slurmctld's periodic check: nothing to wait on
    (out / "stop").write_text("")
    output = sbatch.communicate(timeout=60)[0]
    batch = (job_dir / "batch.out").read_text() if (job_dir / "batch.out").exists() else ""
    assert caught(), f"SIGUSR1 did not reach the workers: {output}\n{batch}"
    assert sbatch.returncode == 0, output + batch


# uid 4242 (setpriv) reads every process's command line, and its environment where it may:
# prints what holds one of the secrets given on its stdin
SPY = PROC_SPY + "print(json.dumps(seen))\n"


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().partition("=")[::2] for item in raw if item)


@pytest.mark.timeout(120)
def test_launcher_slurm_gives_every_node_the_secrets_and_a_token_in_no_argv(slurm, job_dir):
    """One command in an allocation (`--launcher slurm`): the --export'ed variable and the
    job's fresh token reach every worker through srun's environment; another local user
    finds neither in any process's command line on any node."""
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("no system /usr/bin/python3 for the second user")
    out = job_dir / "out"
    secret = "wandb-secret-3c9e"
    starter = slurm.popen(
        ["salloc", "-N2", sys.executable, "-m", "paddlike.launch", "--launcher", "slurm",
         "--export", "WANDB_API_KEY", "--nproc_per_node", "1", "--kill_timeout", "2",
         "--log_dir", f"{job_dir}/log", str(WORKER), str(out)],
        env={**launcher_env(), "WANDB_API_KEY": secret}, cwd=job_dir, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for("2 workers on 2 nodes", ready(out, 2), starter, slurm, out)
        workers = [_environ(f["pid"]) for f in facts(out).values()]
        assert {w["WANDB_API_KEY"] for w in workers} == {secret}
        tokens = {w.get("PADDLIKE_JOB_TOKEN") for w in workers}
        assert len(tokens) == 1 and len(tokens.pop() or "") == 32, "one random token for all"
        token = workers[0]["PADDLIKE_JOB_TOKEN"]
        spy = subprocess.run(
            ["setpriv", "--reuid", "4242", "--regid", "4242", "--clear-groups",
             "/usr/bin/python3", "-c", SPY],
            input=json.dumps([secret, token]), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert spy.returncode == 0, spy.stderr
        assert json.loads(spy.stdout) == []
    finally:
        (out / "stop").write_text("")
        output = starter.communicate(timeout=60)[0]
    assert starter.returncode == 0, output
