"""The cluster flow's decisions before anything starts, and --dry_run's commands."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from paddlike.contract import GPUS_GIVEN_AS, JOB_TOKEN, JOB_TOKEN_FILE
from paddlike.launch.cluster.start import forwarded_args, plan_remote_job
from paddlike.launch.context.options import UsageError, parse_options

LAUNCH = [sys.executable, "-m", "paddlike.launch"]


def test_the_cluster_options_stay_here_and_the_rest_goes_to_every_host() -> None:
    argv = [
        "-H", "hf", "--log-dir", "L", "--include=h0", "--launcher", "ssh", "--dry_run",
        "--ssh_args=-p 22", "--export", "A,B", "--max_restarts", "1", "--job_id", "J",
        "--log_overwrite", "--job_token", "T0P", "--job_token_file=f", "train.py",
        "--hostfile", "x",
    ]  # fmt: skip
    assert forwarded_args(argv) == (
        ("--log_dir", "L", "--max_restarts", "1", "--log_overwrite"),
        ("train.py", "--hostfile", "x"),  # the script's own arguments are its own
    )


def _plan(tmp_path, hostfile: str, *args: str, environ=None):
    path = tmp_path / "hf"
    path.write_text(hostfile)
    argv = ["--hostfile", str(path), *args, "train.py"]
    env = environ or {}
    return plan_remote_job(
        parse_options(argv, env), argv, env, python="/py", cwd=str(tmp_path), home=str(tmp_path)
    )


def test_a_plan_gives_every_host_the_same_job_id_and_python(tmp_path) -> None:
    job = _plan(tmp_path, "h0 slots=2\nh1 slots=2\n", "--job_id", "mine")
    assert job.hosts == ("h0", "h1") and job.job_id == "mine" and job.python == "/py"
    # DeepSpeed's --local_rank=N: the hosts' launchers see no --hostfile, so they are told
    assert job.launcher_args == ("--pass_local_rank",) and job.script == ("train.py",)
    other = _plan(tmp_path, "h0\n", "--remote_python", "/other/python")
    assert other.python == "/other/python" and other.job_id.startswith("job-")


@pytest.mark.parametrize(
    ("args", "forwarded"),
    [
        ((), ("--pass_local_rank",)),  # DeepSpeed's launcher gives every worker --local_rank
        (("--no_local_rank",), ()),  # DeepSpeed's switch: none, and not passed on either
        (("--pass_local_rank",), ("--pass_local_rank",)),  # once
        (("--launcher", "slurm"), ()),  # DeepSpeed's slurm runner passes none
        (("--launcher", "slurm", "--pass_local_rank"), ("--pass_local_rank",)),
    ],
)
def test_every_host_is_told_to_pass_local_rank_unless_no_local_rank(
    tmp_path, args, forwarded
) -> None:
    environ = {"SLURM_JOB_ID": "1"}
    assert _plan(tmp_path, "h0\nh1\n", *args, environ=environ).launcher_args == forwarded


def test_every_job_gets_a_token_the_given_one_or_a_fresh_random_one(tmp_path) -> None:
    first = _plan(tmp_path, "h0\nh1\n").environment[JOB_TOKEN]
    second = _plan(tmp_path, "h0\nh1\n").environment[JOB_TOKEN]
    assert len(first) == 32 and first != second
    given = _plan(tmp_path, "h0\nh1\n", environ={JOB_TOKEN: "from-shell"})
    assert given.environment[JOB_TOKEN] == "from-shell"  # not dropped
    token = tmp_path / "token"
    token.write_text("from-file\n")
    token.chmod(0o600)
    from_file = _plan(tmp_path, "h0\nh1\n", environ={JOB_TOKEN_FILE: str(token)})
    assert from_file.environment[JOB_TOKEN] == "from-file"
    typed = _plan(tmp_path, "h0\nh1\n", "--job_token", "typed")
    assert typed.environment[JOB_TOKEN] == "typed"
    assert "typed" not in typed.launcher_args


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--ips", "a,b"), "--ips: each host's launcher is given its own with --hostfile"),
        (("--node_rank", "0"), "--node_rank: each host's launcher is given its own"),
        (("--nproc_per_node", "2"), "--nproc_per_node: the hostfile's slots"),
    ],
)
def test_what_each_host_is_told_itself_cannot_be_given_for_all(tmp_path, args, message) -> None:
    with pytest.raises(UsageError, match=message):
        _plan(tmp_path, "h0 slots=1\nh1 slots=1\n", *args)


def test_nproc_per_node_passes_through_when_the_hostfile_has_no_slots(tmp_path) -> None:
    job = _plan(tmp_path, "h0\nh1\n", "--nproc_per_node", "2")
    assert job.launcher_args == ("--nproc_per_node", "2", "--pass_local_rank")


@pytest.mark.parametrize("spelling", ["--devices", "--gpus"])
def test_gpu_ids_with_slots_are_refused_by_the_spelling_typed(tmp_path, spelling) -> None:
    with pytest.raises(UsageError, match=f"^{spelling}: the hostfile's slots"):
        _plan(tmp_path, "h0 slots=2\nh1 slots=2\n", spelling, "0,1")


def test_the_gpu_ids_a_filter_picks_travel_with_what_the_user_typed(tmp_path) -> None:
    """A host given --gpus by --include names the --include in its refusals
    (`devices.gpus_named`); hosts given their slots are told nothing."""
    job = _plan(tmp_path, "a slots=2\nb slots=2\n", "--include", "a:0@b")
    assert [p.launcher_args() for p in job.picks] == [("--gpus", "0"), ("--slots", "2")]
    assert job.environment[GPUS_GIVEN_AS] == "--include a:0@b"
    assert GPUS_GIVEN_AS not in _plan(tmp_path, "a slots=2\nb slots=2\n").environment


def test_devices_cpu_with_a_hostfile_gives_each_host_its_slots_of_cpu_workers(tmp_path) -> None:
    job = _plan(tmp_path, "h0 slots=2\nh1 slots=3\n", "--devices", "cpu")
    assert job.launcher_args == ("--devices", "cpu", "--pass_local_rank")  # to every host
    assert [p.launcher_args() for p in job.picks] == [("--slots", "2"), ("--slots", "3")]
    with pytest.raises(UsageError, match=r"^--devices cpu: --include/--exclude name GPU ids"):
        _plan(tmp_path, "h0 slots=2\nh1 slots=3\n", "--devices", "cpu", "-i", "h0:1")


def test_deepspeeds_prefixes_are_carried_unless_turned_off(tmp_path) -> None:
    shell = {"NCCL_SOCKET_IFNAME": "eth9", "PYTHONPATH": "/src", "UCX_TLS": "rc", "HOME": "/h"}
    (tmp_path / ".deepspeed_env").write_text("NCCL_SOCKET_IFNAME=ib0\n")
    (tmp_path / ".deepspeed_env").chmod(0o600)  # its values are secrets: no one else's to read

    def carried(*args: str) -> dict[str, str]:  # the job's fresh token travels beside them
        environment = dict(_plan(tmp_path, "h0\nh1\n", *args, environ=shell).environment)
        assert len(environment.pop(JOB_TOKEN)) == 32
        return environment

    assert carried() == {"NCCL_SOCKET_IFNAME": "ib0", "PYTHONPATH": "/src", "UCX_TLS": "rc"}
    only = carried("--export_prefixes", "PYTHON")
    assert only == {"PYTHONPATH": "/src", "NCCL_SOCKET_IFNAME": "ib0"}
    off = carried("--export_prefixes", "none")
    assert off == {"NCCL_SOCKET_IFNAME": "ib0"}  # the env file's alone


def _dry_run(tmp_path, *args: str, env=None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "hf").write_text("h0 slots=2\nh1 slots=2\n")
    return subprocess.run(
        [*LAUNCH, "--hostfile", str(tmp_path / "hf"), "--dry_run", *args, "train.py", "--x", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path), **(env or {})},
    )


def test_dry_run_prints_each_hosts_ssh_command_and_script_with_secrets_hidden(tmp_path) -> None:
    (tmp_path / ".paddlike_env").write_text("FROM_FILE=file-secret\n")
    (tmp_path / ".paddlike_env").chmod(0o600)
    env = {"MINE": "export-secret", JOB_TOKEN: "TOPSECRET"}
    done = _dry_run(tmp_path, "--export", "MINE", "--export_prefixes", "none", env=env)
    assert done.returncode == 0, done.stderr
    for secret in ("file-secret", "export-secret", "TOPSECRET"):
        assert secret not in done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert {line.split()[0] for line in lines} == {"[h0]", "[h1]"}
    for rank, host in enumerate(("h0", "h1")):
        mine = [line.removeprefix(f"[{host}] ") for line in lines if line.startswith(f"[{host}]")]
        words = shlex.split(mine[0].removesuffix(" <<'SCRIPT'"))
        assert words[0] == "ssh" and "BatchMode=yes" in words
        assert words[-3:] == ["--", host, "exec /bin/sh -s"]
        script = [line.strip() for line in mine[1:-1]]
        assert script[0] == f"cd {tmp_path} 2>/dev/null || exit 201"
        for name in ("FROM_FILE", "MINE", JOB_TOKEN):
            assert f"export {name}=<hidden>" in script
        launcher = shlex.split(script[-1].removeprefix("exec "))
        assert launcher[launcher.index("--node_rank") + 1] == str(rank)
        # each host's launcher is told to give DeepSpeed's --local_rank=N to its workers
        assert launcher[-4:] == ["--pass_local_rank", "train.py", "--x", "1"]
        assert mine[-1] == "SCRIPT"
    assert not any(tmp_path.glob("paddlike-ssh-*"))


def test_dry_run_with_pdsh_prints_its_one_command_and_each_hosts_run_file(tmp_path) -> None:
    done = _dry_run(tmp_path, "--launcher", "pdsh", env={JOB_TOKEN: "TOPSECRET"})
    assert done.returncode == 0, done.stderr
    first, *rest = done.stdout.splitlines()
    assert first.startswith("PDSH_RCMD_TYPE=ssh PDSH_SSH_ARGS=")
    assert " pdsh -S -f 32 -w h0,h1 'exec /bin/sh .paddlike-run-" in first
    assert first.endswith("-%h.sh'")
    assert rest[0].startswith("[h0] .paddlike-run-") and "(mode 0600" in rest[0]
    assert "[h0]   export PADDLIKE_JOB_TOKEN=<hidden>" in rest
    assert "TOPSECRET" not in done.stdout


def test_dry_run_with_slurm_gives_the_secrets_in_sruns_environment(tmp_path) -> None:
    done = _dry_run(
        tmp_path, "--launcher", "slurm", "--export_prefixes", "none",
        env={JOB_TOKEN: "TOPSECRET"},
    )
    assert done.returncode == 0, done.stderr
    assert "TOPSECRET" not in done.stdout
    words = shlex.split(done.stdout)
    assert words[0] == "PADDLIKE_JOB_TOKEN=<hidden>"
    assert words[1:14] == [
        "srun", "--nodes", "2", "--ntasks-per-node", "1", "--nodelist", "h0,h1",
        "--kill-on-bad-exit=1", "--export=ALL", "--chdir", str(tmp_path), sys.executable, "-m",
    ]  # fmt: skip
    assert words[14:][:5] == ["paddlike.launch", "--job_id", words[16], "--slots", "2"]
    assert words[-3:] == ["train.py", "--x", "1"]


def test_a_token_typed_on_the_command_line_is_said_to_be_visible_here(tmp_path) -> None:
    done = _dry_run(tmp_path, "--job_token", "TOPSECRET")
    assert done.returncode == 0, done.stderr
    assert "--job_token on the command line can be read by every user" in done.stderr
    assert "TOPSECRET" not in done.stdout + done.stderr


def test_slurm_without_a_hostfile_takes_the_allocations_node_count() -> None:
    env = {**os.environ, "SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_ID": "7"}
    done = subprocess.run(
        [*LAUNCH, "--launcher", "slurm", "--export_prefixes", "none", "--dry_run", "train.py"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "PADDLIKE_JOB_TOKEN=<hidden> srun --nodes 3 --ntasks-per-node 1 --kill-on-bad-exit=1"
    )
    env.pop("SLURM_JOB_NUM_NODES")
    env.pop("SLURM_NNODES", None)
    env.pop("SLURM_JOB_ID")
    done = subprocess.run(
        [*LAUNCH, "--launcher", "slurm", "--dry_run", "train.py"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "paddlike.launch: error: --launcher slurm: not inside a Slurm allocation (no "
        "SLURM_JOB_ID): run it under salloc or sbatch, or give --hostfile with --launcher ssh"
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--launcher", "ssh"), "--launcher ssh: needs --hostfile FILE"),
        (("--hostfile", "/nonexistent/hf"), "--hostfile: cannot read '/nonexistent/hf'"),
        (("--launcher", "openmpi"), "--launcher: MPI launchers start every rank themselves"),
    ],
)
def test_bad_cluster_input_is_one_line_and_exit_2(args, line) -> None:
    done = subprocess.run([*LAUNCH, *args, "train.py"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert line in done.stderr


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1", "::1"])
def test_a_loopback_name_beside_other_hosts_is_refused(tmp_path, name) -> None:
    """Each host would reach itself by that name: node 0 would be wrong on every other."""
    with pytest.raises(UsageError, match=f"--hostfile: '{name}' beside other hosts names a"):
        _plan(tmp_path, f"{name} slots=1\nnode-b slots=1\n")
    assert _plan(tmp_path, f"{name} slots=1\nnode-b slots=1\n", "-e", "node-b").hosts == (name,)
