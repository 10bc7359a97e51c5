"""A Paddle fleet data-parallel step: nothing in it knows about paddlike.

    python -m paddlike.launch --nproc_per_node 2 examples/paddle_fleet_dp.py

`fleet.init(is_collective=True)` reads PADDLE_TRAINER_ID, PADDLE_TRAINER_ENDPOINTS,
PADDLE_CURRENT_ENDPOINT, PADDLE_RANK_IN_NODE (fleet.local_rank) and builds its hybrid
topology with gloo groups; `fleet.distributed_model` averages gradients across ranks.
Rank r feeds inputs full of r+1, so every rank must end with the mean gradient and
identical weights. Needs `paddlepaddle` (see `make paddle-env`).
"""

import paddle
import paddle.distributed as dist
from paddle.distributed import fleet


def main() -> None:
    fleet.init(is_collective=True)
    rank, world = dist.get_rank(), dist.get_world_size()
    print(
        f"rank {rank}/{world}: fleet worker_index {fleet.worker_index()}, "
        f"worker_num {fleet.worker_num()}, local_rank {fleet.local_rank()}, "
        f"node_num {fleet.node_num()}",
        flush=True,
    )
    paddle.seed(0)  # the same initial weights everywhere
    layer = paddle.nn.Linear(4, 1)
    opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=layer.parameters())
    model = fleet.distributed_model(layer)
    opt = fleet.distributed_optimizer(opt)

    loss = model(paddle.full([2, 4], float(rank + 1))).mean()
    loss.backward()  # d loss / d w = rank + 1 locally; DataParallel averages it
    grad = layer.weight.grad.numpy().ravel().tolist()
    opt.step()

    weights = [paddle.zeros_like(layer.weight) for _ in range(world)]
    dist.all_gather(weights, layer.weight.detach())
    same = all(bool((w == weights[0]).all()) for w in weights)
    mean = (world + 1) / 2
    print(f"rank {rank}/{world}: averaged gradient {grad} (expected {mean:g} each)", flush=True)
    print(f"rank {rank}/{world}: weights identical on all ranks after the step: {same}", flush=True)
    raise SystemExit(0 if same and all(abs(g - mean) < 1e-6 for g in grad) else 1)


if __name__ == "__main__":
    main()
