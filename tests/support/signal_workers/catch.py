"""A worker that catches SIGUSR1 and SIGUSR2: each arrival is a marker file
(<out>/caught.<rank>.<SIGNAME>.<n>), and the worker goes on until <out>/stop exists (then
exits 0) or 60 s pass (exits 3: the test forgot it)."""

from __future__ import annotations

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
(out / f"ready.{rank}").write_text(f"{os.getpid()}\n")
print(f"rank {rank} ready", flush=True)
end = time.monotonic() + 60
while not (out / "stop").exists():
    if time.monotonic() > end:
        sys.exit(3)
    time.sleep(0.02)  # a test's file is the only thing to wait on; the signal interrupts it
print(f"rank {rank} done after {count['n']} signals", flush=True)
