"""A training loop that saves at the job's stop step: `dist.should_stop(step)` after each
step, then a "checkpoint" <out>/saved.<rank> holding the step, and exit 0.

argv: <out> [step_time] [save_time]. Writes <out>/ready.<rank> after its first step (the
test's moment to send the notice); `save_time`: seconds the save takes (a save that
outlives the grace)."""

import os
import sys
import time

import paddlike.distributed as dist

out = sys.argv[1]
step_time = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
save_time = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
rank = int(os.environ["PADDLE_TRAINER_ID"])
for step in range(10**9):
    time.sleep(step_time)  # the step's work
    if dist.should_stop(step):
        time.sleep(save_time)
        with open(os.path.join(out, f".saved.{rank}"), "w") as f:
            f.write(str(step))
        os.replace(os.path.join(out, f".saved.{rank}"), os.path.join(out, f"saved.{rank}"))
        print(f"rank {rank} saved step {step}", flush=True)
        break
    if step == 0:
        with open(os.path.join(out, f"ready.{rank}"), "w") as f:
            f.write(str(os.getpid()))
