"""The cluster options without --hostfile: DeepSpeed's one-machine meanings (--num_gpus N,
--include localhost:ids) or one line naming the option, exit 2, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

LAUNCH = [sys.executable, "-m", "paddlike.launch"]
needs_no_gpu = pytest.mark.skipif(
    os.path.isdir("/proc/driver/nvidia/gpus"), reason="this machine has NVIDIA GPUs"
)


def _run(tmp_path, *args: str, env: dict[str, str] | None = None):
    (tmp_path / "train.py").write_text("print('RAN')\n")
    return subprocess.run(
        [*LAUNCH, "--log_dir", str(tmp_path / "log"), *args, "train.py"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env or dict(os.environ),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "processes"),
    [
        (("--num_gpus", "2"), "2 process(es)"),
        (("--include", "localhost:0,1,3"), "3 process(es)"),
        (("--num_nodes", "1"), "1 process(es)"),
    ],
)
def test_deepspeeds_one_machine_spellings_pick_this_machines_gpus(
    tmp_path, args, processes
) -> None:
    done = _run(tmp_path, *args, "--dry_run")
    assert done.returncode == 0, done.stderr
    assert processes in done.stdout.splitlines()[0]


@needs_no_gpu
@pytest.mark.parametrize("typed", ["--num_gpus", "--num_accelerators"])
def test_num_gpus_without_gpus_is_refused_by_its_own_name_not_run_on_one_cpu_worker(
    tmp_path, typed
) -> None:
    done = _run(tmp_path, typed, "2")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "RAN" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{typed} 2: no NVIDIA GPU found on this machine" in lines[0]
    # the CPU way keeps the --local_rank=N a DeepSpeed script reads (a trial: without it the
    # script ran as one process each, silently)
    assert "--devices cpu --nproc_per_node 2 --pass_local_rank" in lines[0]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--num_nodes", "2"), "--num_nodes: needs --hostfile FILE"),
        (("--export", "A"), "--export: needs --hostfile FILE"),
        (("--remote_python", "/x/python"), "--remote_python: needs --hostfile FILE"),
        (("--ssh_args=-v",), "--ssh_args: needs --hostfile FILE"),
        (("--ssh_port", "2222"), "--ssh_port: needs --hostfile FILE"),
        (("--force_multi",), "--force_multi: needs --hostfile FILE"),
        (("--launcher", "ssh"), "--launcher ssh: needs --hostfile FILE"),
        (("--launcher", "pdsh"), "--launcher pdsh: needs --hostfile FILE"),
        (("--include", "h1:0"), "--include: host 'h1' needs --hostfile FILE"),
        (("--no_ssh_check",), "--no_ssh_check: not skipped here"),
        (("--no_ssh",), "--no_ssh: needs --hostfile FILE and --node_rank"),  # not --no_ssh_check
        (("--export_prefixes", "NCCL"), "--export_prefixes: needs --hostfile FILE"),
        # DeepSpeed refuses these together; the include is not dropped
        (("--num_gpus", "1", "-i", "localhost:3"), "--num_gpus: cannot be combined with"),
        (("--num_nodes", "1", "-e", "localhost:0"), "--num_nodes: cannot be combined with"),
        (("--num_gpus", "2", "--nproc_per_node", "2"), "--num_gpus: says this machine's GPUs"),
    ],
)
def test_a_hostfile_only_option_without_a_hostfile_is_one_line_and_exit_2(
    tmp_path, args, line
) -> None:
    done = _run(tmp_path, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert line in done.stderr
    assert "RAN" not in done.stdout and not (tmp_path / "log").exists()


def test_slurm_without_a_hostfile_outside_an_allocation_is_refused_before_srun(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = "/nonexistent"  # no srun: the refusal comes before it is looked for
    done = _run(tmp_path, "--launcher", "slurm", env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "paddlike.launch: error: --launcher slurm: not inside a Slurm allocation (no "
        "SLURM_JOB_ID): run it under salloc or sbatch, or give --hostfile with --launcher ssh"
    )


@needs_no_gpu
def test_exclude_on_a_machine_without_gpus_says_so(tmp_path) -> None:
    done = _run(tmp_path, "--exclude", "localhost:1", env=dict(os.environ))
    assert done.returncode == 2
    assert "--exclude: no NVIDIA GPU found on this machine" in done.stderr


def test_export_prefixes_from_its_variable_is_no_mistake_on_one_machine(tmp_path) -> None:
    env = {**os.environ, "PADDLIKE_EXPORT_PREFIXES": "none"}  # a shell's cluster setting
    done = _run(tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "RAN" in (tmp_path / "log" / "workerlog.0").read_text()


NO_GPU = "no NVIDIA GPU found on this node (/proc/driver/nvidia/gpus is missing)"
ON_CPUS = (
    "to run CPU workers, name the hosts without GPU ids and give --devices cpu (with a "
    "hostfile, each host's slots become CPU workers)"
)


@needs_no_gpu
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--include", "localhost:0,1"],
         f"--include localhost:0,1: {NO_GPU}, got '0,1'; {ON_CPUS}"),
        (["--hostfile", "hf", "--include", "localhost:0,1"],
         f"--include localhost:0,1: {NO_GPU}, got '0,1'; {ON_CPUS}"),
        (["--hostfile", "hf", "--exclude", "localhost:1"],
         f"--exclude localhost:1: {NO_GPU}, got '0'; {ON_CPUS}"),
    ],
)  # fmt: skip
def test_gpu_ids_picked_on_a_machine_without_gpus_are_named_as_typed(tmp_path, args, line) -> None:
    """Not as the `--gpus` they become: the user never typed that (trials tripped on it);
    with what runs CPU workers instead, which does."""
    (tmp_path / "hf").write_text("localhost slots=2\n")
    done = _run(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"paddlike.launch: error: {line}"
    assert "RAN" not in done.stdout and not (tmp_path / "log").exists()
    hosts = ["--hostfile", "hf"] if "--hostfile" in args else ["--include", "localhost"]
    advised = _run(tmp_path, *hosts, "--devices", "cpu", "--dry_run")
    assert advised.returncode == 0, advised.stderr
    assert f"{2 if '--hostfile' in args else 1} process(es)" in advised.stdout


def test_slurm_with_a_hostfile_outside_an_allocation_is_refused_before_srun(tmp_path) -> None:
    (tmp_path / "hf").write_text("h0 slots=1\nh1 slots=1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    done = _run(tmp_path, "--hostfile", "hf", "--launcher", "slurm", env=env)
    assert done.returncode == 2, done.stderr
    assert "--launcher slurm: not inside a Slurm allocation (no SLURM_JOB_ID)" in done.stderr
    assert "RAN" not in done.stdout
