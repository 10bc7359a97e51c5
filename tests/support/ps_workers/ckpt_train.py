"""A PS job script for checkpoint tests.

ckpt_train.py CKPT OUT --phase save|load [--shape N]
  save: train 5 steps, write every row to OUT.saved.npz, save(CKPT), train one more
        step, write the rows to OUT.npz; exit without stop_worker (the test kills
        the servers, as a crash would).
  load: load(CKPT), write the rows to OUT.saved.npz, train the same one more step,
        write the rows to OUT.npz, stop.
Adam on both tables, so the extra step depends on every optimizer slot and step count.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from paddlike.distributed import ps

KEYS = np.arange(0, 3000, 7, dtype=np.int64)


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(step)
    k = rng.choice(KEYS, size=64)
    return k, rng.normal(size=(64, 8)).astype(np.float32)


def rows(w, emb) -> dict[str, np.ndarray]:
    return {"w": w.pull(), "emb": emb.pull(KEYS)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("out")
    ap.add_argument("--phase", choices=["save", "load"])
    ap.add_argument("--shape", type=int, default=1000)
    args = ap.parse_args()
    ps.init()
    if ps.is_server():
        ps.run_server()
        return
    ps.init_worker(mode="async")
    w = ps.dense_table(
        "w", shape=(args.shape,), optimizer=ps.Adam(lr=0.01), initializer=ps.Normal(0, 0.1, seed=3)
    )
    emb = ps.sparse_table("emb", dim=8, optimizer=ps.Adam(lr=0.01))
    g = np.random.default_rng(0).normal(size=args.shape).astype(np.float32)
    if args.phase == "save":
        for step in range(5):
            w.push(g * step)
            emb.push(*batch(step))
        np.savez(f"{args.out}.saved.npz", **rows(w, emb))
        ps.save(args.ckpt)
    else:
        ps.load(args.ckpt)
        np.savez(f"{args.out}.saved.npz", **rows(w, emb))
    w.push(g)
    emb.push(*batch(99))
    np.savez(args.out, **rows(w, emb))
    if args.phase == "load":
        ps.stop_worker()
    else:
        os._exit(0)


if __name__ == "__main__":
    main()
