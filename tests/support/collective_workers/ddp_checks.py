"""Worker: DataParallel broadcasts rank 0's parameters, averages gradients in buckets (mixed
dtypes, a bucket smaller than one parameter), forwards calls; all_reduce_gradients skips None.
Writes $1/rank<r>.json."""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import paddlike.distributed as dist


class P:
    def __init__(self, data: np.ndarray) -> None:
        self.data, self.grad = data, None


class Model:
    def __init__(self, rank: int) -> None:
        rng = np.random.default_rng(rank)  # different on every rank before DataParallel
        self.params = [
            P(rng.normal(size=(3, 4)).astype(np.float32)),
            P(rng.normal(size=(1000,)).astype(np.float64)),
            P(rng.normal(size=(5,)).astype(np.float32)),
        ]
        self.hello = "model attribute"

    def parameters(self):
        return iter(self.params)

    def __call__(self, x):
        return x * 2


def main() -> None:
    dist.init_parallel_env(timeout=60)
    me, n = dist.get_rank(), dist.get_world_size()
    model = dist.DataParallel(Model(me), bucket_bytes=1024)
    ref = Model(0)
    report = {
        "params_from_rank0": all(
            np.array_equal(p.data, q.data)
            for p, q in zip(model.parameters(), ref.params, strict=True)
        ),
        "call": float(model(np.float32(21))),
        "attr": model.hello,
    }
    for i, p in enumerate(model.parameters()):
        p.grad = np.full(p.data.shape, me + i, p.data.dtype)
    model.sync_gradients()
    mean = sum(range(n)) / n
    report["grads_averaged"] = all(
        np.allclose(p.grad, mean + i) and p.grad.dtype == p.data.dtype
        for i, p in enumerate(model.parameters())
    )
    grads = [np.full(7, float(me)), None, np.arange(3, dtype=np.float32) * me]
    dist.all_reduce_gradients(grads)
    report["functional"] = bool(
        np.allclose(grads[0], mean) and np.allclose(grads[2], np.arange(3) * mean)
    )
    with open(os.path.join(sys.argv[1], f"rank{me}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
