"""Worker for the shared-memory paths (issue 38): `matrix` checks every operation x dtype at
sizes around the one-step limit and the buffer size against numpy and across ranks; `wakeups`
runs many back-to-back operations with no spinning and futex slices longer than the test's
timeout, so a lost wake-up shows as a hang; `idle` has rank 0 wait on a late rank and
reports the CPU time that wait cost. Writes $RESULT_DIR/rank<r>.json.
"""

from __future__ import annotations

import json
import os
import sys
import time
import zlib

import numpy as np

import paddlike.distributed as dist
from paddlike.distributed.collective import shm
from paddlike.distributed.collective.shm_reduce import small_bytes

R = dist.ReduceOp
DTYPES = ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"]
UFUNC = {R.SUM: np.add, R.AVG: np.add, R.MAX: np.maximum, R.MIN: np.minimum, R.PROD: np.multiply}


def data(rank: int, case: str, count: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(repr((rank, case, count, dtype)).encode()))
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, count).astype(bool)
    if dt.kind in "iu":
        return rng.integers(1, 4, count).astype(dt)
    return rng.uniform(0.5, 1.5, count).astype(dt)


def reference(op: R, arrays: list[np.ndarray]) -> np.ndarray:
    out = arrays[0].copy()
    for a in arrays[1:]:
        UFUNC[op](out, a, out=out)
    if op is R.AVG:
        np.divide(out, len(arrays), out=out, casting="unsafe")
    return out


def counts(itemsize: int, limits: list[int]) -> list[int]:
    """Element counts whose byte sizes sit just below, at and just above each limit."""
    got = {1}
    for limit in limits:
        for nbytes in (limit - itemsize, limit, limit + itemsize):
            got.add(max(1, nbytes // itemsize))
    return sorted(got)


def matrix(failures: list[str]) -> int:
    n, me = dist.get_world_size(), dist.get_rank()
    buffer = int(os.environ["PADDLIKE_SHM_BUFFER_BYTES"])
    limits = [small_bytes(), buffer, 2 * buffer + 8]
    checks = 0

    def expect(case: str, got: np.ndarray, want: np.ndarray) -> None:
        nonlocal checks
        checks += 1
        if not np.array_equal(got, want):  # the same order of combination: the same bits
            failures.append(f"{case}: differs from numpy")

    for dtype in DTYPES:
        for count in counts(np.dtype(dtype).itemsize, limits):
            ops = [R.SUM, R.MAX, R.MIN, R.PROD] + ([R.AVG] if dtype.startswith("float") else [])
            for op in ops:
                case = f"all_reduce/{dtype}/{count}/{op.name}"
                ins = [data(k, case, count, dtype) for k in range(n)]
                x = ins[me].copy()
                dist.all_reduce(x, op)
                expect(case, x, reference(op, ins))
                out = np.empty_like(x)
                dist.all_reduce(ins[me], op, out=out)
                expect(case + "/out", out, reference(op, ins))
                hashes: list[np.ndarray] = []
                dist.all_gather(hashes, np.array([zlib.crc32(x.tobytes())], np.int64))
                if len({int(h[0]) for h in hashes}) != 1:
                    failures.append(f"{case}: ranks hold different bits")
            case = f"reduce/{dtype}/{count}"
            ins = [data(k, case, count, dtype) for k in range(n)]
            x = ins[me].copy()
            dist.reduce(x, dst=n - 1, op=R.MAX)
            expect(case, x, reference(R.MAX, ins) if me == n - 1 else ins[me])
            case = f"broadcast/{dtype}/{count}"
            x = data(me, case, count, dtype)
            dist.broadcast(x, src=1)
            expect(case, x, data(1, case, count, dtype))
            case = f"all_gather/{dtype}/{count}"
            outs: list[np.ndarray] = []
            dist.all_gather(outs, data(me, case, count, dtype))
            for k in range(n):
                expect(f"{case}[{k}]", outs[k], data(k, case, count, dtype))
            case = f"reduce_scatter/{dtype}/{count}"
            ins = [data(k, case, count * n, dtype) for k in range(n)]
            part = np.empty(count, ins[me].dtype)
            dist.reduce_scatter(part, [ins[me][j * count : (j + 1) * count] for j in range(n)])
            expect(case, part, reference(R.SUM, ins)[me * count : (me + 1) * count])
            case = f"all_to_all/{dtype}/{count}"
            sent = [data(me * n + j, case, count, dtype) for j in range(n)]
            got = [np.empty_like(s) for s in sent]
            dist.all_to_all(got, sent)
            for k in range(n):
                expect(f"{case}[{k}]", got[k], data(k * n + me, case, count, dtype))
            dist.barrier()
    return checks


def wakeups(failures: list[str]) -> int:
    # No spin and slices far past the test's timeout: every wait sleeps on the futex, and
    # only a peer's wake ends it. A missed wake-up stalls the job instead of costing a slice.
    shm.SPIN_SECONDS = 0.0
    shm.SLICE_SECONDS = 600.0
    me = dist.get_rank()
    x = np.empty(3, np.float32)
    big = np.empty(70_000, np.float32)
    rounds = int(os.environ.get("WAKEUP_ROUNDS", "1500"))
    for i in range(rounds):
        x[:] = me + i
        dist.all_reduce(x)
        want = sum(k + i for k in range(dist.get_world_size()))
        if x[0] != want:
            failures.append(f"round {i}: {x[0]} != {want}")
            break
        if i % 50 == 0:
            big[:] = 1
            dist.all_reduce(big)  # the chunked path too
            dist.barrier()
    return rounds


def idle(report: dict) -> int:
    late = float(os.environ.get("IDLE_SECONDS", "2"))
    x = np.ones(4, np.float32)
    dist.barrier()
    if dist.get_rank() != 0:
        time.sleep(late)  # a slow rank (a long step, a checkpoint)
    wall, cpu = time.monotonic(), time.process_time()
    dist.all_reduce(x)
    report["wait_wall"] = time.monotonic() - wall
    report["wait_cpu"] = time.process_time() - cpu
    return 1


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    dist.init_parallel_env(timeout=float(os.environ.get("COLLECTIVE_TIMEOUT", "60")))
    failures: list[str] = []
    report: dict = {"transport": dist.get_group(0).comm.transport}
    if mode == "idle":
        report["checks"] = idle(report)
    else:
        report["checks"] = {"matrix": matrix, "wakeups": wakeups}[mode](failures)
    report["failures"] = failures[:20]
    with open(os.path.join(out, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
