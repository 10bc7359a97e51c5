"""Cold starts against --preload, measured in the same run: a failure's cost in time, and a
job's first start.

    python bench/preload.py [--runs 5] [--nproc 2] [--no-torch]

Two scripts, each run cold and with --preload, alternately (one machine's load hits
both alike); one node, --nproc workers, --max_restarts 1; rank 1 exits 3 during step 5 of
the first round. Every worker writes `time.time()` stamps to a file (one machine, one
clock): its first step of each round, and rank 1 its exit.

- "heavy": a module that sleeps 2 s at import (stands in for torch and the model
  libraries), `--preload heavy`; a step is a line printed.
- "torch": real torch, `--preload torch`; a step is a gloo all_reduce (init_process_group
  first, in every round).

Rows, medians of --runs:
- failure -> every rank's first step of the new round: from rank 1's exit stamp to the
  last rank's first step of round 2 (the teardown, the new round, the starts, the imports
  (cold) or the forks (--preload), gloo's set-up for torch);
- first start: from the launcher's start to the last rank's first step of round 1
  (--preload: the zygote's imports overlap the launcher's own set-up).
"""

from __future__ import annotations

import argparse
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
stamps = open(os.path.join(sys.argv[1], "stamps"), "a")
rank, restart = int(os.environ["RANK"]), int(os.environ["PADDLIKE_RESTART_COUNT"])
def stamp(what):
    stamps.write(f"{what} {rank} {restart} {time.time()!r}\\n")
    stamps.flush()
"""

HEAVY_SCRIPT = (
    STAMPS
    + """
import heavy
for step in range(8):
    if step == 0:
        stamp("first")
    print("STEP", step, flush=True)
    if rank == 1 and restart == 0 and step == 5:
        stamp("exit")
        sys.exit(3)
    time.sleep(0.05)
"""
)

TORCH_SCRIPT = (
    STAMPS
    + """
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
for step in range(8):
    t = torch.ones(1024)
    dist.all_reduce(t)
    if step == 0:
        stamp("first")
    if rank == 1 and restart == 0 and step == 5:
        stamp("exit")
        os._exit(3)  # as a crash: no gloo teardown at exit
dist.destroy_process_group()
"""
)


def one_run(workdir: Path, script: str, preload: str | None, nproc: int) -> tuple[float, float]:
    """(failure -> every rank's first step of round 2, launch -> every first step of round 1)"""
    out = Path(tempfile.mkdtemp(dir=workdir))
    cmd = [PY, "-m", "paddlike.launch", "--nproc_per_node", str(nproc), "--max_restarts", "1"]
    cmd += ["--log_dir", str(out / "log")]
    if preload:
        cmd += ["--preload", preload]
    cmd += [str(workdir / script), str(out)]
    began = time.time()
    done = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    firsts: dict[int, list[float]] = {0: [], 1: []}
    exit_at = None
    for line in (out / "stamps").read_text().splitlines():
        what, _rank, restart, when = line.split()
        if what == "first":
            firsts[int(restart)].append(float(when))
        else:
            exit_at = float(when)
    assert exit_at is not None and len(firsts[0]) == len(firsts[1]) == nproc, firsts
    return max(firsts[1]) - exit_at, max(firsts[0]) - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--no-torch", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-preload-"))
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
    print("| script | start | failure -> every rank's first step of the new round | first start |")
    print("| --- | --- | --- | --- |")
    for label, script, module in cases:
        results: dict[str, list[tuple[float, float]]] = {"cold": [], "preload": []}
        for _ in range(args.runs):  # alternately: the load hits both alike
            results["cold"].append(one_run(work, script, None, args.nproc))
            results["preload"].append(one_run(work, script, module, args.nproc))
        medians = {
            k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
            for k, v in results.items()
        }
        for kind in ("cold", "preload"):
            restart, first = medians[kind]
            print(f"| {label} | {kind} | {restart:.3f} s | {first:.3f} s |")
        ratio = medians["cold"][0] / medians["preload"][0]
        first_ratio = medians["preload"][1] / medians["cold"][1]
        print(f"| {label} | ratio | **{ratio:.1f}x faster** | preload/cold {first_ratio:.2f} |")


if __name__ == "__main__":
    main()
