"""An unmodified torch gloo training loop: each step `--work` seconds of work, then one
all_reduce. `--late R[,R...]`: those ranks sleep `--extra` seconds more before each
all_reduce (a straggler), and so do all ranks of a node whose launcher has
STRAGGLER_EXTRA=SECONDS in its environment. `--no_collective`: the same loop without
any collective.
`--steps 0` runs until stopped. Rank 0 prints "steps: N in T s" at the end (the bench's
time per step)."""

import argparse
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--work", type=float, default=0.02)
    p.add_argument("--late", default="")
    p.add_argument("--extra", type=float, default=0.05)
    p.add_argument("--no_collective", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    late = {int(r) for r in args.late.split(",") if r}
    if os.environ.get("STRAGGLER_EXTRA"):
        late.add(rank)
        args.extra = float(os.environ["STRAGGLER_EXTRA"])
    grad = torch.ones(1024)
    step = 0
    began = time.monotonic()
    while args.steps == 0 or step < args.steps:
        time.sleep(args.work)
        if rank in late:
            time.sleep(args.extra)
        if not args.no_collective:
            dist.all_reduce(grad)
        step += 1
    took = time.monotonic() - began
    if rank == 0:
        print(f"steps: {step} in {took:.4f} s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
