"""Worker (GPU only): the boxings and operators on a "cuda" placement (cupy over NCCL).
Writes $1/rank<r>.json."""

from __future__ import annotations

import itertools
import json
import os
import sys

import cupy as cp
import numpy as np

import paddlike.distributed as dist


def main() -> None:
    dist.init_parallel_env(backend="nccl", timeout=60)
    me, n = dist.get_rank(), dist.get_world_size()
    S, B, P = dist.sbp.split, dist.sbp.broadcast, dist.sbp.partial_sum
    p = dist.placement("cuda", ranks=list(range(n)))
    failures: list[str] = []
    ref = np.arange((2 * n + 1) * (n + 1), dtype=np.float32).reshape(2 * n + 1, n + 1)
    for src, dst in itertools.product([S(0), S(1), B, P], repeat=2):
        x = dist.global_array(ref, placement=p, sbp=src)
        y = x.to_global(sbp=dst)
        if not isinstance(y.to_local(), cp.ndarray):
            failures.append(f"{src}->{dst}: local piece is {type(y.to_local()).__name__}")
        if not np.array_equal(y.numpy(), ref):
            failures.append(f"{src}->{dst}: global value differs")
    x = dist.global_array(ref, placement=p, sbp=S(0))
    if not np.allclose((x.T @ x).numpy(), ref.T @ ref):
        failures.append("x.T @ x differs")
    with open(os.path.join(sys.argv[1], f"rank{me}.json"), "w") as f:
        json.dump({"failures": failures}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
