"""paddlike's own runtime, 4 ranks: an all_reduce and heartbeat(step) per step; rank 1
computes three times as long as the others, and rank 2 never gets its 20th batch: the others
wait in all_reduce, their flight records say which collective (the `hung_flight` sample)."""

import time

import numpy as np

import paddlike.distributed as dist


def load_batch(rank: int, step: int) -> np.ndarray:
    if rank == 2 and step == 20:
        time.sleep(3600)  # a stuck data source: the batch never comes
    time.sleep(0.06 if rank == 1 else 0.02)  # rank 1 is the slow one
    return np.full(256, float(rank + step), np.float32)


def main() -> None:
    dist.init_parallel_env()
    rank = dist.get_rank()
    for step in range(1, 1000):
        batch = load_batch(rank, step)
        dist.all_reduce(batch)
        dist.heartbeat(step)
        if step % 10 == 0:
            print(f"rank {rank} step {step}: sum {batch.sum():.0f}", flush=True)


if __name__ == "__main__":
    main()
