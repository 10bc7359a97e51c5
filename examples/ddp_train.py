"""Data-parallel linear regression: each rank trains on its own shard, gradients are averaged.

    python -m paddlike.launch --nproc_per_node 2 examples/ddp_train.py

The model y = x @ w starts at w = [[0], [0]]; the data follow w = [[2], [3]] exactly.
Loss: squared error summed over the shard; SGD with lr 0.01 for 500 steps. Because
DataParallel averages the gradients, every rank takes the same steps and ends with the
same w = [[2], [3]]. The script prints the final w and exits non-zero if it is off.
"""

from __future__ import annotations

import numpy as np

import paddlike.distributed as dist

TRUE_W = np.array([[2.0], [3.0]])
SHARDS = [  # one shard of inputs per rank; targets are x @ TRUE_W
    np.array([[1.0, 2.0], [2.0, 1.0], [3.0, 1.0], [1.0, 3.0]]),
    np.array([[2.0, 2.0], [1.0, 0.0], [0.0, 1.0], [3.0, 2.0]]),
]
LR, STEPS = 0.01, 500


class Parameter:
    """An array and its gradient: what DataParallel needs from a framework's parameter."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.grad: np.ndarray | None = None


class Linear:
    def __init__(self) -> None:
        self.w = Parameter(np.zeros((2, 1)))

    def parameters(self) -> list[Parameter]:
        return [self.w]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return x @ self.w.data

    def backward(self, x: np.ndarray, err: np.ndarray) -> None:
        """d/dw sum((x @ w - y)^2) = 2 x^T (x @ w - y)."""
        self.w.grad = 2.0 * x.T @ err


def main() -> None:
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    x = SHARDS[rank % len(SHARDS)]
    y = x @ TRUE_W
    model = dist.DataParallel(Linear())
    for step in range(STEPS):
        err = model(x) - y
        loss = float((err**2).sum())
        model.backward(x, err)
        model.sync_gradients()  # average over ranks
        for p in model.parameters():
            p.data -= LR * p.grad
        if step % 100 == 0 and rank == 0:
            print(f"step {step:3d}: loss {loss:.6f}")
    w = model.w.data
    print(f"rank {rank}/{world}: w = {w.ravel().tolist()}")
    ok = bool(np.allclose(w, TRUE_W, atol=1e-4))
    print(f"rank {rank}/{world}: {'converged' if ok else 'NOT converged'} to [[2], [3]]")
    dist.destroy_process_group()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
