"""A PS job script: servers serve; trainers fit ctr_model and trainer 0 writes the result.

Usage: ctr_train.py OUT --mode sync|async|geo --steps N --batch B [--k_steps K]
Each step's global batch is split into contiguous per-trainer slices, so in sync mode
the job computes exactly what one process would on the whole batch.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from ctr_model import DIM, FIELDS, NUM_KEYS, forward_backward, make_data

from paddlike.distributed import ps

W_LR, EMB_LR = 0.5, 0.1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--mode", default="sync")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--k_steps", type=int, default=5)
    args = ap.parse_args()
    ps.init()
    if ps.is_server():
        ps.run_server()
        return
    ps.init_worker(mode=args.mode, k_steps=args.k_steps)
    w = ps.dense_table("w", shape=(DIM + 1,), optimizer=ps.SGD(lr=W_LR))
    emb = ps.sparse_table(
        "emb", dim=DIM, optimizer=ps.Adagrad(lr=EMB_LR), initializer=ps.Uniform(-0.1, 0.1, seed=7)
    )
    tid, n = ps.trainer_id(), ps.trainers_num()
    if tid == 0:
        w.assign(np.full(DIM + 1, 0.1, dtype=np.float32))
    ps.barrier_worker()
    keys, labels = make_data(seed=1, n=args.steps * args.batch)
    per = args.batch // n
    losses = []
    for step in range(args.steps):
        lo = step * args.batch + tid * per
        k, y = keys[lo : lo + per], labels[lo : lo + per]
        wv = w.pull()
        rows = emb.pull(k.reshape(-1)).reshape(per, FIELDS, DIM)
        loss, gw, grows = forward_backward(rows, wv, y)
        losses.append(loss)
        w.push(gw)
        emb.push(k.reshape(-1), grows.reshape(-1, DIM))
    ps.barrier_worker()
    if tid == 0:
        all_keys = np.arange(NUM_KEYS, dtype=np.int64)
        np.savez(args.out, w=w.pull(), emb=emb.pull(all_keys))
    with open(f"{args.out}.trainer{tid}.json", "w") as f:
        json.dump({"losses": losses}, f)
    ps.stop_worker()


if __name__ == "__main__":
    main()
