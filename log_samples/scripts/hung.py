"""A torch (gloo) training loop whose rank 2 never gets its third batch: the others wait
in all_reduce, and only --hang_timeout notices (the log_samples `hung` sample)."""

import time

import torch
import torch.distributed as dist


def load_batch(rank: int, step: int) -> torch.Tensor:
    if rank == 2 and step == 3:
        time.sleep(3600)  # a stuck data source: the batch never comes
    return torch.full((4,), float(rank + step))


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(1, 6):
        batch = load_batch(rank, step)
        dist.all_reduce(batch)
        print(f"rank {rank} step {step}: sum {batch.sum().item():.0f}", flush=True)


if __name__ == "__main__":
    main()
