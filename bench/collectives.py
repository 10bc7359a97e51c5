"""Collective benchmark: paddlike's CPU backend (shared memory and TCP) against torch gloo,
2 ranks on this machine, 4 KiB .. 64 MiB, beside loopback TCP and memcpy measured in the
same run.

    python bench/collectives.py [--sizes 4K,64K,1M,64M] [--ranks 2] [--ops all_reduce,barrier]

Time per call after warm-up: up to 64 KiB the median of single calls (and loopback TCP's
median round trip / 2), larger the mean of the best block of calls; bandwidths follow nccl-tests
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): algbw = S / t with
S the total bytes of the operation's largest buffer, busbw = algbw x factor, factor
2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all, 1 for
broadcast. Workers run as separate processes with the launcher's environment contract.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing import Process

OPS = ["all_reduce", "all_gather", "broadcast", "reduce_scatter", "all_to_all", "barrier"]
OPS_SELECTED = [o for o in os.environ.get("BENCH_OPS", ",".join(OPS)).split(",") if o in OPS]
DEFAULT_SIZES = "4K,16K,64K,256K,1M,4M,16M,64M"
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "barrier": lambda n: 0.0,
}
# DeepSpeed's published figure for its C++ shared-memory all_reduce (issue 38): 10 KB, 8 ranks.
DEEPSPEED_8_RANKS_10KB_US = 12.0


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def human(n: int) -> str:
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


# --- workers ---------------------------------------------------------------------------


def _iterations(nbytes: int) -> tuple[int, int, int]:
    """(warm-up calls, blocks, calls per block): more for small sizes, at least 5 calls."""
    if nbytes <= 64 << 10:
        return 20, 20, 50
    timed = max(5, min(300, (64 << 20) // max(nbytes, 1) // 4))
    blocks = 3 if timed >= 15 else 1
    return 2, blocks, timed // blocks


def paddlike_worker(sizes: list[int], out: str) -> None:
    import numpy as np

    import paddlike.distributed as dist

    dist.init_parallel_env(timeout=120)
    n, me = dist.get_world_size(), dist.get_rank()
    results = {}
    for op in OPS_SELECTED:
        for size in sizes if op != "barrier" else [0]:
            elems = size // 4
            per = elems // n
            x = np.ones(elems, np.float32)
            if op == "barrier":
                call = dist.barrier
            elif op == "all_reduce":
                x[:] = 0  # repeated sums of ones would overflow to inf
                call = lambda: dist.all_reduce(x)  # noqa: E731, B023 (used within the iteration)
            elif op == "broadcast":
                call = lambda: dist.broadcast(x, src=0)  # noqa: E731, B023 (used within the iteration)
            elif op == "all_gather":
                part = np.ones(per, np.float32)
                outs = [np.empty(per, np.float32) for _ in range(n)]
                call = lambda: dist.all_gather(outs, part)  # noqa: E731, B023 (used within the iteration)
            elif op == "reduce_scatter":
                ins = [x[k * per : (k + 1) * per] for k in range(n)]
                part = np.empty(per, np.float32)
                call = lambda: dist.reduce_scatter(part, ins)  # noqa: E731, B023 (used within the iteration)
            else:
                ins = [x[k * per : (k + 1) * per] for k in range(n)]
                outs = [np.empty(per, np.float32) for _ in range(n)]
                call = lambda: dist.all_to_all(outs, ins)  # noqa: E731, B023 (used within the iteration)
            results[f"{op}/{size}"] = _time(call, size, dist.barrier)
    if me == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


def gloo_worker(sizes: list[int], out: str) -> None:
    import torch
    import torch.distributed as tdist

    tdist.init_process_group("gloo")
    n, me = tdist.get_world_size(), tdist.get_rank()
    results: dict[str, float | None] = {}
    for op in OPS_SELECTED:
        for size in sizes if op != "barrier" else [0]:
            elems = size // 4
            per = elems // n
            x = torch.ones(elems, dtype=torch.float32)
            if op == "barrier":
                call = tdist.barrier
            elif op == "all_reduce":
                x.zero_()
                call = lambda: tdist.all_reduce(x)  # noqa: E731, B023 (used within the iteration)
            elif op == "broadcast":
                call = lambda: tdist.broadcast(x, src=0)  # noqa: E731, B023 (used within the iteration)
            elif op == "all_gather":
                part = torch.ones(per)
                outs = [torch.empty(per) for _ in range(n)]
                call = lambda: tdist.all_gather(outs, part)  # noqa: E731, B023 (used within the iteration)
            elif op == "reduce_scatter":
                ins = list(x.split(per))[:n]
                part = torch.empty(per)
                call = lambda: tdist.reduce_scatter(part, ins)  # noqa: E731, B023 (used within the iteration)
            else:
                outt = torch.empty(per * n)
                inp = x[: per * n]
                call = lambda: tdist.all_to_all_single(outt, inp)  # noqa: E731, B023 (used within the iteration)
            try:
                results[f"{op}/{size}"] = _time(call, size, tdist.barrier)
            except RuntimeError:
                results[f"{op}/{size}"] = None  # not supported by gloo
                tdist.barrier()
    if me == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    tdist.destroy_process_group()


def _time(call, size: int, barrier) -> float:
    """Time per call. Up to 64 KiB: the median of single calls timed on this rank (on a
    machine shared with other work, a block's mean is mostly the descheduled calls); larger:
    the best block's mean (each block starts after a barrier, ends after the slowest rank)."""
    warm, blocks, calls = _iterations(size)
    for _ in range(warm):
        call()
    if size <= SINGLE_CALLS_UP_TO:
        barrier()
        times = []
        for _ in range(blocks * calls):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        barrier()
        return statistics.median(times)
    best = float("inf")
    for _ in range(blocks):
        barrier()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        barrier()
        best = min(best, time.perf_counter() - start)
    return best / calls


# --- loopback TCP baseline --------------------------------------------------------------


def _echo(port: int, nbytes: int, rounds: int, stream: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(nbytes)
        for _ in range(rounds):
            view, got = memoryview(buf), 0
            while got < nbytes:
                got += s.recv_into(view[got:])
            s.sendall(buf)
        left = stream
        sink = bytearray(1 << 20)
        while left:
            left -= s.recv_into(sink, min(len(sink), left))
        s.sendall(b"k")


SINGLE_CALLS_UP_TO = 64 << 10


def memcpy_bandwidth(nbytes: int = 64 << 20, repeats: int = 7) -> float:
    """Bytes per second of the best np.copyto of `nbytes` into a second buffer (this process)."""
    import numpy as np

    src = np.ones(nbytes, np.uint8)
    dst = np.zeros_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return nbytes / best


def loopback(msg: int = 4096, rounds: int = 2000, stream: int = 256 << 20) -> tuple[float, float]:
    """(one-way latency of a `msg`-byte message in s, one-way bandwidth in B/s) over 127.0.0.1."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        child = Process(target=_echo, args=(srv.getsockname()[1], msg, rounds, stream))
        child.start()
        conn, _ = srv.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = bytearray(msg)
            times = []
            for _ in range(rounds):  # the median round trip, as for the small collectives
                start = time.perf_counter()
                conn.sendall(buf)
                view, got = memoryview(buf), 0
                while got < msg:
                    got += conn.recv_into(view[got:])
                times.append(time.perf_counter() - start)
            latency = statistics.median(times) / 2
            block = bytes(1 << 20)
            start = time.perf_counter()
            for _ in range(stream // len(block)):
                conn.sendall(block)
            conn.recv(1)
            bandwidth = stream / (time.perf_counter() - start)
        child.join(timeout=30)
    return latency, bandwidth


# --- driver ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(kind: str, n: int, sizes: list[int], extra_env: dict[str, str]) -> dict:
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        eps = [f"127.0.0.1:{_free_port()}" for _ in range(n)]
        procs = []
        for r in range(n):
            env = dict(os.environ, **extra_env)
            env.update(
                RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n),
                PADDLE_TRAINER_ID=str(r), PADDLE_TRAINERS_NUM=str(n),
                PADDLE_MASTER=f"127.0.0.1:{port}", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                PADDLE_TRAINER_ENDPOINTS=",".join(eps), PADDLE_CURRENT_ENDPOINT=eps[r],
            )  # fmt: skip
            cmd = [sys.executable, __file__, "--worker", kind, "--out", out,
                   "--sizes", ",".join(map(str, sizes))]  # fmt: skip
            procs.append(subprocess.Popen(cmd, env=env))
        codes = [p.wait(timeout=900) for p in procs]
        if any(codes):
            raise SystemExit(f"{kind} workers failed: exit codes {codes}")
        with open(out) as f:
            return json.load(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--worker", choices=["paddlike", "gloo"])
    ap.add_argument("--out")
    ap.add_argument("--no-gloo", action="store_true")
    ap.add_argument("--no-tcp", action="store_true", help="no paddlike TCP column")
    ap.add_argument("--rounds", type=int, default=2, help="runs per backend; best time kept")
    ap.add_argument(
        "--ops", default=",".join(OPS), help="comma-separated subset of " + ",".join(OPS)
    )
    args = ap.parse_args()
    os.environ["BENCH_OPS"] = args.ops
    OPS_SELECTED[:] = [o for o in args.ops.split(",") if o in OPS]
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.worker == "paddlike":
        return paddlike_worker(sizes, args.out)
    if args.worker == "gloo":
        return gloo_worker(sizes, args.out)
    n = args.ranks
    lat, bw = loopback()
    lat8, _ = loopback(msg=8, stream=1 << 20)
    copy_bw = memcpy_bandwidth()
    load = os.getloadavg()[0]
    print(f"# {n} ranks, {os.cpu_count()} CPUs, load average {load:.1f}, best of {args.rounds} "
          f"rounds; loopback TCP: one-way latency {lat8 * 1e6:.1f} us (8 B), "
          f"{lat * 1e6:.1f} us (4 KiB), bandwidth {bw / 1e9:.2f} GB/s; "
          f"memcpy 64 MiB {copy_bw / 1e9:.2f} GB/s")  # fmt: skip
    jobs = {
        "shm": ("paddlike", {}),
        "tcp": ("paddlike", {"PADDLIKE_CPU_TRANSPORT": "tcp"}),
    }
    if args.no_tcp:
        del jobs["tcp"]
    if not args.no_gloo:
        try:
            import torch.distributed  # noqa: F401

            jobs["gloo"] = ("gloo", {})
        except ImportError:
            print("# torch not importable: no gloo column")
    # Rounds alternate the backends and each cell keeps its best time, so a burst of load
    # from other processes hurts one round of one backend, not the comparison.
    runs: dict[str, dict[str, float | None]] = {}
    for _ in range(args.rounds):
        for name, (kind, extra) in jobs.items():
            result = run_job(kind, n, sizes, extra)
            best = runs.setdefault(name, {})
            for key, t in result.items():
                old = best.get(key)
                best[key] = t if old is None else (old if t is None else min(old, t))
    cols = list(runs)
    head = f"{'op':<15}{'size':>6}" + "".join(f"{c + ' us':>12}{c + ' busbw':>13}" for c in cols)
    if "gloo" in runs:
        head += f"{'shm/gloo bw':>13}"
    print(head)
    for op in OPS_SELECTED:
        for size in sizes if op != "barrier" else [0]:
            line = f"{op:<15}{human(size):>6}"
            busbw = {}
            for c in cols:
                t = runs[c].get(f"{op}/{size}")
                if t is None:
                    line += f"{'n/a':>12}{'n/a':>13}"
                    continue
                busbw[c] = size / t * BUS_FACTOR[op](n)
                line += f"{t * 1e6:>12.1f}{busbw[c] / 1e9:>10.3f}GB/s"
            if "gloo" in runs:
                ratio = busbw["shm"] / busbw["gloo"] if "gloo" in busbw else None
                line += f"{ratio:>12.2f}x" if ratio else f"{'':>13}"
            print(line)
    targets(runs["shm"], sizes, n, lat8, copy_bw)
    if "gloo" in runs and "all_reduce" in OPS_SELECTED:
        ar_big = f"all_reduce/{max(sizes)}"
        ar_small = f"all_reduce/{min(sizes)}"
        g, s = runs["gloo"], runs["shm"]
        print(f"# targets: all_reduce {human(max(sizes))} busbw shm/gloo = "
              f"{g[ar_big] / s[ar_big]:.2f}x (want >= 1.3); {human(min(sizes))} latency "
              f"shm/gloo = {s[ar_small] / g[ar_small]:.2f}x (want <= 0.5)")  # fmt: skip


def targets(shm: dict, sizes: list[int], n: int, latency: float, copy_bw: float) -> None:
    """Issue 38's ratios, each against its same-run baseline."""
    small = [s for s in sizes if s <= 4096]
    if "all_reduce" in OPS_SELECTED:
        for s in small:
            t = shm[f"all_reduce/{s}"]
            print(f"# all_reduce {human(s)}: {t * 1e6:.2f} us = {t / latency:.2f}x loopback TCP "
                  f"8 B one-way latency (want <= 0.25)")  # fmt: skip
        if n == 8 and 10240 in sizes:
            t = shm["all_reduce/10240"]
            print(f"# all_reduce 10 KB, 8 ranks: {t * 1e6:.1f} us beside DeepSpeed's published "
                  f"{DEEPSPEED_8_RANKS_10KB_US:.0f} us")  # fmt: skip
        big = [s for s in sizes if s >= 4096]
        if (64 << 20) in big:
            t = shm[f"all_reduce/{64 << 20}"]
            busbw = (64 << 20) / t * BUS_FACTOR["all_reduce"](n)
            print(f"# all_reduce 64M busbw {busbw / 1e9:.2f} GB/s = {busbw / copy_bw:.2f}x "
                  f"memcpy (want >= 0.7)")  # fmt: skip
        rates = [(s, s / shm[f"all_reduce/{s}"]) for s in big]
        drops = [f"{human(b)} {rb / ra:.2f}x {human(a)}"
                 for (a, ra), (b, rb) in itertools.pairwise(rates) if rb < 0.8 * ra]  # fmt: skip
        if len(rates) > 1:
            print("# all_reduce bytes/s never below 0.8x the next smaller size: "
                  + ("met" if not drops else "missed: " + ", ".join(drops)))
    if "barrier" in OPS_SELECTED:
        t = shm["barrier/0"]
        print(f"# barrier: {t * 1e6:.2f} us = {t / latency:.2f}x loopback TCP 8 B one-way "
              f"latency (want <= 0.25)")  # fmt: skip


if __name__ == "__main__":
    main()
