"""spawn of 2 no-op functions vs multiprocessing spawning the same two (start_method
"spawn"), in one run, alternating; the median wall time of each.

    .venv/bin/python bench/spawn.py [--repeat 15]

Target (issue 15): paddlike's spawn <= 1.5x multiprocessing's. Both start two fresh
interpreters; paddlike also describes the job (options, node, devices), forks its
guardian, locks a log directory, writes endpoints.log and summary.json, and reaps.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time


def noop(*args: object) -> None:
    """The function both sides start: nothing but the start and the end of a process."""


def with_multiprocessing() -> float:
    ctx = multiprocessing.get_context("spawn")
    start = time.perf_counter()
    procs = [ctx.Process(target=noop, args=(i,)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError("a multiprocessing child failed")
    return time.perf_counter() - start


def with_paddlike() -> float:
    from paddlike.distributed.spawn import spawn

    start = time.perf_counter()
    spawn(noop, nprocs=2, backend="gloo")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    repeat = parser.parse_args().repeat
    with_paddlike()  # warm: imports of the launcher in this process, page cache
    with_multiprocessing()
    ours, theirs = [], []
    for _ in range(repeat):
        ours.append(with_paddlike())
        theirs.append(with_multiprocessing())
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"paddlike spawn, 2 no-op processes:        median {a * 1000:7.1f} ms")
    print(f"multiprocessing spawn, 2 no-op processes: median {b * 1000:7.1f} ms")
    print(f"ratio {a / b:.2f}x (target <= 1.5x), {repeat} runs each, alternating")


if __name__ == "__main__":
    main()
