"""Launcher overhead, failure-to-exit latency and import time, with same-run baselines.

    python bench/launch.py [--runs 10] [--no-torch]

Rows (median of --runs, wall clock on this machine):
- 2-worker no-op job through `python -m paddlike.launch` vs. the same two
  `python -c pass` processes started directly: the difference is the overhead.
- a worker's exit(3) -> the launcher's exit, the other worker cooperative
  (default SIGTERM handling): teardown latency.
- `python -c "import paddlike.launch"` vs. `python -c pass`.
- torchrun (`python -m torch.distributed.run`) for scale, when torch is importable.
Targets (issue 2): overhead <= 0.1 s, failure -> exit <= 0.05 s, import <= 0.06 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PY = sys.executable
ROOT = Path(__file__).resolve().parent.parent

NOOP = "pass\n"
# Rank 0 records when it exits (CLOCK_MONOTONIC is system-wide on Linux), after its
# peer has started; rank 1 waits to be stopped by the launcher.
FAIL = """
import os, sys, time
rank = int(os.environ["RANK"])
ready = os.path.join(os.environ["BENCH_DIR"], "ready")
if rank == 1:
    open(ready, "w").close()
    time.sleep(60)
else:
    deadline = time.monotonic() + 10
    while not os.path.exists(ready) and time.monotonic() < deadline:
        time.sleep(0.002)
    with open(os.path.join(os.environ["BENCH_DIR"], "exit_time"), "w") as f:
        f.write(repr(time.monotonic()))
    os._exit(3)
"""


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "SLURM_"))}
    clean["PYTHONPATH"] = str(ROOT) + os.pathsep + clean.get("PYTHONPATH", "")
    return clean


def timed(argv: list[str], cwd: Path, expect: int = 0) -> float:
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, timeout=120)
    elapsed = time.monotonic() - start
    if proc.returncode != expect:
        raise SystemExit(f"{argv} exited {proc.returncode}:\n{proc.stderr.decode()[-2000:]}")
    return elapsed


def direct_pair(cwd: Path) -> float:
    start = time.monotonic()
    procs = [subprocess.Popen([PY, "-c", "pass"], cwd=cwd, env=env()) for _ in range(2)]
    for p in procs:
        p.wait(timeout=60)
    return time.monotonic() - start


def failure_to_exit(argv: list[str], work: Path, expect: int) -> float:
    for name in ("ready", "exit_time"):
        (work / name).unlink(missing_ok=True)
    e = env()
    e["BENCH_DIR"] = str(work)
    proc = subprocess.run(argv, cwd=work, env=e, capture_output=True, timeout=120)
    end = time.monotonic()
    if proc.returncode != expect:
        raise SystemExit(f"{argv} exited {proc.returncode}:\n{proc.stderr.decode()[-2000:]}")
    return end - float((work / "exit_time").read_text())


def median_of(runs: int, fn: Callable[[], float]) -> float:
    fn()  # warm the page cache and the registry directory
    return statistics.median(fn() for _ in range(runs))


def torch_available() -> bool:
    probe = subprocess.run([PY, "-c", "import torch.distributed.run"], capture_output=True)
    return probe.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-torch", action="store_true", help="skip the torchrun rows")
    args = parser.parse_args()
    runs = max(args.runs, 1)

    with tempfile.TemporaryDirectory(prefix="plk-bench-") as tmp:
        work = Path(tmp)
        (work / "noop.py").write_text(NOOP)
        (work / "fail.py").write_text(FAIL)
        launch = [PY, "-m", "paddlike.launch", "--nproc_per_node", "2", "--tee", "none"]
        rows: list[tuple[str, float, str, str]] = []

        base = median_of(runs, lambda: direct_pair(work))
        job = median_of(runs, lambda: timed([*launch, "--log_dir", "log_noop", "noop.py"], work))
        rows.append(("2 x python -c pass, started directly", base, "", "baseline"))
        rows.append(("2-worker no-op job via paddlike.launch", job, "", ""))
        rows.append(("  launcher overhead", job - base, "<= 0.100", _ok(job - base, 0.1)))

        fail = median_of(
            runs,
            lambda: failure_to_exit([*launch, "--log_dir", "log_fail", "fail.py"], work, 3),
        )
        rows.append(("worker exit(3) -> launcher exit", fail, "<= 0.050", _ok(fail, 0.05)))

        bare = median_of(runs, lambda: timed([PY, "-c", "pass"], work))
        imp = median_of(runs, lambda: timed([PY, "-c", "import paddlike.launch"], work))
        rows.append(("python -c pass", bare, "", "baseline"))
        rows.append(('python -c "import paddlike.launch"', imp, "<= 0.060", _ok(imp, 0.06)))

        if not args.no_torch and torch_available():
            torch_runs = max(3, runs // 3)
            trun = [PY, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
            t_job = median_of(torch_runs, lambda: timed([*trun, "noop.py"], work))
            rows.append((f"torchrun no-op job (median of {torch_runs})", t_job, "", "for scale"))
            t_fail = median_of(torch_runs, lambda: failure_to_exit([*trun, "fail.py"], work, 1))
            rows.append(("torchrun worker exit(3) -> exit", t_fail, "", "for scale"))

    print(f"bench/launch.py: median of {runs} runs, {os.cpu_count()} cores, {PY}")
    width = max(len(r[0]) for r in rows)
    print(f"{'measurement':<{width}}  {'seconds':>8}  {'target':>8}  result")
    for name, value, target, result in rows:
        print(f"{name:<{width}}  {value:8.3f}  {target:>8}  {result}")


def _ok(value: float, target: float) -> str:
    return "ok" if value <= target else "MISSED"


if __name__ == "__main__":
    main()
