"""The DDP seed's linear regression written once, in the global view (OneFlow's model).

    python -m paddlike.launch --nproc_per_node 2 examples/global_linear.py

Each rank contributes its shard of inputs as its piece of a global x split by rows
(S(0)); the weight w is broadcast (B). The program is the single-device one: the
signatures decide the communication. x @ w is S(0) @ B -> S(0), so the error is split
like the data; x.T @ err is S(1) @ S(0) -> P, a partial sum on every rank; boxing it to
B is the all_reduce. Same data, loss and learning rate as examples/ddp_train.py (its
gradient is the mean of the ranks' gradients), so w reaches [[2], [3]] alike.
"""

from __future__ import annotations

import numpy as np

import paddlike.distributed as dist

TRUE_W = np.array([[2.0], [3.0]])
SHARDS = [  # one shard of inputs per rank (ddp_train.py's); targets are x @ TRUE_W
    np.array([[1.0, 2.0], [2.0, 1.0], [3.0, 1.0], [1.0, 3.0]]),
    np.array([[2.0, 2.0], [1.0, 0.0], [0.0, 1.0], [3.0, 2.0]]),
]
LR, STEPS = 0.01, 500


def main() -> None:
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    S, B = dist.sbp.split, dist.sbp.broadcast
    p = dist.placement("cpu", ranks=list(range(world)))
    x = dist.to_global(SHARDS[rank % len(SHARDS)], placement=p, sbp=S(0))  # rows: 4 x world
    y = x @ dist.global_array(TRUE_W, placement=p, sbp=B)  # S(0) @ B -> S(0)
    w = dist.zeros(2, 1, placement=p, sbp=B, dtype=np.float64)
    for step in range(STEPS):
        err = x @ w - y  # S(0)
        partial = (2.0 / world) * (x.T @ err)  # S(1) @ S(0) -> P
        grad = partial.to_global(sbp=B)  # P -> B: all_reduce
        w = w - LR * grad  # B
        if step % 100 == 0:
            loss = float((err * err).sum().numpy())  # sum over the split axis: P, then B
            if rank == 0:
                sbps = f"err {err.sbp[0]}, x.T @ err {partial.sbp[0]}"
                print(f"step {step:3d}: loss {loss:.6f}  ({sbps})")
    final = w.numpy()
    print(f"rank {rank}/{world}: w = {final.ravel().tolist()}")
    ok = bool(np.allclose(final, TRUE_W, atol=1e-4))
    print(f"rank {rank}/{world}: {'converged' if ok else 'NOT converged'} to [[2], [3]]")
    dist.destroy_process_group()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
