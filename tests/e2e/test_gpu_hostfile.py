"""DeepSpeed's hostfile meanings on a fake 8-GPU node (issue 31, points 6-9): slots=N is
one worker on each of GPUs 0..N-1 (the rest unused), --num_gpus N the same over the
slots, --include/--exclude name GPU ids; --devices cpu makes the slots CPU workers. The
hostfile names this machine alone, so its job runs here (no ssh) and --dry_run shows what
every host's launcher is given: the same --slots as over ssh (`cluster.selection.Pick`).
"""

from __future__ import annotations

import pytest

from tests.e2e.test_gpu_nodes import _needs_mount_namespaces, dry_run, launch

__all__ = ["_needs_mount_namespaces"]  # its skip applies here too (autouse)
pytestmark = pytest.mark.timeout(120)


def _gpus(n: int) -> list[str]:
    return [f"gpu {i}" for i in range(n)]


CASES = [
    # (hostfile line, options, device text per worker, words in the devices line)
    ("localhost slots=4", (), _gpus(4), "--slots 4: one worker on each of GPUs 0..3 (4 unused)"),
    ("localhost slots=3", (), _gpus(3), "--slots 3: one worker on each of GPUs 0..2 (5 unused)"),
    ("localhost slots=8", (), _gpus(8), "--slots 8: one worker on each of GPUs 0..7"),
    ("localhost slots=8", ("--num_gpus", "2"), _gpus(2), "--slots 2"),
    ("localhost slots=8", ("--num_accelerators", "2"), _gpus(2), "--slots 2"),
    ("localhost slots=8", ("-i", "localhost:1,3"), ["gpu 1", "gpu 3"], "--gpus 1,3"),
    ("localhost slots=8", ("-i", "localhost:1@localhost:0,1"), _gpus(2), "--gpus 0,1"),
    ("localhost slots=4", ("-e", "localhost:0"), ["gpu 1", "gpu 2", "gpu 3"], "--gpus 1,2,3"),
    ("localhost", (), _gpus(8), "one worker per GPU"),  # no slots: the host's own GPUs
    ("localhost slots=3", ("--devices", "cpu"), ["cpu"] * 3, "--slots 3, --devices cpu"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "options", "devices", "why_has"), CASES)
def test_deepspeeds_slots_and_filters_on_an_8_gpu_host(
    tmp_path, line, options, devices, why_has
) -> None:
    (tmp_path / "hostfile").write_text(line + "\n")
    why, workers = dry_run(tmp_path, 8, "--hostfile", str(tmp_path / "hostfile"), *options)
    assert [d for d, _ in workers] == devices
    assert why_has in why


ERRORS = [
    ("localhost slots=12", (), "--slots: 12 (the hostfile's slots=12 for this host) asks for "
     "more GPUs than this node has visible (8 GPUs found by /proc/driver/nvidia/gpus)"),
    ("localhost slots=4", ("--num_gpus", "1", "-i", "localhost:3"),
     "--num_gpus: cannot be combined with --include/--exclude"),
    ("localhost slots=4", ("--nproc_per_node", "2"), "--nproc_per_node: the hostfile's slots"),
    ("localhost slots=4", ("--devices", "0,1"), "--devices: the hostfile's slots"),
    ("localhost slots=4", ("--no_ssh",), "--no_ssh: needs --hostfile FILE and --node_rank I"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "options", "message"), ERRORS)
def test_what_deepspeed_refuses_or_we_refuse_is_one_line_and_exit_2(
    tmp_path, line, options, message
) -> None:
    (tmp_path / "hostfile").write_text(line + "\n")
    run = launch(tmp_path, 8, "--hostfile", str(tmp_path / "hostfile"), *options)
    assert run.returncode == 2, run.stdout + run.stderr
    errors = [x for x in run.stderr.splitlines() if ": error: " in x]
    assert len(errors) == 1 and message in errors[0], run.stderr
    assert not (tmp_path / "env").exists() or not any((tmp_path / "env").iterdir())


@pytest.mark.parametrize(
    ("options", "devices"),
    [
        (("--num_gpus", "2"), _gpus(2)),  # no hostfile: this machine's GPUs 0,1
        (("--include", "localhost:2,5"), ["gpu 2", "gpu 5"]),
        (("--slots", "3"), _gpus(3)),  # what each host's launcher is given
    ],
)
def test_without_a_hostfile_the_same_meanings_on_this_machine(tmp_path, options, devices):
    _, workers = dry_run(tmp_path, 8, *options)
    assert [d for d, _ in workers] == devices
