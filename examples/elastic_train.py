"""Elastic training that survives a change of world: checkpoint every K steps, resume anywhere.

    python -m paddlike.launch --nnodes 2:4 --master etcd://HOST:2379 --nproc_per_node 2 \\
        examples/elastic_train.py --steps 200 --checkpoint_every 20 --checkpoint /shared/ckpt

The pattern an elastic job's script follows (the model here is a small linear regression
on a fixed synthetic data set; copy the structure, not the model):

- **A new round restarts the script.** When a node leaves or joins, the launcher stops
  every worker and starts them again with a new RANK and WORLD_SIZE. Whatever was not
  checkpointed is lost: the steps after the last checkpoint are redone.
- **The checkpoint lives on storage every node sees** (a shared home, NFS, a bucket
  mounted on every node): the rank 0 of the next round may be on another node.
- **Only rank 0 writes it**, every K steps, atomically (a temporary file, then
  `os.replace`): every rank holds the same weights, so one writer is enough, and a
  worker stopped mid-write leaves the previous checkpoint whole, never a torn one.
- **Every rank loads it at start** and resumes from its step; the ranks then check that
  they all read the same step (a node that sees other storage stops the job at once).
- **The result does not depend on the world.** Step s uses a fixed global batch (seeded by
  s), split across the current ranks. A float sum depends on the order of its terms, so
  a reduction over 3 ranks and one over 2 would differ in the last bits. Here each
  example's gradient is rounded to fixed point (an int64 count of 2**-32) before it is
  summed, and the int64 sums are all_reduced: integer addition is exact in any order, so
  the weights are bit-identical whatever the world size and however the run was split
  into rounds. (Rounding per example, not per shard: a shard's float sum would already
  depend on which examples share the shard.)

- **A preemption notice saves the same step on every rank.** `dist.should_stop(step)` is
  True on every rank at one step once the job was told to stop (SIGTERM to any node's
  launcher, Slurm's warning): rank 0 saves there and every rank exits 0; the next run, or
  an elastic job's next round, resumes from it with nothing lost.

At the end rank 0 prints `FINAL step=S loss=L weights_sha256=H` and writes that line to
CHECKPOINT/final.txt; a run that resumed prints
`RESUMED from step N world W restart R` first (R: PADDLIKE_RESTART_COUNT, failure restarts).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path

import numpy as np

import paddlike.distributed as dist

FEATURES, BATCH, LR, SEED = 4, 12, 0.1, 2026
TRUE_W = np.array([1.5, -2.0, 0.5, 3.0])
NOISE = 1.0  # noisy targets keep the gradients large, so summation order would show
SCALE = 2.0**32  # fixed point: one unit is 2**-32
LIMIT = 2.0**62 / SCALE / BATCH  # the largest |value| whose BATCH-fold int64 sum cannot overflow
CHECKPOINT, FINAL = "checkpoint.npz", "final.txt"
EVAL_STEP = 2**31 - 1  # the held-out batch: a step number training never reaches


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, required=True, help="train until this step")
    p.add_argument("--checkpoint_every", type=int, default=10, help="rank 0 saves every K steps")
    p.add_argument("--checkpoint", type=Path, required=True, help="a directory every node sees")
    p.add_argument("--step_time", type=float, default=0.0, help="seconds to sleep per step")
    args = p.parse_args(argv)
    if args.steps < 0 or args.checkpoint_every < 1 or args.step_time < 0:
        p.error(
            f"--steps {args.steps}, --checkpoint_every {args.checkpoint_every} and "
            f"--step_time {args.step_time} must be >= 0, >= 1 and >= 0"
        )
    return args


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The global batch of `step`: the same on every rank, in every round."""
    rng = np.random.default_rng([SEED, step])
    x = rng.standard_normal((BATCH, FEATURES))
    y = x @ TRUE_W + NOISE * rng.standard_normal(BATCH)
    return x, y


