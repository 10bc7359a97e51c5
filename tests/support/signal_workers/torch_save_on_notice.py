"""A torch script as users write them: gloo, a DataLoader with 2 worker processes, its own
SIGTERM handler (it notes the signal and finishes its step), and
`paddlike.distributed.should_stop(step)` to save the same step as every other rank. Its save
reads one more batch: the DataLoader's workers must still be there.

argv: <out> [slow rank]. Writes <out>/ready.<rank> after its first step, <out>/saved.<rank>
(the step) and <out>/ckpt.<rank>.pt. The slow rank (none by default) writes
<out>/saving.<rank> at the stop step, then takes 60 s to save: a save that a second signal
to its launcher cuts short."""

import os
import signal
import sys
import time

import torch
import torch.distributed as tdist
from torch.utils.data import DataLoader

import paddlike.distributed as dist

out = sys.argv[1]
slow_rank = int(sys.argv[2]) if len(sys.argv) > 2 else -1
sigterm = False


def on_sigterm(signum, frame):  # the script's own: finish the step, then save
    global sigterm
    sigterm = True


signal.signal(signal.SIGTERM, on_sigterm)
tdist.init_process_group("gloo")
rank = tdist.get_rank()
loader = DataLoader(range(10**7), batch_size=4, num_workers=2)
batches = iter(loader)
weights = torch.zeros(4)
for step in range(10**9):
    batch = next(batches).float()
    tdist.all_reduce(batch)
    weights += batch / 1e6
    time.sleep(0.02)
    if dist.should_stop(step):
        extra = next(batches)  # the save reads on: "DataLoader worker ... killed" otherwise
        if rank == slow_rank:
            with open(f"{out}/saving.{rank}", "w") as f:
                f.write(str(step))
            time.sleep(60)
        torch.save({"step": step, "weights": weights, "next": extra}, f"{out}/ckpt.{rank}.pt")
        with open(f"{out}/saved.{rank}", "w") as f:
            f.write(str(step))
        print(f"rank {rank} saved step {step} (SIGTERM seen: {sigterm})", flush=True)
        break
    if step == 0:
        with open(f"{out}/ready.{rank}", "w") as f:
            f.write(str(os.getpid()))
tdist.destroy_process_group()
