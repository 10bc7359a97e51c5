"""A real torch DDP job (gloo, 2 ranks) whose rank 1 raises: torch writes that rank's
traceback behind `[rank1]: `, and every report still names the exception, not a frame —
the launcher's restart line, summary.json's root cause and restart cause, and the
reader's FIRST ERROR column."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch.distributed", reason="torch is not installed")

pytestmark = pytest.mark.timeout(240)

ERROR = "RuntimeError: boom on rank 1 at step 5"

DDP = """import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def train_step(model, optimizer, rank, step):
    if rank == 1 and step == 5:
        raise RuntimeError(f"boom on rank {rank} at step {step}")
    optimizer.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()


def main():
    dist.init_process_group("gloo")
    torch_hook = sys.excepthook  # torch's: each traceback line behind "[rankN]: "

    def hook(*exc):  # then the group ended, as a careful script does: without it torch's
        torch_hook(*exc)  # gloo threads may abort the interpreter's exit (SIGABRT, seen
        dist.destroy_process_group()  # in CI), and the rank's exception is lost

    sys.excepthook = hook
    rank = dist.get_rank()
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        train_step(model, optimizer, rank, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _run(*argv: str, cwd) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=200,
    )  # fmt: skip


def test_a_torch_ranks_exception_is_the_first_error_everywhere(tmp_path):
    (tmp_path / "ddp.py").write_text(DDP)
    done = _run("paddlike.launch", "--nproc_per_node", "2", "--max_restarts", "1",
                "--kill_timeout", "2", "ddp.py", cwd=tmp_path)  # fmt: skip
    log = tmp_path / "log"
    rank1 = (log / "workerlog.1").read_text(errors="replace")
    assert done.returncode == 1, done.stderr + rank1
    assert f"[rank1]: {ERROR}" in rank1  # what torch writes: each line behind its rank
    # the console's one line for the round a restart follows
    restart_line = f"trainer rank 1 exited with code 1: {ERROR} (log {log / 'workerlog.1'})"
    assert any(line.endswith(restart_line) for line in done.stderr.splitlines()), done.stderr
    summary = json.loads((log / "summary.json").read_text())
    assert summary["root_cause"]["error"] == ERROR
    assert summary["restart_causes"] == [
        {"round": 1, "cause": "trainer rank 1 exited with code 1", "error": ERROR}
    ]
    read = _run("paddlike.logs", "log", cwd=tmp_path)
    assert read.returncode == 1, read.stderr
    (row,) = [line for line in read.stdout.splitlines() if "workerlog.1 " in line]
    assert row.rstrip().endswith(ERROR), read.stdout
    assert f"1 restart: trainer rank 1 exited with code 1: {ERROR}" in read.stdout
