"""A worker that catches SIGUSR1 and SIGUSR2: each arrival is a marker file
(<out>/caught.<rank>.<SIGNAME>.<n>), and the worker goes on until <out>/stop exists (then
exits 0) or 60 s pass (exits 3: the test forgot it). <out>/ready.<rank> holds what the
launcher gave it (the contract's names, its pid, the Slurm job it runs in) as JSON."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

out = Path(sys.argv[1])
rank = os.environ.get("RANK", "0")
count = {"n": 0}


def caught(signum: int, frame: object) -> None:
    count["n"] += 1
    name = signal.Signals(signum).name
    (out / f"caught.{rank}.{name}.{count['n']}").write_text(f"{os.getpid()}\n")


signal.signal(signal.SIGUSR1, caught)
signal.signal(signal.SIGUSR2, caught)
SEEN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PADDLE_CURRENT_ENDPOINT", "PADDLE_TRAINER_ENDPOINTS",
        "PADDLE_NNODES", "MASTER_ADDR", "SLURM_JOB_ID", "SLURMD_NODENAME")  # fmt: skip
facts = {name: os.environ.get(name) for name in SEEN}
facts["pid"] = os.getpid()
(out / f"ready.{rank}.tmp").write_text(json.dumps(facts))
os.replace(out / f"ready.{rank}.tmp", out / f"ready.{rank}")
print(f"rank {rank} ready", flush=True)
end = time.monotonic() + 60
while not (out / "stop").exists():
    if time.monotonic() > end:
        sys.exit(3)
    time.sleep(0.02)  # a test's file is the only thing to wait on; the signal interrupts it
print(f"rank {rank} done after {count['n']} signals", flush=True)
