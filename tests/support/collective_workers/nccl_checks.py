"""Worker (GPU only): the operations on cupy arrays through NCCL. Writes $1/rank<r>.json."""

from __future__ import annotations

import json
import os
import sys

import cupy as cp

import paddlike.distributed as dist


def main() -> None:
    dist.init_parallel_env(backend="nccl", timeout=60)
    me, n = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []

    def check(name: str, got, want) -> None:
        if not cp.allclose(got, want):
            failures.append(f"{name}: {got} != {want}")

    x = cp.full(8, me + 1, cp.float32)
    dist.all_reduce(x)
    check("all_reduce", x, cp.full(8, n * (n + 1) / 2))
    x = cp.full(8, me + 1, cp.float32)
    dist.all_reduce(x, dist.ReduceOp.AVG)
    check("avg", x, cp.full(8, (n + 1) / 2))
    x = cp.full(4, me, cp.int64)
    dist.broadcast(x, src=1)
    check("broadcast", x, cp.full(4, 1))
    outs: list = []
    dist.all_gather(outs, cp.full(3, me, cp.float64))
    for k in range(n):
        check(f"all_gather[{k}]", outs[k], cp.full(3, k))
    ins = [cp.full(2, me * 10 + k, cp.int32) for k in range(n)]
    outs = []
    dist.all_to_all(outs, ins)
    for k in range(n):
        check(f"all_to_all[{k}]", outs[k], cp.full(2, k * 10 + me))
    out = cp.zeros(5, cp.float32)
    dist.reduce_scatter(out, [cp.full(5, k + me, cp.float32) for k in range(n)])
    check("reduce_scatter", out, cp.full(5, sum(me2 + me for me2 in range(n))))
    # uneven all_gather, this rank's slot another shape of the same size
    outs = [cp.zeros((k + 1, 2) if k == me else (2 * (k + 1),), cp.float32) for k in range(n)]
    dist.all_gather(outs, cp.full(2 * (me + 1), me, cp.float32))
    for k in range(n):
        check(f"uneven all_gather[{k}]", outs[k].reshape(-1), cp.full(2 * (k + 1), k))
    # async on the caller's non-blocking stream: ordered after the caller's earlier work there
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        x = cp.zeros(1 << 20, cp.float32)
        x += me + 1
        task = dist.all_reduce(x, sync_op=False)
    task.wait()
    check("async on the caller's stream", x, cp.full(1 << 20, n * (n + 1) / 2))
    dist.barrier()
    with open(os.path.join(sys.argv[1], f"rank{me}.json"), "w") as f:
        json.dump({"backend": dist.get_backend(), "failures": failures}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
