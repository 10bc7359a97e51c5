"""A torch (gloo) training loop whose rank 1 gets an empty batch at step 3 and skips its
all_reduce: the ranks' collectives pair up wrongly from then on, and at the end rank 1
enters the epoch's barrier while the others wait in their 5th all_reduce. Only torch's
flight record says where they parted (the log_samples `torch_flight` sample)."""

import torch
import torch.distributed as dist


def load_batch(rank: int, step: int) -> torch.Tensor:
    if rank == 1 and step == 3:
        return torch.zeros(0)  # rank 1's shard ran out early
    return torch.full((4,), float(rank + step))


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(1, 6):
        batch = load_batch(rank, step)
        if batch.numel() == 0:
            continue  # "nothing to reduce"
        dist.all_reduce(batch)
        print(f"rank {rank} step {step}: sum {batch.sum().item():.0f}", flush=True)
    dist.barrier()


if __name__ == "__main__":
    main()
