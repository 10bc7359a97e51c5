"""Stragglers (issue 37): what a check costs node 0's launcher, and what it costs a job.

1. Deciding (`--ranks 1024`): simulated records of RANKS ranks (8 a node), each the ring
   a flight record holds (256 collectives, 200 of them judged), one rank 50 ms late:
   CPU seconds (process time) of `paddlike.logs.lateness.find_stragglers`, best and
   median of 5, each node's clock up to 20 ms off and estimated from the collectives'
   ends; the target is <= 1 s per check. Also the records' size as a node sends
   them through the store (`run.stragglerwatch`'s compact form, deflated).
2. Overhead (`--overhead`): a torch gloo job (2 ranks, one all_reduce and 100 ms of work
   a step, `tests/support/straggler_workers/steps.py`) launched with
   `--straggler_check 10` and with `--straggler_check 0`, interleaved, TRIALS each; the
   median time per step of each, and the difference as a share of the step.

    python bench/stragglers.py [--ranks 1024] [--overhead --trials 3 --steps 300]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from paddlike.logs.lateness import Arrival, find_stragglers  # noqa: E402

RING = 256  # a flight record's entries (paddlike.distributed.progress.CAPACITY)
STEPS_SCRIPT = REPO / "tests" / "support" / "straggler_workers" / "steps.py"


def simulated(ranks: int, late_rank: int, seed: int = 7) -> dict[int, list[Arrival]]:
    """Every collective ends 5 ms after the late rank's arrival; each node's clock is up
    to 20 ms off (node 0's is right), arrivals and ends alike."""
    rnd = random.Random(seed)
    clock = [0.0] + [rnd.uniform(-0.02, 0.02) for _ in range(ranks // 8)]
    out = {}
    for r in range(ranks):
        extra = 0.05 if r == late_rank else 0.0
        off = clock[r // 8]
        out[r] = [
            Arrival("paddlike:0", s, "all_reduce",
                    100.0 + s * 0.3 + extra + rnd.uniform(0, 0.002) + off,
                    100.0 + s * 0.3 + 0.057 + off)
            for s in range(1, RING + 1)
        ]  # fmt: skip
    return out


def decide(ranks: int) -> None:
    late = ranks // 3
    records = simulated(ranks, late)
    nodes = {r: f"node{r // 8}" for r in range(ranks)}
    logs = {r: f"workerlog.{r % 8}" for r in range(ranks)}
    times = []
    found = None
    for _ in range(5):
        t0 = time.process_time()
        found = find_stragglers(records, nodes, logs)
        times.append(time.process_time() - t0)
    assert found is not None
    named = [s.line for s in found.stragglers]
    node_bytes = [
        len(zlib.compress(repr([[a.seq, round(a.time, 6), a.end] for a in records[r]]).encode()))
        for r in range(8)
    ]
    print(f"{ranks} ranks x {RING} collectives each, window {found.window}:")
    print(f"  find_stragglers: best {min(times):.3f} s, median {statistics.median(times):.3f} s "
          f"of CPU (target <= 1 s)")  # fmt: skip
    print(f"  one node's 8 ranks' records, deflated: {sum(node_bytes) / 1024:.1f} KiB")
    print(f"  named: {named}")
    assert [s.row.rank for s in found.stragglers] == [late], named


STEP_RE = re.compile(r"steps: (\d+) in ([0-9.]+) s")


def one_job(check: float, steps: int, log_dir: str) -> float:
    """Seconds per step of one job (what rank 0 prints)."""
    cmd = [
        sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2", "--log_dir", log_dir,
        "--log_overwrite", "--straggler_check", f"{check:g}", str(STEPS_SCRIPT),
        "--steps", str(steps), "--work", "0.1",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run(cmd, check=True, env=env, timeout=steps * 2 + 120, capture_output=True)
    text = (Path(log_dir) / "workerlog.0").read_text()
    m = STEP_RE.search(text)
    assert m, text[-2000:]
    return float(m.group(2)) / int(m.group(1))


def overhead(trials: int, steps: int) -> None:
    on, off = [], []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(trials):
            off.append(one_job(0, steps, os.path.join(d, "off")))
            on.append(one_job(10, steps, os.path.join(d, "on")))
    a, b = statistics.median(on), statistics.median(off)
    print(f"torch gloo, 2 ranks, {steps} steps of 100 ms work + all_reduce, {trials} runs each:")
    print(f"  --straggler_check 10: {a * 1000:.2f} ms a step (runs: "
          f"{', '.join(f'{x * 1000:.2f}' for x in on)})")  # fmt: skip
    print(f"  --straggler_check 0:  {b * 1000:.2f} ms a step (runs: "
          f"{', '.join(f'{x * 1000:.2f}' for x in off)})")  # fmt: skip
    print(f"  overhead: {(a - b) / b:+.2%} of the step (target <= 1%)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--overhead", action="store_true")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()
    decide(args.ranks)
    if args.overhead:
        overhead(args.trials, args.steps)


if __name__ == "__main__":
    main()
