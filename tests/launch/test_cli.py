"""Bad input end to end: exit 2, one line naming the option and the value, nothing
started, no log directory created. And --dry_run and --help."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MARKER_SCRIPT = "open('STARTED', 'w').close()\n"


def launch(tmp_path: Path, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "w.py").write_text(MARKER_SCRIPT)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "SLURM_"))}
    full_env.pop("PADDLE_TRAINERS", None)
    full_env.pop("POD_IP", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "paddlike.launch", *argv],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_rejected(result: subprocess.CompletedProcess, tmp_path: Path, starts: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"paddlike.launch: error: {starts}"), lines[0]
    assert not (tmp_path / "STARTED").exists()
    assert not (tmp_path / "log").exists()


NO_GPU = not os.path.isdir("/proc/driver/nvidia/gpus")


@pytest.mark.parametrize(
    ("argv", "env", "starts"),
    [
        (["--nproc_per_node", "x"], {}, "--nproc_per_node: expected a positive integer, got 'x'"),
        ([], {"PADDLIKE_NPROC_PER_NODE": "0"}, "--nproc_per_node (from PADDLIKE_NPROC_PER_NODE)"),
        (["--ips", "10.255.255.1"], {}, "--ips: no entry of '10.255.255.1' is an address of this"),
        (["--ips", "127.0.0.1,127.0.0.1"], {}, "--ips: entry '127.0.0.1' appears twice"),
        (["--ips", "127.0.0.1,localhost"], {}, "--ips: '127.0.0.1' and 'localhost' are the same"),
        (["--nnodes", "2"], {}, "--node_rank: needed with --nnodes 2 when --ips is not given"),
        (["--ips", "127.0.0.1,10.255.255.1", "--node_rank", "1"], {}, "--node_rank: 1 names"),
        (["--gpus", "3"], {"CUDA_VISIBLE_DEVICES": "0,1"}, "--gpus: 3 is not in CUDA_VISIBLE"),
        (["--run_mode", "ps-heter"], {}, "--heter_workers: needed with --run_mode ps-heter"),
        (["--console", "first"], {}, "--console: expected 'all', 'none'"),
        (["--tee", "first"], {}, "--tee: expected 0 (none), 1 (stdout), 2 (stderr), 3 (both)"),
        (["--nproc_per_node", "2", "--console", "0,2"], {}, "--console: "),
        (["--host", "10.255.255.1"], {}, "--host: '10.255.255.1' is not one of --ips"),
        (["--unknown_flag"], {}, "--unknown_flag: unknown option"),
        # a typo gets the option it was meant to be (issue 32)
        (
            ["--nprocs_per_node", "2"],
            {},
            "--nprocs_per_node: unknown option; did you mean --nproc_per_node? (see --help)",
        ),
        (["--nope"], {}, "--nope: unknown option (see --help)"),
        (
            ["-nproc_per_node", "2"],
            {},
            "-nproc_per_node: unknown option; did you mean --nproc_per_node? (see --help)",
        ),
        # named as typed, pointing to where torchrun's word goes
        (
            ["--devices", "gpu"],
            {},
            "--devices: expected a comma-separated list of GPU ids, e.g. 0,1, or cpu, got "
            "'gpu'; for one worker per visible GPU leave it out, or give --nproc_per_node gpu "
            "(as in torchrun)",
        ),
        (["--servers", "127.0.0.1:7000"], {}, "--workers: needed too"),
        (
            ["--servers", "10.255.255.1:7000", "--workers", "10.255.255.1"],
            {},
            "--servers/--workers: this node has no role",
        ),
        (
            [],
            {
                "SLURM_JOB_NODELIST": "127.0.0.1,10.255.255.1",
                "SLURM_NODEID": "0",
                "SLURM_NNODES": "3",
            },
            "SLURM_NNODES: 3 contradicts SLURM_JOB_NODELIST",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_and_starts_nothing(tmp_path, argv, env, starts):
    assert_rejected(launch(tmp_path, *argv, "w.py", env=env), tmp_path, starts)


EXPECTED_STREAMS = "expected 0 (none), 1 (stdout), 2 (stderr), 3 (both) as in torchrun, or a map "
EXPECTED_STREAMS += "of local rank to those, e.g. 0:3,1:1"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        # what was typed, not the value with torchrun's default port appended
        (["--rdzv-endpoint", "127.0.0.1:abc", "--nnodes", "2"],
         "--master (from --rdzv-endpoint): expected a port number 1-65535, got '127.0.0.1:abc'"),
        # a lone number is a stream choice out of torchrun's range, not a list of ranks
        (["--tee", "4"], f"--tee: {EXPECTED_STREAMS}, got '4'"),
        (["-r", "5"], f"-r: {EXPECTED_STREAMS}, got '5'"),
        (["--tee", "0,1"], f"--tee: {EXPECTED_STREAMS}, got '0,1'; to choose which local "
         "workers the console shows, use --console 0,1 (torchrun's --local_ranks_filter)"),
        # the script's own options put before the script
        (["--nproc_per_node", "2", "--epochs", "3"],
         "--epochs: unknown option (see --help); if it is w.py's, put it after the script: "
         "python -m paddlike.launch [options] [--] w.py --epochs ..."),
        (["--nproc_per_node", "2", "--lr=0.1", "--"],
         "--lr=0.1: unknown option (see --help); if it is w.py's, put it after the script: "
         "python -m paddlike.launch [options] [--] w.py --lr ..."),
        # a misspelling of ours keeps its own hint alone
        (["--nprocs_per_node", "2"],
         "--nprocs_per_node: unknown option; did you mean --nproc_per_node? (see --help)"),
    ],
)  # fmt: skip
def test_the_line_quotes_what_was_typed_and_hints_only_where_the_hint_fits(tmp_path, argv, line):
    result = launch(tmp_path, *argv, "w.py")
    assert_rejected(result, tmp_path, "")
    assert result.stderr.strip() == f"paddlike.launch: error: {line}"


@pytest.mark.parametrize(
    ("argv", "starts"),
    [
        (["trian.py"], "training_script: 'trian.py' not found (working directory "),
        (["--no_python", "no-such-command-x"], "training_script: 'no-such-command-x' is not an"),
    ],
)
def test_a_missing_training_script_is_named_before_anything_starts(tmp_path, argv, starts):
    assert_rejected(launch(tmp_path, *argv), tmp_path, starts)


@pytest.mark.skipif(not NO_GPU, reason="this machine has an NVIDIA GPU")
def test_asking_for_a_missing_gpu_is_an_error(tmp_path):
    assert_rejected(launch(tmp_path, "--gpus", "0", "w.py"), tmp_path, "--gpus: no NVIDIA GPU")


def test_missing_training_script(tmp_path):
    assert_rejected(launch(tmp_path), tmp_path, "training_script: missing")


def test_dry_run_prints_every_process_and_creates_nothing(tmp_path):
    result = launch(tmp_path, "--dry_run", "--nproc_per_node", "2", "w.py", "--epochs", "3")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "[trainer rank 0] local index 0, device cpu" in out
    assert "[trainer rank 1] local index 1, device cpu" in out
    assert f"command: {sys.executable} -u w.py --epochs 3" in out
    assert "    PADDLE_TRAINERS_NUM=2" in out
    assert f"log {tmp_path / 'log' / 'workerlog.1'}" in out
    assert not (tmp_path / "STARTED").exists()
    assert not (tmp_path / "log").exists()


def test_dry_run_accepts_gpus_that_are_not_there(tmp_path):
    result = launch(tmp_path, "--dry_run", "--gpus", "0,1,2,3", "--nproc_per_node", "2", "w.py")
    assert result.returncode == 0, result.stderr
    assert "FLAGS_selected_gpus=2,3" in result.stdout
    assert "PADDLE_DISTRI_BACKEND=nccl" in result.stdout


def test_dry_run_of_gpus_this_node_lacks_says_a_launch_here_exits_2(tmp_path):
    if os.path.exists("/proc/driver/nvidia/gpus"):
        pytest.skip("this node has NVIDIA GPUs")
    result = launch(tmp_path, "--dry_run", "--gpus", "0", "w.py")
    assert result.returncode == 0, result.stderr
    devices = [ln for ln in result.stdout.splitlines() if ln.startswith("devices: ")]
    assert devices == [
        "devices: --gpus 0: one worker per GPU; warning: a launch on this node exits 2 (no "
        "NVIDIA GPU found on this node (/proc/driver/nvidia/gpus is missing), got '0'; drop "
        "--gpus to run CPU workers)"
    ]
    real = launch(tmp_path, "--gpus", "0", "w.py")
    assert (real.returncode, real.stderr.splitlines()) == (2, [
        "paddlike.launch: error: --gpus: no NVIDIA GPU found on this node "
        "(/proc/driver/nvidia/gpus is missing), got '0'; drop --gpus to run CPU workers"
    ])  # fmt: skip


def test_dry_run_in_ps_mode(tmp_path):
    result = launch(tmp_path, "--dry_run", "--server_num", "2", "--worker_num", "2", "w.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("TRAINING_ROLE=PSERVER") == 2
    assert result.stdout.count("TRAINING_ROLE=TRAINER") == 2
    assert "log " + str(tmp_path / "log" / "serverlog.1") in result.stdout


def test_help_groups_the_options(tmp_path):
    result = launch(tmp_path, "--help")
    assert result.returncode == 0
    for group in ("Paddle options", "torchrun/OneFlow compatible", "multi-node",
                  "parameter server", "output"):  # fmt: skip
        assert f"{group}:" in result.stdout


def test_dry_run_never_prints_the_job_token(tmp_path):
    result = launch(tmp_path, "--dry_run", "--job_token", "s3cret-value", "w.py")
    assert result.returncode == 0, result.stderr
    assert "PADDLIKE_JOB_TOKEN=<hidden>" in result.stdout
    assert "s3cret-value" not in result.stdout + result.stderr


def test_version_prints_the_version_and_starts_nothing(tmp_path):
    import paddlike

    result = launch(tmp_path, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"python -m paddlike.launch (paddlike {paddlike.__version__})\n"


def test_help_has_a_one_line_usage_then_the_common_options_first(tmp_path):
    out = launch(tmp_path, "--help", env={"COLUMNS": "100"}).stdout
    lines = out.splitlines()
    assert lines[0] == (
        "usage: python -m paddlike.launch [options] training_script [training_script_args ...]"
    )
    assert lines[1] == ""
    groups = [line for line in lines if line and not line[0].isspace() and line.endswith(":")]
    assert groups[:3] == ["positional arguments:", "options:", "common options:"], groups
    common = out[out.index("common options:") : out.index("Paddle options:")]
    for spelling in ("--nproc_per_node", "--gpus", "--nnodes", "--ips", "--master",
                     "--log_dir", "--max_restarts", "--dry_run", "--version"):  # fmt: skip
        assert f"  {spelling}" in common, spelling
    # each option's value is named once, not once per spelling
    assert "--gpus, --devices, --selected_gpus GPUS\n" in out


def test_help_lists_torchruns_spellings(tmp_path):
    out = launch(tmp_path, "--help").stdout
    assert "torchrun's options:" in out
    spellings = ("-t, --tee TEE", "-r, --redirects REDIRECTS", "--nproc-per-node",
                 "--local-ranks-filter", "--rdzv-endpoint", "--rdzv-backend", "--standalone",
                 "--role ROLE", "--max-restarts")  # fmt: skip
    for spelling in spellings:
        assert spelling in out, spelling


# --- many workers on few cores: one warning, the job runs ------------------------------


def _on_one_core() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _launch_on_one_core(tmp_path: Path, nproc: int) -> subprocess.CompletedProcess:
    (tmp_path / "w.py").write_text("pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "SLURM_"))}
    return subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", str(nproc),
         "--console", "none", "w.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        preexec_fn=_on_one_core,
    )  # fmt: skip


@pytest.mark.timeout(150)
def test_more_than_four_workers_per_core_warn_once_and_still_run(tmp_path):
    run = _launch_on_one_core(tmp_path, 5)
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, run.stderr
    assert warnings[0].startswith(
        "paddlike.launch: warning: 5 workers on this node, which has 1 CPU core for them and "
    ), warnings[0]
    assert "GiB of memory (" in warnings[0] and "above 4 workers per core" in warnings[0]
    assert (tmp_path / "log" / "workerlog.4").exists()


@pytest.mark.timeout(150)
def test_four_workers_per_core_do_not_warn(tmp_path):
    run = _launch_on_one_core(tmp_path, 4)
    assert run.returncode == 0, run.stderr
    assert "warning" not in run.stderr


def test_the_warning_names_workers_cores_and_memory(tmp_path, capsys):
    from paddlike.launch.main import CROWDED, _warn_crowded

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384000 kB\nMemFree: 1 kB\nMemAvailable:    8192000 kB\n")
    cores = len(os.sched_getaffinity(0))
    assert not _warn_crowded(CROWDED * cores, str(meminfo))
    assert _warn_crowded(CROWDED * cores + 1, str(meminfo))
    assert capsys.readouterr().err == (
        f"paddlike.launch: warning: {CROWDED * cores + 1} workers on this node, which has "
        f"{cores} CPU core{'s' if cores > 1 else ''} for them and 15.6 GiB of memory (7.8 GiB "
        "available): above 4 workers per core they mostly wait for each other; lower "
        "--nproc_per_node if this is not meant\n"
    )
    (tmp_path / "meminfo").write_text("garbage\n")
    assert _warn_crowded(CROWDED * cores + 1, str(meminfo))
    assert "CPU core" in capsys.readouterr().err  # memory unknown, still one line
