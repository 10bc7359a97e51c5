"""paddlike's runtime, one all_reduce per step and heartbeat(step): rank 2 computes 3x
longer per step. Runs $2 steps (default: until stopped); writes $1/ready.<rank> at step 10."""

import os
import sys
import time

import numpy as np

import paddlike.distributed as dist

COMPUTE = 0.02


def main() -> None:
    dist.init_parallel_env()
    rank = dist.get_rank()
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10**9
    x = np.ones(256, np.float32)
    for step in range(1, steps + 1):
        time.sleep(COMPUTE * (3 if rank == 2 else 1))  # the step's computation
        dist.all_reduce(x)
        dist.heartbeat(step)
        if step == 10:
            open(os.path.join(sys.argv[1], f"ready.{rank}"), "w").close()


if __name__ == "__main__":
    main()