def predict(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w, feature by feature: element-wise only, so a row's bits do not depend on
    which other rows share its array (a BLAS matrix product may block rows differently)."""
    out = np.zeros(len(x))
    for j in range(FEATURES):
        out += x[:, j] * w[j]
    return out


def to_fixed(values: np.ndarray) -> np.ndarray:
    """Round to int64 counts of 2**-32, refusing values whose sum could overflow."""
    if not np.all(np.abs(values) < LIMIT):
        raise FloatingPointError(
            f"a per-example value {np.abs(values).max():.3g} is beyond the fixed-point range "
            f"(< {LIMIT:.3g}); training diverged: lower LR ({LR}) or scale the data"
        )
    return np.rint(values * SCALE).astype(np.int64)


def local_sums(step: int, w: np.ndarray, rank: int, world: int) -> np.ndarray:
    """This rank's share of step's batch: [gradient of the squared error..., loss], each
    example rounded to fixed point before the (exact) int64 sum over the shard."""
    x, y = batch(step)
    x, y = x[rank::world], y[rank::world]
    err = predict(x, w) - y
    per_example = np.column_stack([2.0 * x * err[:, None], err**2])
    return to_fixed(per_example).sum(axis=0, dtype=np.int64)


def load(directory: Path) -> tuple[int, np.ndarray]:
    """The last checkpoint's (step, weights), or (0, zeros) when there is none."""
    path = directory / CHECKPOINT
    if not path.exists():
        return 0, np.zeros(FEATURES)
    with np.load(path) as ckpt:
        return int(ckpt["step"]), ckpt["w"].copy()


def write_atomically(path: Path, write) -> None:
    """write(file) into a temporary file beside `path`, flushed to disk, then renamed over it:
    readers see the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash of the node
    finally:
        os.close(dir_fd)


def save(directory: Path, step: int, w: np.ndarray) -> None:
    write_atomically(directory / CHECKPOINT, lambda f: np.savez(f, step=step, w=w))


def agree_on_step(step: int, directory: Path) -> None:
    """Every rank read the same checkpoint step, or none may go on."""
    both = np.array([step, -step], np.int64)
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    if both[0] != -both[1]:
        raise RuntimeError(
            f"rank {dist.get_rank()} read step {step} from {directory / CHECKPOINT} but the "
            f"ranks read steps {-both[1]}..{both[0]}; the checkpoint directory must be on "
            "storage every node sees (a shared home or network file system)"
        )


def evaluate(w: np.ndarray) -> float:
    """Mean squared error on a fixed held-out batch (computed on one rank: same bits always)."""
    x, y = batch(EVAL_STEP)
    return float(np.mean((predict(x, w) - y) ** 2))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        args.checkpoint.mkdir(parents=True, exist_ok=True)
        for stale in args.checkpoint.glob(f".{CHECKPOINT}.tmp.*"):  # a writer stopped mid-save
            stale.unlink(missing_ok=True)
    step, w = load(args.checkpoint)
    agree_on_step(step, args.checkpoint)
    if step > args.steps:
        raise SystemExit(
            f"elastic_train: the checkpoint in {args.checkpoint} is at step {step}, past "
            f"--steps {args.steps}; give more --steps or a new --checkpoint directory"
        )
    if step > 0 and rank == 0:
        restart = os.environ.get("PADDLIKE_RESTART_COUNT", "0")
        print(f"RESUMED from step {step} world {world} restart {restart}", flush=True)
    while step < args.steps:
        sums = local_sums(step, w, rank, world)
        dist.all_reduce(sums)  # int64: exact, so the same in any world and any order
        w = w - LR * (sums[:FEATURES].astype(np.float64) / SCALE) / BATCH
        step += 1
        if rank == 0 and step % args.checkpoint_every == 0:
            save(args.checkpoint, step, w)
            loss = sums[FEATURES] / SCALE / BATCH
            print(f"step {step}: train loss {loss:.6g}, checkpoint saved", flush=True)
        if dist.should_stop(step):  # a preemption notice: every rank stops at this step
            if rank == 0:
                save(args.checkpoint, step, w)
            print(f"PREEMPTED: stopped at step {step}, checkpoint saved", flush=True)
            dist.destroy_process_group()
            return
        if args.step_time:
            time.sleep(args.step_time)
    if rank == 0:
        if step % args.checkpoint_every:  # a restart after the end resumes at the end
            save(args.checkpoint, step, w)
        digest = hashlib.sha256(w.astype("<f8").tobytes()).hexdigest()
        line = f"FINAL step={step} loss={evaluate(w)!r} weights_sha256={digest}"
        print(line, flush=True)
        write_atomically(args.checkpoint / FINAL, lambda f: f.write(line.encode() + b"\n"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
