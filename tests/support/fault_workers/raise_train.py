"""examples/elastic_train.py whose rank R raises an uncaught exception at step S (the chaos
suite's "exception in one rank"; the operator's `train.py --raise_rank 2 --raise_step 15`).

    raise_train.py --raise_rank R --raise_step S [--slow_exit SECONDS] ELASTIC_TRAIN_ARGS...

The first raise writes its Unix time to CHECKPOINT/raised-at (the trial's "fault" moment).
`--slow_exit`: the raising rank lingers that long at exit after closing its connections
(a process with much to tear down), so its peers fail long before it is gone.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import os
import sys
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "elastic_train.py"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--raise_rank", type=int, required=True)
    p.add_argument("--raise_step", type=int, required=True)
    p.add_argument("--slow_exit", type=float, default=0.0)
    ours, rest = p.parse_known_args()
    spec = importlib.util.spec_from_file_location("elastic_train", EXAMPLE)
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    ckpt = Path(rest[rest.index("--checkpoint") + 1])
    local_sums = train.local_sums
    raised: list[int] = []
    # registered before the runtime's own handler, so it runs after it (atexit is LIFO)
    atexit.register(lambda: raised and time.sleep(ours.slow_exit))

    def sums(step, w, rank, world):  # type: ignore[no-untyped-def]
        if rank == ours.raise_rank and step == ours.raise_step:
            mark = ckpt / "raised-at"
            if not mark.exists():
                mark.write_text(repr(time.time()))
            raised.append(step)
            raise ValueError(f"rank {rank} raised at step {step} (injected)")
        return local_sums(step, w, rank, world)

    train.local_sums = sums
    sys.argv = [str(EXAMPLE), *rest]
    train.main(rest)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
