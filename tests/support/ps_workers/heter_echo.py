"""A ps-heter job script for the channel tests: trainers send batches, heter trainers double them.

Usage: heter_echo.py [--batches N] [--window W] [--die_after B] [--heter_die_after B]

Trainer i sends batches b = 0..N-1 of value 100*i + b (a (4, 3) float32 array and its
int64 batch ids), keeping up to W unanswered, checks that every answer is twice the
batch, prints a line per trainer and calls ps.end_forward(). A heter trainer answers
every batch with twice its values and prints how many batches each trainer sent.
--die_after B: trainer 1 SIGKILLs itself right after sending batch B.
--stop_after B: trainer 1 SIGSTOPs itself right after sending batch B (hangs, connected).
--heartbeat_timeout S: passed to ps.init_stage.
--heter_die_after B: the heter trainer leaves batches B and later unanswered, and SIGKILLs
itself once it holds one from every trainer: each trainer is then waiting for it.
"""

from __future__ import annotations

import argparse
import os
import signal
from collections import Counter

import numpy as np

from paddlike.distributed import ps


def trainer(args: argparse.Namespace) -> None:
    tid = int(os.environ["PADDLE_TRAINER_ID"])
    ps.init_stage(max_in_flight=args.window, heartbeat_timeout=args.heartbeat_timeout)
    pending: list[int] = []
    for b in range(args.batches):
        x = np.full((4, 3), 100 * tid + b, dtype=np.float32)
        ps.send_forward((x, np.arange(4, dtype=np.int64) + b), batch_id=b)
        print(f"trainer {tid}: sent batch {b}", flush=True)
        if args.die_after is not None and tid == 1 and b == args.die_after:
            os.kill(os.getpid(), signal.SIGKILL)
        if args.stop_after is not None and tid == 1 and b == args.stop_after:
            os.kill(os.getpid(), signal.SIGSTOP)
        pending.append(b)
        if len(pending) == args.window:
            check(tid, pending.pop(0))
    for b in pending:
        check(tid, b)
    ps.end_forward()
    print(f"trainer {tid}: {args.batches} batches answered", flush=True)


def check(tid: int, b: int) -> None:
    x2, ids2 = ps.recv_backward(b)
    assert np.all(x2 == 2 * (100 * tid + b)) and x2.shape == (4, 3), (b, x2)
    assert np.array_equal(ids2, 2 * (np.arange(4) + b)), (b, ids2)


def heter(args: argparse.Namespace) -> None:
    role = ps.init_stage(heartbeat_timeout=args.heartbeat_timeout)
    counts: Counter[int] = Counter()
    held: set[int] = set()
    while (batch := ps.recv_forward()) is not None:
        tid, b, (x, ids) = batch
        counts[tid] += 1
        if args.heter_die_after is not None and b >= args.heter_die_after:
            held.add(tid)
            if len(held) == len(role.senders()):
                os.kill(os.getpid(), signal.SIGKILL)
            continue
        ps.send_backward((x * 2, ids * 2), b, trainer_id=tid)
    listing = ", ".join(f"trainer {t}: {n}" for t, n in sorted(counts.items()))
    print(f"heter {role.index} of stage {ps.stage_id()}: done, {listing}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--window", type=int, default=2)
    ap.add_argument("--die_after", type=int)
    ap.add_argument("--heter_die_after", type=int)
    ap.add_argument("--stop_after", type=int)
    ap.add_argument("--heartbeat_timeout", type=float)
    args = ap.parse_args()
    if ps.is_heter_worker():
        heter(args)
    else:
        trainer(args)


if __name__ == "__main__":
    main()
