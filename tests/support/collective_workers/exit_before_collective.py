"""Worker: rank FAIL_RANK leaves after init_parallel_env, before an all_reduce that the
other ranks enter (their error is left uncaught, as in a user's script). EXIT_HOW says how:

    sys.exit     sys.exit(7)            (the runtime sees the status: no exit barrier)
    raise        raise SystemExit(7)    (not seen: the exit barrier tells the peers)
    exit0_after  sys.exit(0) after the all_reduce; rank 0 ends STAMP_DELAY s later. Both
                 write OUT/rank<r>.end (rank FAIL_RANK from an atexit callback that runs
                 after the runtime's own, i.e. after the exit barrier)
"""

from __future__ import annotations

import atexit
import os
import sys
import time

import numpy as np

import paddlike.distributed as dist


def _stamp(out: str, rank: int) -> None:
    with open(os.path.join(out, f"rank{rank}.end"), "w") as f:
        f.write(repr(time.time()))


def main() -> None:
    how, out = os.environ["EXIT_HOW"], os.environ.get("OUT", ".")
    fail = int(os.environ.get("FAIL_RANK", "1"))
    rank = int(os.environ["PADDLE_TRAINER_ID"])
    if how == "exit0_after" and rank == fail:
        atexit.register(_stamp, out, rank)  # before init: runs after the runtime's atexit
    dist.init_parallel_env(timeout=60)
    if how == "sys.exit" and rank == fail:
        sys.exit(7)
    if how == "raise" and rank == fail:
        raise SystemExit(7)
    dist.all_reduce(np.ones(4, np.float32))
    if how == "exit0_after":
        if rank == fail:
            sys.exit(0)
        if rank == 0:
            time.sleep(float(os.environ.get("STAMP_DELAY", "1")))
            _stamp(out, rank)


if __name__ == "__main__":
    main()
