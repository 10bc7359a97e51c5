"""A plain Paddle collective script: nothing in it knows about paddlike.

    python -m paddlike.launch --nproc_per_node 2 examples/paddle_allreduce.py

Runs unchanged under `python -m paddle.distributed.launch` too. On a CPU build of
Paddle 3, `init_parallel_env` needs PADDLE_DISTRI_BACKEND=gloo, PADDLE_TRAINER_ID,
PADDLE_TRAINERS_NUM, PADDLE_CURRENT_ENDPOINT and PADDLE_MASTER (its TCP store, bound
by rank 0); the launcher sets all of them. Needs `paddlepaddle` (see `make paddle-env`).
"""

import paddle
import paddle.distributed as dist


def main() -> None:
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    t = paddle.to_tensor([rank + 1.0])
    dist.all_reduce(t)  # in place: 1 + 2 + ... + world on every rank
    got = t.numpy().tolist()
    expected = world * (world + 1) / 2
    print(f"rank {rank}/{world}: paddle all_reduce(SUM) of [{rank + 1.0}] -> {got}", flush=True)
    raise SystemExit(0 if got == [expected] else 1)


if __name__ == "__main__":
    main()
