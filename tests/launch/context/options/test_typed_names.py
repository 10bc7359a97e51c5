"""Every error line names the option as the user gave it: an alias (--devices for --gpus),
torchrun's dashes, an abbreviation, another launcher's variable, or the DeepSpeed filter
a --gpus was derived from; never a spelling the user did not write (a user trial's
findings). Each case is the launcher's one line on stderr and exit 2, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.contract import GPUS_GIVEN_AS

pytestmark = pytest.mark.timeout(120)

no_gpu = pytest.mark.skipif(
    os.path.exists("/proc/driver/nvidia/gpus") or os.path.exists("/dev/nvidiactl"),
    reason="this machine has NVIDIA GPUs",
)
NO_GPU = "no NVIDIA GPU found on this node (/proc/driver/nvidia/gpus is missing)"


def _launch(tmp_path: Path, *argv: str, **environ: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "t.py").write_text("print('RAN')\n")
    theirs = ("PADDLIKE_", "PET_", "PADDLE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(theirs)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run(
        [sys.executable, "-m", "paddlike.launch", *argv, "t.py"],
        cwd=tmp_path, env={**env, **environ}, capture_output=True, text=True, timeout=90,
    )  # fmt: skip


def _refused(done: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    """The one error line of a launch refused with exit 2 that started nothing."""
    assert done.returncode == 2, done.stderr
    assert "RAN" not in done.stdout and not (tmp_path / "log").exists()
    errors = [ln for ln in done.stderr.splitlines() if ": error: " in ln]
    assert len(errors) == 1, done.stderr
    return errors[0]


@no_gpu
@pytest.mark.parametrize(
    ("argv", "environ", "line"),
    [
        (["--devices", "0,1"], {},
         f"--devices: {NO_GPU}, got '0,1'; drop --devices to run CPU workers"),
        (["--selected_gpus", "0"], {},
         f"--selected_gpus: {NO_GPU}, got '0'; drop --selected_gpus to run CPU workers"),
        ([], {"PADDLE_DEVICES": "0,1"},
         f"--devices (from PADDLE_DEVICES): {NO_GPU}, got '0,1'; unset PADDLE_DEVICES to run "
         "CPU workers"),
        ([], {"PADDLIKE_GPUS": "0"},
         f"--gpus (from PADDLIKE_GPUS): {NO_GPU}, got '0'; unset PADDLIKE_GPUS to run CPU "
         "workers"),
        # a host the cluster starter started with --gpus from --include: named as given there
        (["--gpus", "0"], {GPUS_GIVEN_AS: "--include nodea:0@nodeb"},
         f"--include nodea:0@nodeb: {NO_GPU}, got '0'; to run CPU workers, name the hosts "
         "without GPU ids and give --devices cpu (with a hostfile, each host's slots become CPU "
         "workers)"),
    ],
)  # fmt: skip
def test_gpus_this_machine_lacks_are_named_as_given(tmp_path, argv, environ, line) -> None:
    done = _launch(tmp_path, *argv, **environ)
    assert _refused(done, tmp_path) == f"paddlike.launch: error: {line}"


@no_gpu
def test_a_typed_gpus_is_named_as_typed_even_where_the_starter_said_otherwise(tmp_path) -> None:
    """The variable names only the --gpus the starter wrote: a user's --devices wins."""
    done = _launch(tmp_path, "--devices", "0", **{GPUS_GIVEN_AS: "--include a:0"})
    assert _refused(done, tmp_path) == (
        f"paddlike.launch: error: --devices: {NO_GPU}, got '0'; drop --devices to run CPU workers"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--max-restarts", "two"], "--max-restarts: expected an integer >= 0, got 'two'"),
        (["--max-restarts=two"], "--max-restarts: expected an integer >= 0, got 'two'"),
        (["--node-rank", "1"], "--node-rank: 1 is out of range for 1 node(s)"),
        (["--rank", "3"], "--rank: 3 is out of range for 1 node(s)"),
        (["--local-addr="], "--local-addr: expected a non-empty value, got ''"),
        (["--nproc_per_nod", "x"],
         "--nproc_per_nod: expected a positive integer, got 'x'; or gpu, cpu, auto (as in "
         "torchrun)"),
        # torchrun's own abbreviation of --local_ranks_filter (its meaning is kept)
        (["--local_rank", "x"],
         "--local_rank: expected 'all', 'none' or a comma-separated list of local worker "
         "indices, got 'x'"),
        (["--local_rank", "1"], "--local_rank: this node runs 1 trainer(s) (local indices 0..0), "
         "got '1'"),
        (["--nproc_per_node", "1", "--local-ranks-filter", "2", "--dry_run"],
         "--local-ranks-filter: this node runs 1 trainer(s) (local indices 0..0), got '2'"),
        # other launchers' options too
        (["--rdzv-backend", "zookeeper"],
         "--rdzv-backend: expected static, c10d, etcd or etcd-v2, got 'zookeeper'"),
        (["--rdzv-endpoint", "h:1", "--master", "h:2"],
         "--master: 'h:2' contradicts --rdzv-endpoint (which means --master h:1); drop one of "
         "them"),
    ],
)  # fmt: skip
def test_dashed_alias_and_abbreviated_spellings_are_named_as_typed(tmp_path, argv, line) -> None:
    done = _launch(tmp_path, "--devices", "cpu", *argv)
    assert _refused(done, tmp_path) == f"paddlike.launch: error: {line}"


def test_a_variable_is_named_with_the_option_it_stands_for(tmp_path) -> None:
    done = _launch(tmp_path, "--devices", "cpu", PADDLE_RANK="3")
    assert _refused(done, tmp_path) == (
        "paddlike.launch: error: --rank (from PADDLE_RANK): 3 is out of range for 1 node(s)"
    )
