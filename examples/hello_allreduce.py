"""Two (or more) CPU workers sum an array.

python -m paddlike.launch --nproc_per_node 2 examples/hello_allreduce.py
"""

import numpy as np

import paddlike.distributed as dist


def main() -> None:
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    x = np.ones(4, np.float32) * (rank + 1)
    before = x.copy()
    dist.all_reduce(x)  # in place: x == 1 + 2 + ... + world on every rank
    expected = world * (world + 1) / 2
    print(f"rank {rank}/{world}: all_reduce(SUM) of {before.tolist()} -> {x.tolist()}")
    ok = bool(np.all(x == expected))
    print(f"rank {rank}/{world}: {'OK' if ok else 'WRONG'}: every element is {expected:g}")
    dist.destroy_process_group()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
