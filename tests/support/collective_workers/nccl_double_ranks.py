"""A worker for tests/distributed/collective/test_nccl_double_ranks.py (on the CuPy double): what a
rank of an auto
job sees of its GPU and of its peers around the first device collective.

argv: OUT MODE. Writes OUT/rank<N>.json: {"device_at_init", "backend", "error", "seconds", ...}.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import cupy
import numpy as np

import paddlike.distributed as dist


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    dist.init_parallel_env(timeout=float(sys.argv[3]) if len(sys.argv) > 3 else None)
    me = dist.get_rank()
    report = {"device_at_init": cupy.cuda.Device().id, "backend": dist.get_backend(),
              "device_id": dist.ParallelEnv().device_id, "error": None}  # fmt: skip
    path = out / f"rank{me}.json"
    start = time.monotonic()
    if mode == "peer_exits" and me == 1:
        raise RuntimeError("rank 1's own bug")  # uncaught: the process exits
    try:
        if mode == "made_before":  # an array made before the first device collective
            x = cupy.ones(4, cupy.float32) * (me + 1)
            report["array_device"] = x.device.id
            dist.all_reduce(x)
            report["sum"] = float(cupy.asnumpy(x)[0])
        elif mode == "peer_exits":
            dist.all_reduce(cupy.ones(4, cupy.float32))
        elif mode == "disagree":
            h = np.ones(4, np.float32)
            dist.all_reduce(h)  # host arrays still work on every rank
            report["host_sum"] = float(h[0])
            dist.all_reduce(cupy.ones(4, cupy.float32))
        elif mode == "opposite_orders":  # async ops on two groups, issued in other orders
            g1, g2 = dist.new_group(), dist.new_group()
            a, b = cupy.ones(4, cupy.float32), cupy.ones(4, cupy.float32)
            dist.all_reduce(a, group=g1)  # both communicators built, in one order
            dist.all_reduce(b, group=g2)
            pairs = [(a, g1), (b, g2)] if me == 0 else [(b, g2), (a, g1)]
            tasks = [dist.all_reduce(x, group=g, sync_op=False) for x, g in pairs]
            for t in tasks:
                t.wait()
        elif mode == "mixed":
            x = cupy.ones(4, cupy.float32) if me == 0 else np.ones(4, np.float32)
            dist.all_reduce(x)
    except Exception as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
    report["seconds"] = time.monotonic() - start
    path.write_text(json.dumps(report))
    if mode == "mixed":  # stay until every rank has reported: an exit would be news to a peer
        deadline, world = time.monotonic() + 30, dist.get_world_size()
        while time.monotonic() < deadline and len(list(out.glob("rank*.json"))) < world:
            time.sleep(0.05)  # a file, not an event: polled


if __name__ == "__main__":
    main()
