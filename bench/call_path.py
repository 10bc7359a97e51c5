"""The small-message path and the call path (issue 38), each figure beside a baseline of
the same run: all_reduce of 8 B and 4 KiB and barrier on N ranks through shared memory,
and the same calls in a world of one (no peer, no byte moved: the Python call path alone),
each with the flight record on and off in alternating blocks; loopback TCP's 8 B one-way
latency measured in the same run; with --before DIR, a previous paddlike tree (e.g.
`git archive HEAD paddlike | tar -x -C DIR`) run in jobs alternating with this one.

    python bench/call_path.py [--before DIR] [--rounds 3] [--ranks 2]

N ranks: the median of single calls (a loaded machine's descheduled calls do not swamp
it); a world of one: the best block of calls (nothing waits, so the best is the cost).
Then the flight record's share of a 4 KiB all_reduce (issue 13) and what choosing the
backend per array costs (issue 21); BENCH_ONLY=small|flight|choice runs one table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from collectives import _free_port, loopback

CASES = ("all_reduce 8 B", "all_reduce 4 KiB", "barrier")
BLOCKS, CALLS = 20, 100  # per case and flight mode, alternating on/off
ONE_BLOCKS, ONE_CALLS = 15, 20000  # a world of one
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _calls() -> dict:
    import numpy as np

    import paddlike.distributed as dist

    x8, x4k = np.zeros(2, np.float32), np.zeros(1024, np.float32)
    return {
        "all_reduce 8 B": lambda: dist.all_reduce(x8),
        "all_reduce 4 KiB": lambda: dist.all_reduce(x4k),
        "barrier": dist.barrier,
    }


def worker(out: str) -> None:
    """Time every case with the flight record on and off, alternating blocks; rank 0 (or
    the only rank) writes {"case/on": seconds, "case/off": seconds}."""
    import timeit

    import paddlike.distributed as dist
    from paddlike.distributed.collective import flight

    dist.init_parallel_env(timeout=120)
    calls = _calls()
    alone = dist.get_world_size() == 1
    times: dict[str, list[float]] = {}
    for fn in calls.values():
        for _ in range(200):
            fn()
    for block in range(ONE_BLOCKS if alone else BLOCKS):
        for case, fn in calls.items():
            for mode in ("on", "off") if block % 2 else ("off", "on"):
                flight.set_enabled(mode == "on")
                got = times.setdefault(f"{case}/{mode}", [])
                if alone:
                    got.append(timeit.timeit(fn, number=ONE_CALLS) / ONE_CALLS)
                    continue
                dist.barrier()
                for _ in range(CALLS):
                    start = time.perf_counter()
                    fn()
                    got.append(time.perf_counter() - start)
    pick = min if alone else statistics.median
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({key: pick(ts) for key, ts in times.items()}, f)
    dist.destroy_process_group()


def job(tree: str, n: int, tmp: str) -> dict[str, float]:
    """One job of n ranks (n = 1: a world of one) with `tree` first on the path."""
    out = os.path.join(tmp, "result.json")
    port = _free_port()
    eps = [f"127.0.0.1:{_free_port()}" for _ in range(n)]
    procs = []
    for r in range(n):
        env = dict(os.environ, PYTHONPATH=tree, PADDLE_LOG_DIR=os.path.join(tmp, "log"))
        if n > 1:
            env.update(
                PADDLE_TRAINER_ID=str(r), PADDLE_TRAINERS_NUM=str(n), LOCAL_RANK=str(r),
                PADDLE_MASTER=f"127.0.0.1:{port}", PADDLE_TRAINER_ENDPOINTS=",".join(eps),
                PADDLE_CURRENT_ENDPOINT=eps[r],
            )  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", out], env=env))
    codes = [p.wait(timeout=600) for p in procs]
    if any(codes):
        raise SystemExit(f"workers of {tree} failed: exit codes {codes}")
    with open(out) as f:
        return json.load(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a previous paddlike tree, run in alternating jobs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    trees = {"after": HERE}
    if args.before:
        trees["before"] = os.path.abspath(args.before)
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    lat: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            lat.append(loopback(msg=8, stream=1 << 20)[0])
            order = list(trees.items()) if i % 2 == 0 else list(trees.items())[::-1]
            for name, tree in order:
                for n in (args.ranks, 1):
                    runs.setdefault((name, n), []).append(job(tree, n, tmp))
    latency = statistics.median(lat)
    print(f"# {args.ranks} ranks, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"{args.rounds} rounds of alternating jobs; loopback TCP 8 B one-way latency, same "
          f"run: {' / '.join(f'{t * 1e6:.1f}' for t in lat)} us")  # fmt: skip
    print("# per run: the flight record on, then off; the median over runs in [ ]")
    for n, label in ((args.ranks, f"{args.ranks} ranks"), (1, "world of one")):
        for case in CASES:
            for name in trees:
                got = runs[(name, n)]
                on = [r[f"{case}/on"] for r in got]
                off = [r[f"{case}/off"] for r in got]
                med_on, med_off = statistics.median(on), statistics.median(off)
                pairs = zip(on, off, strict=True)
                cells = "  ".join(f"{a * 1e6:.2f}/{b * 1e6:.2f}" for a, b in pairs)
                extra = ""
                if n > 1:
                    extra = f"  = {med_on / latency:.2f}x loopback"
                print(f"{label:<13}{case:<18}{name:<7}{cells}  [{med_on * 1e6:.2f} us on, "
                      f"{med_off * 1e6:.2f} off: record {(med_on - med_off) / med_off * 100:+.1f} "
                      f"%]{extra}")  # fmt: skip
            if "before" in trees:
                a = statistics.median(r[f"{case}/on"] for r in runs[("after", n)])
                b = statistics.median(r[f"{case}/on"] for r in runs[("before", n)])
                print(f"{'':<31}after / before: {a / b:.2f}")


# --- progress heartbeat and flight record (issue 13) --------------------------------------

FLIGHT_CALLS = 200  # all_reduce calls per timed block
FLIGHT_BLOCKS = 40  # blocks per mode, alternating on/off so load hits both alike


def flight_worker(out: str) -> None:
    """4 KiB all_reduce with the flight record on and off, alternating blocks in one
    process (both ranks switch at the same block boundary; the wire is the same)."""
    import numpy as np

    import paddlike.distributed as dist
    from paddlike.distributed.collective import flight

    dist.init_parallel_env(timeout=120)
    x = np.zeros(1024, np.float32)
    for _ in range(200):
        dist.all_reduce(x)
    times: dict[str, list[float]] = {"on": [], "off": []}
    for block in range(FLIGHT_BLOCKS):
        for mode in ("on", "off") if block % 2 else ("off", "on"):
            flight.set_enabled(mode == "on")
            dist.barrier()
            start = time.perf_counter()
            for _ in range(FLIGHT_CALLS):
                dist.all_reduce(x)
            dist.barrier()
            times[mode].append((time.perf_counter() - start) / FLIGHT_CALLS)
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


def _record_ns(log_dir: str) -> float:
    """ns per operation of the flight record alone (begin + end of a 4 KiB float32 array),
    in this process: the part of the all_reduce difference that load cannot blur."""
    import timeit

    import numpy as np

    from paddlike.distributed import progress
    from paddlike.distributed.collective import flight

    progress._reset_for_tests()
    os.environ["PADDLE_LOG_DIR"] = log_dir
    x = np.zeros(1024, np.float32)
    begin, end = flight.begin, flight.end
    n = 200_000
    best = min(timeit.repeat(lambda: end(begin("all_reduce", 0, x, -1), True), number=n, repeat=7))
    progress._reset_for_tests()
    os.environ.pop("PADDLE_LOG_DIR")
    return best / n * 1e9


def _heartbeat_ns(log_dir: str) -> tuple[float, float, float]:
    """ns per call: heartbeat() writing its file, heartbeat() outside a launch (no file),
    and an empty Python function (the floor of any call), in this process."""
    import timeit

    from paddlike.distributed import progress

    def empty(step=None):  # the baseline: a call that does nothing
        return None

    n = 200_000

    def best(stmt) -> float:
        return min(timeit.repeat(stmt, number=n, repeat=5)) / n * 1e9

    progress._reset_for_tests()
    os.environ.pop("PADDLE_LOG_DIR", None)
    off = best(progress.heartbeat)
    progress._reset_for_tests()
    os.environ["PADDLE_LOG_DIR"] = log_dir
    on = best(progress.heartbeat)
    progress._reset_for_tests()
    os.environ.pop("PADDLE_LOG_DIR")
    return on, off, best(empty)


def flight_table(n: int = 2) -> None:
    """heartbeat() cost and the flight record's share of a 4 KiB all_reduce, same run."""
    with tempfile.TemporaryDirectory() as tmp:
        hb_on, hb_off, floor = _heartbeat_ns(tmp)
        record = _record_ns(os.path.join(tmp, "record"))
        port = _free_port()
        out = os.path.join(tmp, "flight.json")
        eps = [f"127.0.0.1:{_free_port()}" for _ in range(n)]
        procs = []
        for r in range(n):
            env = dict(os.environ, PADDLE_LOG_DIR=os.path.join(tmp, "log"))
            env.update(
                RANK=str(r), WORLD_SIZE=str(n), PADDLE_TRAINER_ID=str(r),
                PADDLE_TRAINERS_NUM=str(n), PADDLE_MASTER=f"127.0.0.1:{port}",
                PADDLE_TRAINER_ENDPOINTS=",".join(eps), PADDLE_CURRENT_ENDPOINT=eps[r],
            )  # fmt: skip
            cmd = [sys.executable, __file__, "--flight-worker", out]
            procs.append(subprocess.Popen(cmd, env=env))
        codes = [p.wait(timeout=600) for p in procs]
        if any(codes):
            raise SystemExit(f"flight-record workers failed: exit codes {codes}")
        with open(out) as f:
            times = json.load(f)
    on, off = min(times["on"]), min(times["off"])
    med_on = sorted(times["on"])[len(times["on"]) // 2]
    med_off = sorted(times["off"])[len(times["off"]) // 2]
    print(f"# progress heartbeat and flight record: {n} ranks, shared memory, "
          f"{FLIGHT_BLOCKS} alternating blocks of {FLIGHT_CALLS} calls per mode")  # fmt: skip
    print(f"{'measurement':<46}{'best':>12}{'median':>12}")
    print(f"{'heartbeat(), writing its progress file':<46}{hb_on:>9.0f} ns")
    print(f"{'  baseline: heartbeat() outside a launch':<46}{hb_off:>9.0f} ns")
    print(f"{'  baseline: an empty Python function call':<46}{floor:>9.0f} ns")
    print(f"{'all_reduce 4 KiB, flight record on':<46}{on * 1e6:>9.2f} us{med_on * 1e6:>9.2f} us")
    print(f"{'  baseline: flight record off (same run)':<46}{off * 1e6:>9.2f} us"
          f"{med_off * 1e6:>9.2f} us")  # fmt: skip
    print(f"{'flight record alone, per operation':<46}{record:>9.0f} ns")
    share = record * 1e-9 / off * 100
    print(f"# flight record adds {(on - off) / off * 100:+.1f} % (best) / "
          f"{(med_on - med_off) / med_off * 100:+.1f} % (median) to a 4 KiB all_reduce; "
          f"alone it costs {share:.1f} % of the best all_reduce "
          f"(want <= 2 %: {_verdict(share <= 2)}); heartbeat() {hb_on:.0f} ns "
          f"(want <= 1000 ns: {_verdict(hb_on <= 1000)})")  # fmt: skip
    print("# (a share of a slow all_reduce reads small: compare the best all_reduce with the "
          "README's before reading the share as met)")


def _verdict(ok: bool) -> str:
    return "met" if ok else "missed"


# --- the backend chosen per array (issue 21) ------------------------------------------------

CHOICE_CALLS = 200  # 4 KiB all_reduce calls per timed block
CHOICE_BLOCKS = 30
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOUBLES = os.path.join(REPO_ROOT, "tests", "support", "doubles")  # the CuPy stand-in (GPUs, NCCL)


def choice_worker(out: str, backend: str) -> None:
    """Blocks of 4 KiB host all_reduce on `backend`; rank 0 also times the choice alone."""
    import timeit

    import numpy as np

    import paddlike.distributed as dist
    from paddlike.distributed.collective import ops

    group = dist.init_parallel_env(backend=backend, timeout=120)
    x = np.zeros(1024, np.float32)
    blocks = []
    for _ in range(CHOICE_BLOCKS):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(CHOICE_CALLS):
            dist.all_reduce(x)
        blocks.append((time.perf_counter() - start) / CHOICE_CALLS)
    choice = min(timeit.repeat(lambda: ops._lane(group, x, "all_reduce"), number=20000,
                               repeat=5)) / 20000  # fmt: skip
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"blocks": blocks, "choice": choice, "lanes": sorted(group.lanes)}, f)
    dist.destroy_process_group()


