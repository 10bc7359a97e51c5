"""Worker: the last rank leaves ("exit", "exit-async": its process ends mid-job, exit code 0)
or never arrives ("stall"); the others run all_reduce and report the error they got, and how fast.

argv: RESULT_DIR MODE TIMEOUT (of the group under test) [SIZE];
transport from PADDLIKE_CPU_TRANSPORT.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import numpy as np

import paddlike.distributed as dist
from paddlike.distributed.collective.group import runtime
from paddlike.distributed.store import StoreError


def main() -> None:
    out_dir, mode, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    dist.init_parallel_env(timeout=60)  # setup may be slow on a loaded machine
    me, last = dist.get_rank(), dist.get_world_size() - 1
    group = dist.new_group(list(range(last + 1)), timeout=timeout)  # the deadline under test
    x = np.ones(size, np.float32)
    dist.all_reduce(x, group=group)  # everyone is up and connected
    if me == last:
        if mode.startswith("exit"):
            os._exit(0)  # no goodbye: like a crash, but the launcher sees success
        runtime.store.get("release", timeout=60)  # stall until the others have their error
        # Rank 0 exits once it sees this key, maybe before the store answers this set.
        with contextlib.suppress(StoreError):
            runtime.store.set("released", b"1")
        os._exit(0)
    start = time.monotonic()
    report = {"rank": me}
    try:
        if mode == "exit-async":  # the error comes out of Task.wait()
            dist.all_reduce(x, group=group, sync_op=False).wait()
        else:
            dist.all_reduce(x, group=group)
        report["error"] = None
    except dist.CollectiveError as exc:
        report["error"] = type(exc).__name__
        report["message"] = str(exc)
    report["elapsed"] = time.monotonic() - start
    with open(os.path.join(out_dir, f"rank{me}.json"), "w") as f:
        json.dump(report, f)
    if me == 0 and mode == "stall":
        runtime.store.set("release", b"1")
        runtime.store.get("released", timeout=60)  # rank 0 hosts the store: outlive the reader
    os._exit(0)


if __name__ == "__main__":
    main()
