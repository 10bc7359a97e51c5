"""The in-process restart tests' script, written into each test's directory: rank 1 exits
during step 5 of the first round; what every rank saw, as JSON in OUT/seen.<rank>.<restart>.json.

    train.py OUT HOW RUNTIME
      HOW      plain (no `restartable`), inside (restartable; groups formed in fn),
               raise1 (as inside, but rank 1 raises instead of exiting),
               before (groups formed before `restartable(fn)`), raise (rank 0's fn raises
               ValueError at step 2 of every round: its own failure, not a peer's)
      RUNTIME  paddlike (its CPU runtime, numpy arrays) or torch (gloo)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.launch.run.preload.conftest import HEAVY

TRAIN = r"""
import json, os, sys, time
preloaded = "heavy" in sys.modules
import heavy  # 2 s at import: what a kept process does not pay again
out, how, runtime = sys.argv[1], sys.argv[2], sys.argv[3]
import paddlike.distributed as dist
if runtime == "torch":
    import torch
    import torch.distributed as tdist
else:
    import numpy as np

def form():
    if runtime == "torch":
        if not tdist.is_initialized():
            tdist.init_process_group("gloo")
    elif not dist.is_initialized():
        dist.init_parallel_env()

def all_reduce(rank):
    if runtime == "torch":
        t = torch.ones(4) * (rank + 1)
        tdist.all_reduce(t)
        return t[0].item()
    x = np.ones(4) * (rank + 1)
    dist.all_reduce(x)
    return float(x[0])

def main():
    form()
    rank, restart = int(os.environ["RANK"]), int(os.environ["PADDLIKE_RESTART_COUNT"])
    world = int(os.environ["WORLD_SIZE"])
    keys = ("RANK", "WORLD_SIZE", "MASTER_PORT", "PADDLIKE_RESTART_COUNT",
            "TORCHELASTIC_RESTART_COUNT", "PADDLE_TRAINER_ENDPOINTS")
    seen = {"pid": os.getpid(), "preloaded": preloaded, "env": {k: os.environ.get(k) for k in keys}}
    for step in range(8):
        total = all_reduce(rank)
        assert total == world * (world + 1) / 2, total
        if step == 0:
            seen["first_step"] = time.time()
            path = os.path.join(out, f"seen.{rank}.{restart}.json")
            with open(path + ".tmp", "w") as f:
                json.dump(seen, f)
            os.replace(path + ".tmp", path)
        print("STEP", step, "RESTART", restart, flush=True)
        if rank == 1 and restart == 0 and step == 5:
            with open(os.path.join(out, "exit"), "w") as f:
                f.write(repr(time.time()))
            if how == "raise1":  # its own exception: asks the launcher, told "own"
                raise RuntimeError("rank 1 fails at step 5")
            os._exit(3)  # as a crash
        if how == "raise" and rank == 0 and step == 2:
            raise ValueError("rank 0's own bug")
        time.sleep(0.05)
    return "fn returned"

if how == "before":
    form()
if how == "plain":
    main()
else:
    print(dist.restartable(main), flush=True)
"""


def write_train(tmp: Path) -> Path:
    (tmp / "heavy.py").write_text(HEAVY)
    (tmp / "train.py").write_text(TRAIN)
    (tmp / "out").mkdir()
    return tmp / "train.py"


def seen(out: Path) -> dict[str, dict]:
    """seen.<rank>.<restart>.json of every rank, by "<rank>.<restart>"."""
    return {
        p.name[len("seen.") : -len(".json")]: json.loads(p.read_text())
        for p in sorted(out.glob("seen.*.json"))
    }


@pytest.fixture
def train(tmp_path: Path) -> Path:
    return write_train(tmp_path)
