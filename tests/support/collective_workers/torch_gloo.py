"""A script written for torch.distributed, unchanged: env:// rendezvous from RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, then a gloo all_reduce. Writes $1/rank<r>.json."""

import json
import os
import sys

import torch
import torch.distributed as tdist


def main() -> None:
    seen = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                           "LOCAL_RANK")}  # fmt: skip
    tdist.init_process_group("gloo")
    t = torch.tensor([float(tdist.get_rank() + 1)] * 3)
    tdist.all_reduce(t)
    with open(os.path.join(sys.argv[1], f"rank{tdist.get_rank()}.json"), "w") as f:
        json.dump({"env": seen, "sum": t.tolist(), "world": tdist.get_world_size()}, f)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
