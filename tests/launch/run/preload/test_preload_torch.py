"""--preload torch with real torch (CPU build, `make torch-env`): a gloo job whose rank 1
exits during step 5 restarts under --max_restarts 1, every worker of both rounds forked
from the zygote, and the script's own traceback is the one a cold start prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.launch.run.preload.conftest import launch

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(300)

SCRIPT = """
import os, sys
preloaded = "torch" in sys.modules
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, restart = dist.get_rank(), int(os.environ["PADDLIKE_RESTART_COUNT"])
print("PRELOADED", preloaded, "CUDA", torch.cuda.is_initialized(), "RESTART", restart, flush=True)
for step in range(8):
    t = torch.ones(4) * (rank + 1)
    dist.all_reduce(t)
    assert t[0].item() == 3.0
    print("STEP", step, "RESTART", restart, flush=True)
    if rank == 1 and restart == 0 and step == 5:
        sys.exit(3)
dist.destroy_process_group()
"""


def test_a_torch_job_restarts_with_every_worker_forked_from_a_zygote_that_imported_torch(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    done = launch(
        tmp_path,
        "--nproc_per_node",
        "2",
        "--max_restarts",
        "1",
        "--preload",
        "torch",
        "train.py",
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert "--preload" not in done.stderr  # torch is safe to fork after: no warning
    assert "restart 1 of 1 after: trainer rank 1 exited with code 3" in done.stderr
    for i in range(2):
        lines = (tmp_path / "log" / f"workerlog.{i}").read_text().splitlines()
        starts = [ln for ln in lines if ln.startswith("PRELOADED")]
        assert starts == [f"PRELOADED True CUDA False RESTART {r}" for r in (0, 1)]
        assert "STEP 7 RESTART 1" in lines
        assert not any("preload/fresh.py" in ln for ln in lines)  # the script's frames only
