"""A torch gloo job whose rank 1 skips one all_reduce and then waits in barrier, while
the others wait in that all_reduce (issue 21's hang). $2 is the number of agreed
all_reduces before it; each rank writes $1/ready.<rank> just before it blocks."""

import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    out, agreed = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    batch = torch.ones(4)
    for _ in range(agreed):
        dist.all_reduce(batch)
    open(os.path.join(out, f"ready.{rank}"), "w").close()
    if rank != 1:
        dist.all_reduce(batch)
    dist.barrier()


if __name__ == "__main__":
    main()
