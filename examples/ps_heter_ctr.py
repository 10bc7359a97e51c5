"""Heterogeneous parameter-server CTR example: examples/ps_ctr.py split at the embedding.

    python -m paddlike.launch --server_num 2 --worker_num 2 --heter_worker_num 1 \\
        --heter_devices cpu examples/ps_heter_ctr.py

The model and data are ps_ctr.py's: p = sigmoid(w . sum(emb[ids]) + b). The CPU
trainers (stage 1) own the sparse part: they pull each impression's embedding rows from
the servers (sparse table, Adagrad, sync mode), sum them, and send the pooled (batch,
DIM) activations with the clicks to the heter trainer (stage 2). The heter trainer owns
the dense part: per step it takes every trainer's batch of that step, scores it with w
(a dense table on the servers, SGD), pushes the mean of the trainers' gradients of w
(one push per step: the same mean sync mode applies in ps_ctr.py), and sends each
trainer the gradient of its pooled activations, from which the trainer pushes its
embedding rows' gradients. The arithmetic is ps_ctr.py's, step for step, so in sync
mode both reach the same held-out loss: within 1e-3 (in practice identical to the
printed digits; tests/distributed/ps/test_heter.py checks it).

Trainer 0 evaluates at the end, through the heter trainer (it owns w), and the job
fails (exit 1) unless the loss is below TARGET_LOSS = 0.46 like ps_ctr.py's.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from paddlike.distributed import ps

NUM_IDS, FIELDS, DIM = 5000, 6, 8
TARGET_LOSS = 0.46
EVAL_BATCH = -1  # the batch id of trainer 0's held-out evaluation


def make_clicks(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """ps_ctr.py's data: impressions (n, FIELDS) of int64 ids and their 0/1 clicks."""
    hidden = np.random.default_rng(1234).normal(0.0, 1.0, NUM_IDS)
    rng = np.random.default_rng(seed)
    ids = rng.zipf(1.3, size=(n, FIELDS)) % NUM_IDS
    p = 1.0 / (1.0 + np.exp(-(hidden[ids].sum(axis=1) - 0.5)))
    return ids.astype(np.int64), (rng.random(n) < p).astype(np.float32)


def dense_part(pooled: np.ndarray, w: np.ndarray, y: np.ndarray):
    """The heter trainer's half of ps_ctr.py's loss_and_grads: the mean log-loss, the
    gradient of w, and the gradient of the pooled activations."""
    p = 1.0 / (1.0 + np.exp(-(pooled @ w[:DIM] + w[DIM])))
    loss = float(-np.mean(y * np.log(p + 1e-7) + (1 - y) * np.log(1 - p + 1e-7)))
    d = ((p - y) / len(y)).astype(np.float32)
    gw = np.append(d @ pooled, d.sum()).astype(np.float32)
    return loss, gw, (d[:, None] * w[None, :DIM]).astype(np.float32)


def heter_trainer(steps: int) -> int:
    """Stage 2: the dense layer. Exits 0 once every trainer has ended its stream."""
    # The heter trainer is the only one to push w, once per step: an "async" table
    # applies that push at once, which is sync mode's mean-of-all-trainers update.
    role = ps.init_stage()  # binds this heter trainer's endpoint
    ps.init_worker(mode="async")
    w = ps.dense_table(
        "w", shape=(DIM + 1,), optimizer=ps.SGD(lr=0.5), initializer=ps.Constant(0.1)
    )
    n = len(role.senders())  # the trainers that feed this heter trainer
    waiting: dict[int, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    while (batch := ps.recv_forward()) is not None:
        tid, step, (pooled, clicks) = batch
        if step == EVAL_BATCH:
            loss, _, _ = dense_part(pooled, w.pull(), clicks)
            ps.send_backward(np.array([loss]), step, trainer_id=tid)
            continue
        waiting.setdefault(step, {})[tid] = (pooled, clicks)
        if len(waiting[step]) < n:
            continue
        wv = w.pull()
        parts = {t: dense_part(x, wv, y) for t, (x, y) in sorted(waiting.pop(step).items())}
        grads = [gw for _, gw, _ in parts.values()]
        mean = grads[0].copy()
        for g in grads[1:]:
            mean += g
        mean *= np.float32(1.0 / n)  # as a sync-mode server averages the trainers' pushes
        # Pushed before answering: a trainer that got its last answer may stop the servers.
        w.push(mean)
        for t, (_, _, dpooled) in parts.items():
            ps.send_backward(dpooled, step, trainer_id=t)
        if step % 50 == 0:
            loss = float(np.mean([part[0] for part in parts.values()]))
            print(f"step {step:4d}  train loss {loss:.4f}", flush=True)
    ps.stop_worker()  # a heter trainer only disconnects; the trainers stop the servers
    print(f"heter trainer: every trainer ended after {steps} steps", flush=True)
    return 0


def cpu_trainer(steps: int, batch: int) -> int:
    """Stage 1: the sparse embedding, pulled from and pushed to the servers."""
    ps.init_worker(mode="sync")
    emb = ps.sparse_table(
        "emb", dim=DIM, optimizer=ps.Adagrad(lr=0.2), initializer=ps.Uniform(-0.05, 0.05, seed=7)
    )
    tid = ps.trainer_id()
    ids, clicks = make_clicks(steps * batch, seed=100 + tid)
    for step in range(steps):
        sl = slice(step * batch, (step + 1) * batch)
        keys = ids[sl].reshape(-1)
        pooled = emb.pull(keys).reshape(-1, FIELDS, DIM).sum(axis=1)
        ps.send_forward((pooled, clicks[sl]), batch_id=step)
        dpooled = ps.recv_backward(step)
        emb.push(keys, np.repeat(dpooled, FIELDS, axis=0))  # one row per looked-up id
    ps.barrier_worker()  # every trainer's last rows are applied before evaluating

    code = 0
    if tid == 0:
        test_ids, test_clicks = make_clicks(20000, seed=999)
        pooled = emb.pull(test_ids.reshape(-1)).reshape(-1, FIELDS, DIM).sum(axis=1)
        ps.send_forward((pooled, test_clicks), batch_id=EVAL_BATCH)
        test_loss = float(ps.recv_backward(EVAL_BATCH)[0])
        ok = test_loss < TARGET_LOSS
        print(
            f"ps-heter sync: held-out loss {test_loss:.4f} "
            f"({'reached' if ok else 'MISSED'} target < {TARGET_LOSS})",
            flush=True,
        )
        code = 0 if ok else 1
    ps.end_forward()  # the heter trainer finishes once every trainer ended
    ps.stop_worker()
    return code


def main() -> int:
    ap = argparse.ArgumentParser(description="ps-heter logistic regression on synthetic clicks")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=256, help="impressions per trainer per step")
    args = ap.parse_args()

    ps.init()
    if ps.is_server():
        ps.run_server()
        return 0
    if ps.is_heter_worker():
        return heter_trainer(args.steps)
    return cpu_trainer(args.steps, args.batch)


if __name__ == "__main__":
    sys.exit(main())