def _choice_job(n: int, backend: str, tmp: str) -> dict:
    port, out = _free_port(), os.path.join(tmp, f"choice-{backend}.json")
    eps = [f"127.0.0.1:{_free_port()}" for _ in range(n)]
    procs = []
    for r in range(n):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO_ROOT, DOUBLES]))
        env.update(
            PADDLE_TRAINER_ID=str(r), PADDLE_TRAINERS_NUM=str(n), LOCAL_RANK=str(r),
            PADDLE_MASTER=f"127.0.0.1:{port}", PADDLE_TRAINER_ENDPOINTS=",".join(eps),
            PADDLE_CURRENT_ENDPOINT=eps[r],
        )  # fmt: skip
        cmd = [sys.executable, __file__, "--choice-worker", out, backend]
        procs.append(subprocess.Popen(cmd, env=env))
    codes = [p.wait(timeout=600) for p in procs]
    if any(codes):
        raise SystemExit(f"backend-choice workers failed: exit codes {codes}")
    with open(out) as f:
        return json.load(f)


def choice_alone(backend: str) -> None:
    """A world of one on `backend`: the call path alone, no peer to wait for, so the
    difference between backends is the choice's own cost, whatever the load."""
    import timeit

    import numpy as np

    import paddlike.distributed as dist

    group = dist.init_parallel_env(backend=backend)
    x = np.zeros(1024, np.float32)
    best = min(timeit.repeat(lambda: dist.all_reduce(x), number=20000, repeat=15)) / 20000
    print(json.dumps({"seconds": best, "lanes": sorted(group.lanes)}))
    dist.destroy_process_group()


