"""Cold starts against --preload and in-process restarts, measured in the same run: a
failure's cost in time, and a job's first start.

    python bench/preload.py [--runs 5] [--nproc 2] [--no-torch]

Two scripts, each run four ways, alternately (one machine's load hits them alike): cold,
with --preload, and with `paddlike.distributed.restartable` (the surviving ranks kept, in
process) without and with --preload (the replacement cold or forked); one node, --nproc
workers, --max_restarts 1; rank 1 exits 3 during step 5 of the first round. Every worker
writes `time.time()` stamps to a file (one machine, one
clock): its first step of each round, and rank 1 its exit.

- "heavy": a module that sleeps 2 s at import (stands in for torch and the model
  libraries), `--preload heavy`; a step is a line printed.
- "torch": real torch, `--preload torch`; a step is a gloo all_reduce (init_process_group
  first, in every round).

Rows, medians of --runs:
- failure -> every rank's first step of the new round: from rank 1's exit stamp to the
  last rank's first step of round 2 (the teardown, the new round, the starts, the imports
  (cold) or the forks (--preload), gloo's set-up for torch; with `restartable` the kept
  ranks' park and new groups, and the one replacement's start);
- first start: from the launcher's start to the last rank's first step of round 1
  (--preload: the zygote's imports overlap the launcher's own set-up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable

HEAVY = "import time\ntime.sleep(2)\n"

STAMPS = """
import os, sys, time
import paddlike.distributed as pdist
stamps = open(os.path.join(sys.argv[1], "stamps"), "a")
def stamp(what):
    rank, restart = int(os.environ["RANK"]), int(os.environ["PADDLIKE_RESTART_COUNT"])
    stamps.write(f"{what} {rank} {restart} {time.time()!r}\\n")
    stamps.flush()
def failing(step):
    return os.environ["RANK"] == "1" and os.environ["PADDLIKE_RESTART_COUNT"] == "0" and step == 5
"""

# the script's tail: fn() itself, or restartable(fn) (argv[2] == "restartable")
RUN = """
if sys.argv[2] == "restartable":
    pdist.restartable(main)
else:
    main()
"""

HEAVY_SCRIPT = (
    STAMPS
    + """
import heavy
def main():
    for step in range(8):
        if step == 0:
            stamp("first")
        if step == 5:
            stamp("step5")
        print("STEP", step, flush=True)
        if failing(step):
            stamp("exit")
            os._exit(3)
        time.sleep(0.05)
"""
    + RUN
)

TORCH_SCRIPT = (
    STAMPS
    + """
import torch
import torch.distributed as dist
def main():
    dist.init_process_group("gloo")
    for step in range(8):
        t = torch.ones(1024)
        dist.all_reduce(t)
        if step == 0:
            stamp("first")
        if step == 5:
            stamp("step5")
        if failing(step):
            stamp("exit")
            os._exit(3)  # as a crash: no gloo teardown at exit
    dist.destroy_process_group()
"""
    + RUN
)

# (label, --preload's modules or None, the script's way of running fn)
MODES = (
    ("cold", False, "plain"),
    ("--preload", True, "plain"),
    ("restartable", False, "restartable"),
    ("restartable + --preload", True, "restartable"),
)


class Run:
    """One launch's figures (seconds)."""

    def __init__(self, recovery: float, first: float, replacement: float, step: float) -> None:
        self.recovery = recovery  # failure -> every rank's first step of round 2
        self.first = first  # launch -> every rank's first step of round 1
        # round 2's rank 1: the launcher starts it (cold, or asks the zygote) -> its first step
        self.replacement = replacement
        self.step = step  # one step (rank 1, round 1: steps 0 to 5)


def one_run(
    workdir: Path, script: str, preload: str | None, nproc: int, how: str = "plain"
) -> Run:
    out = Path(tempfile.mkdtemp(dir=workdir))
    cmd = [PY, "-m", "paddlike.launch", "--nproc_per_node", str(nproc), "--max_restarts", "1"]
    cmd += ["--log_dir", str(out / "log")]
    if preload:
        cmd += ["--preload", preload]
    cmd += [str(workdir / script), str(out), how]
    began = time.time()
    done = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    stamps: dict[tuple[str, int, int], list[float]] = {}
    for line in (out / "stamps").read_text().splitlines():
        what, rank, restart, when = line.split()
        stamps.setdefault((what, int(rank), int(restart)), []).append(float(when))
    firsts = {n: [stamps[("first", r, n)][0] for r in range(nproc)] for n in (0, 1)}
    exit_at = stamps[("exit", 1, 0)][0]
    step = (stamps[("step5", 1, 0)][0] - stamps[("first", 1, 0)][0]) / 5
    summary = json.loads((out / "log" / "summary.json").read_text())  # the last round's
    spawned = next(p["start_time"] for p in summary["processes"] if p["rank"] == 1)
    replacement = stamps[("first", 1, 1)][0] - spawned
    return Run(max(firsts[1]) - exit_at, max(firsts[0]) - began, replacement, step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--no-torch", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-preload-") as tmp:  # removed at the end
        _bench(Path(tmp), args)


def _bench(work: Path, args: argparse.Namespace) -> None:
    (work / "heavy.py").write_text(HEAVY)
    (work / "heavy_train.py").write_text(HEAVY_SCRIPT)
    (work / "torch_train.py").write_text(TORCH_SCRIPT)
    cases = [("2-s import", "heavy_train.py", "heavy")]
    if not args.no_torch:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("torch: not installed (make torch-env); its rows skipped")
        else:
            cases.append(("torch (gloo)", "torch_train.py", "torch"))
    print(f"bench/preload.py: {args.nproc} workers, median of {args.runs} runs each")
    print(
        "| script | start | failure -> every rank's first step of the new round | of which "
        "the replacement's start (the launcher starts it -> its first step) | the rest, in steps "
        "| first start |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for label, script, module in cases:
        results: dict[str, list[Run]] = {mode[0]: [] for mode in MODES}
        for _ in range(args.runs):  # alternately: the load hits every mode alike
            for kind, preload, how in MODES:
                given = module if preload else None
                results[kind].append(one_run(work, script, given, args.nproc, how))
        cold = statistics.median(r.recovery for r in results["cold"])
        for kind, _preload, _how in MODES:
            runs = results[kind]
            recovery = statistics.median(r.recovery for r in runs)
            replacement = statistics.median(r.replacement for r in runs)
            rest = statistics.median((r.recovery - r.replacement) / r.step for r in runs)
            first = statistics.median(r.first for r in runs)
            ratio = "" if kind == "cold" else f" ({cold / recovery:.1f}x faster than cold)"
            print(
                f"| {label} | {kind} | {recovery:.3f} s{ratio} | {replacement:.3f} s "
                f"| {rest:.1f} | {first:.3f} s |"
            )
        step = statistics.median(r.step for r in results["cold"])
        print(f"| {label} | (one step) | {step * 1000:.1f} ms | | | |")


if __name__ == "__main__":
    main()
