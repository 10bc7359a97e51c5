"""Start a job from Python, no launcher command: paddlike.distributed.spawn.

    python examples/spawn_allreduce.py            # 2 CPU workers
    python examples/spawn_allreduce.py 4

Each worker joins the job, sums its rank over every worker and returns what it saw;
the parent prints the return values in rank order. See docs/programmatic.md.
"""

from __future__ import annotations

import sys

import numpy as np

import paddlike.distributed as dist


def worker(scale: float) -> tuple[int, float]:
    dist.init_parallel_env()
    x = np.array([scale * dist.get_rank()])
    dist.all_reduce(x)
    return dist.get_rank(), float(x[0])


if __name__ == "__main__":
    nprocs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    context = dist.spawn(worker, args=(1.0,), nprocs=nprocs, backend="gloo")
    for rank, total in context.return_values:
        print(f"rank {rank}: sum of ranks = {total:g}")
