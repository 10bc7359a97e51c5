"""The fault-injection suite (`make chaos`, outside `make test`: it takes minutes).

Every fault of issue 27's table in a fixed job (--max_restarts 1) and an elastic one
(--nnodes 2:4), on 4 namespace nodes with one CPU worker each (tests/support/faults.py), each
injected at a random moment drawn from a fixed seed. Prints one row per cell: fault,
mode, trials, how many held (tests/support/faults.py: `problems`), and fault -> every launcher
exited (median, max). A trial that did not hold is described below the table.

    python bench/chaos.py [--trials 3] [--seed 2027] [--faults "kill node 0,full disk"]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support.faults, paddlike

from tests.support.faults import FAULTS, MODES, problems, run_trial
from tests.support.netns import netns_unavailable_reason


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3, help="trials per cell (default 3)")
    ap.add_argument("--seed", type=int, default=2027, help="the seed of every trial's draw")
    ap.add_argument(
        "--faults", default=",".join(FAULTS), help="comma-separated, of: " + ", ".join(FAULTS)
    )
    ap.add_argument("--modes", default=",".join(MODES), help="fixed, elastic")
    args = ap.parse_args()
    reason = netns_unavailable_reason()
    if reason:
        print(f"chaos: skipped: {reason}")
        return 0
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [f for f in faults if f not in FAULTS] + [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"unknown fault or mode: {', '.join(unknown)}")
    rows, failures = [], []
    started = time.monotonic()
    for fault in faults:
        for mode in modes:
            held, times = 0, []
            for k in range(args.trials):
                seed = args.seed * 1000 + FAULTS.index(fault) * 100 + MODES.index(mode) * 10 + k
                work = Path(tempfile.mkdtemp(prefix="plk-chaos-"))
                try:
                    trial = run_trial(fault, mode, seed, work)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                bad = problems(trial)
                held += not bad
                if trial.exited_after is not None:
                    times.append(trial.exited_after)
                if bad:
                    failures.append(f"{fault} / {mode} seed {seed}: " + "; ".join(bad))
                print(f"  {fault:16} {mode:8} trial {k + 1}: {'held' if not bad else 'FAILED'}"
                      f" ({_s(trial.exited_after)})", flush=True)  # fmt: skip
            rows.append((fault, mode, args.trials, held, times))
    print()
    print("| fault            | mode    | trials | held | fault -> all exited (median, max) |")
    print("| ---------------- | ------- | ------ | ---- | --------------------------------- |")
    for fault, mode, n, held, times in rows:
        span = f"{_s(statistics.median(times))}, {_s(max(times))}" if times else "-"
        print(f"| {fault:16} | {mode:7} | {n:6} | {held:4} | {span:33} |")
    print(f"\n{sum(r[3] for r in rows)} of {sum(r[2] for r in rows)} trials held "
          f"(seed {args.seed}, {time.monotonic() - started:.0f} s)")  # fmt: skip
    for line in failures:
        print("FAILED:", line)
    return 1 if failures else 0


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


if __name__ == "__main__":
    sys.exit(main())
