"""paddlike's runtime: all_reduce steps, one line a step, until the launcher ends it.
Each rank writes $1/ready.<rank> after its 3rd step (a test then stops one rank)."""

import os
import sys
import time

import numpy as np

import paddlike.distributed as dist


def main() -> None:
    dist.init_parallel_env()
    rank = dist.get_rank()
    x = np.ones(256, np.float32)
    step = 0
    while True:
        step += 1
        dist.all_reduce(x)
        x[:] = 1.0
        time.sleep(0.01)  # a step's own work
        if step == 3:
            open(os.path.join(sys.argv[1], f"ready.{rank}"), "w").close()
        if step % 50 == 0:
            print(f"rank {rank} step {step}", flush=True)


if __name__ == "__main__":
    main()
