"""paddlike's own runtime: four agreed all_reduces, then rank 1 goes astray on the 5th:
`broadcast` (it calls broadcast where the others call all_reduce: the runtime fails
the job) or `skip` (it never calls the 5th and sleeps in `load_batch`: the others wait).
Each rank writes $1/ready.<rank> just before the 5th collective."""

import os
import sys
import time

import numpy as np

import paddlike.distributed as dist


def load_batch() -> None:
    time.sleep(600)


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    dist.init_parallel_env()
    rank = dist.get_rank()
    x = np.ones(1024, np.float32)
    for _ in range(4):
        dist.all_reduce(x)
    open(os.path.join(out, f"ready.{rank}"), "w").close()
    if rank != 1:
        dist.all_reduce(x)
    elif mode == "broadcast":
        dist.broadcast(x, src=0)
    else:
        load_batch()


if __name__ == "__main__":
    main()
