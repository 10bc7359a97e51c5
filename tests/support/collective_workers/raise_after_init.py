"""Worker: the last rank raises an uncaught exception after init (its script ends with a
traceback); the others run all_reduce and write the error they got to OUT/rank<r>.txt."""

from __future__ import annotations

import os
import sys

import numpy as np

import paddlike.distributed as dist


def main() -> None:
    out = sys.argv[1]
    dist.init_parallel_env(timeout=30)
    me, last = dist.get_rank(), dist.get_world_size() - 1
    dist.barrier()
    if me == last:
        raise RuntimeError("the script's own bug")
    try:
        dist.all_reduce(np.ones(4, np.float32))
        text = "no error"
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
    with open(os.path.join(out, f"rank{me}.txt"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
