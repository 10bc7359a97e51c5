"""A torch gloo script whose rank $2 (3 if not given) is stuck loading data while the
others wait in all_reduce. Each rank writes $1/ready.<rank> just before it blocks."""

import os
import sys
import time

import torch
import torch.distributed as dist


def load_batch(ready: str) -> torch.Tensor:
    open(ready, "w").close()
    time.sleep(600)  # the data never comes
    return torch.ones(4)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ready = os.path.join(sys.argv[1], f"ready.{rank}")
    stuck = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    batch = load_batch(ready) if rank == stuck else torch.ones(4)
    if rank != stuck:
        open(ready, "w").close()
    dist.all_reduce(batch)


if __name__ == "__main__":
    main()