def _alone(backend: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE", "MASTER"))}
    env["PYTHONPATH"] = os.pathsep.join([REPO_ROOT, DOUBLES])
    run = subprocess.run([sys.executable, __file__, "--choice-alone", backend], env=env,
                         capture_output=True, text=True, timeout=600, check=True)  # fmt: skip
    return json.loads(run.stdout)


def choice_table(n: int = 2, rounds: int = 4) -> None:
    """4 KiB all_reduce of host arrays: backend="cpu" (one lane) against "auto" on a node
    whose CuPy (the stand-in of tests/support/doubles) reports GPUs and NCCL (two lanes, the
    kind chosen per array), alternating jobs (the order turned each round), the best block
    and the median block of each kept; and the same in a world of one."""
    best: dict[str, list[float]] = {"auto": [], "cpu": []}
    alone: dict[str, list[float]] = {"auto": [], "cpu": []}
    lanes: dict[str, list[str]] = {}
    choice = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            for backend in list(best) if i % 2 == 0 else list(best)[::-1]:
                got = _choice_job(n, backend, tmp)
                best[backend] += got["blocks"]
                lanes[backend] = got["lanes"]
                choice[backend] = min(choice.get(backend, 1.0), got["choice"])
                one = _alone(backend)
                alone[backend].append(one["seconds"])
                if one["lanes"] != got["lanes"]:
                    raise SystemExit(f"backend {backend}: a world of one has lanes {one['lanes']}")
    print(f"# backend chosen per array: {n} ranks, shared memory, 4 KiB float32 all_reduce "
          f"of numpy arrays, {rounds} alternating jobs x {CHOICE_BLOCKS} blocks of "
          f"{CHOICE_CALLS}; a world of one (best of 15 x 20000 calls) after each job")  # fmt: skip
    print(f"{'measurement':<52}{'best':>10}{'median':>12}{'alone':>12}")
    for backend, label in (("auto", "auto: host lane chosen per array (lanes: {})"),
                           ("cpu", "  baseline: backend='cpu' (lanes: {})")):  # fmt: skip
        ts = sorted(best[backend])
        print(f"{label.format('+'.join(lanes[backend])):<52}{ts[0] * 1e6:>7.2f} us"
              f"{ts[len(ts) // 2] * 1e6:>9.2f} us{min(alone[backend]) * 1e6:>9.2f} us")  # fmt: skip
    a, c = sorted(best["auto"]), sorted(best["cpu"])
    print(f"{'choosing the lane alone (ops._lane), auto':<52}{choice['auto'] * 1e9:>7.0f} ns")
    print(f"{'  baseline: the same call, backend=cpu':<52}{choice['cpu'] * 1e9:>7.0f} ns")
    one = (min(alone["auto"]) - min(alone["cpu"])) * 1e9
    print(f"# auto - cpu: {(a[0] - c[0]) * 1e6:+.2f} us (best), "
          f"{(a[len(a) // 2] - c[len(c) // 2]) * 1e6:+.2f} us (median) per all_reduce on {n} "
          f"ranks, {one:+.0f} ns in a world of one; the choice itself "
          f"{choice['auto'] * 1e9:.0f} ns (want <= 1 us)")  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2])
    elif sys.argv[1:2] == ["--flight-worker"]:
        flight_worker(sys.argv[2])
    elif sys.argv[1:2] == ["--choice-worker"]:
        choice_worker(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["--choice-alone"]:
        choice_alone(sys.argv[2])
    else:
        only = os.environ.get("BENCH_ONLY")  # small | flight | choice: that table alone
        if only in (None, "small"):
            main()
        if only in (None, "flight"):
            flight_table()
        if only in (None, "choice"):
            choice_table()
