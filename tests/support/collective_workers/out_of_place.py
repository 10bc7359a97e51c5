"""Out-of-place all_reduce (`out=`) and all_to_all of column blocks, checked against numpy
on every rank; prints OK or raises (the test reads the workers' logs)."""

import numpy as np

import paddlike.distributed as dist
from paddlike.distributed.collective import ops

dist.init_parallel_env(timeout=60)
me, n = dist.get_rank(), dist.get_world_size()

for size in (5, 1000, 3 * (1 << 20) + 7):
    for dt in (np.float32, np.int64):
        x = (np.arange(size) % 97 + me).astype(dt)
        keep = x.copy()
        out = np.full_like(x, -1)
        dist.all_reduce(x, out=out)
        ref = sum((np.arange(size) % 97 + k).astype(dt) for k in range(n))
        assert (out == ref).all() and (x == keep).all(), (size, dt)
        o2 = np.empty_like(x)
        dist.all_reduce(x, op=dist.ReduceOp.MAX, out=o2)
        assert (o2 == (np.arange(size) % 97 + n - 1)).all(), (size, dt)

z = np.ones(10, np.float32)
dist.all_reduce(z, out=z)  # the same array: the in-place call
assert (z == n).all()
refused = []
for bad in (np.empty(9, np.float32), np.empty(10, np.float64)):
    try:
        dist.all_reduce(np.ones(10, np.float32), out=bad)
    except ValueError as exc:
        refused.append(str(exc))
big = np.ones(20, np.float32)
try:
    dist.all_reduce(big[:10], out=big[5:15])
except ValueError as exc:
    refused.append(str(exc))
assert len(refused) == 3, refused

for rows, width in ((3, 5), (1000, 999), (0, 6), (7, 0)):
    for dt in (np.float32, np.int16):
        full = (np.arange(rows * width * n).reshape(rows, width * n) * (me + 1)).astype(dt)
        keep = full.copy()
        ins = [full[:, k * width : (k + 1) * width] for k in range(n)]  # column blocks
        outs = [np.full((rows, width), -1, dt) for _ in range(n)]
        ops.all_to_all_rows(outs, ins)
        for k in range(n):
            theirs = (np.arange(rows * width * n).reshape(rows, width * n) * (k + 1)).astype(dt)
            assert (outs[k] == theirs[:, me * width : (me + 1) * width]).all(), (rows, width, k)
        assert (full == keep).all()

dist.barrier()
print("OK", me, "refused:", refused[-1], flush=True)
dist.destroy_process_group()
