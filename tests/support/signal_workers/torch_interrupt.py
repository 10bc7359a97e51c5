"""A torch.distributed script (gloo) that cleans up on Ctrl-C: after one all_reduce it
writes <out>/ready.<rank> and waits; `except KeyboardInterrupt:` prints "cleanup ran".

argv: <out> [catch | ignore_int | ignore_all]. `ignore_int` ignores SIGINT (SIGTERM ends
it); `ignore_all` ignores SIGINT and SIGTERM (only SIGKILL ends it)."""

import os
import signal
import sys
import time

import torch
import torch.distributed as tdist

out, how = sys.argv[1], sys.argv[2]
if how in ("ignore_int", "ignore_all"):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
if how == "ignore_all":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
tdist.init_process_group("gloo")
rank = tdist.get_rank()
t = torch.ones(2)
tdist.all_reduce(t)
print(f"rank {rank} ready: {t.tolist()}", flush=True)
try:  # before "ready": a SIGINT right after the file appears must land in the try
    with open(os.path.join(out, f".ready.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(out, f".ready.{rank}"), os.path.join(out, f"ready.{rank}"))
    end = time.monotonic() + 60
    while time.monotonic() < end:
        time.sleep(0.05)  # waiting for the signal the test sends
    sys.exit(3)  # the test forgot to send it
except KeyboardInterrupt:
    print(f"rank {rank}: cleanup ran", flush=True)
    sys.exit(0)
