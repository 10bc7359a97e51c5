"""Global-view benchmark: each boxing against the bare collective it maps to, in the same
run, on the same 64 MiB global array (float32, 4096 x 4096), 2 ranks on this machine.

    python bench/global_view.py [--mib 64] [--ranks 2] [--reps 15]

    P -> B       x.to_global(sbp=B)      vs all_reduce of the 64 MiB piece
    S(0) -> B    x.to_global(sbp=B)      vs all_gather of the 64/n MiB pieces
    P -> S(0)    x.to_global(sbp=S(0))   vs reduce_scatter of the 64 MiB piece
    S(0) -> S(1) x.to_global(sbp=S(1))   vs all_to_all of the 64/n MiB piece

The bare collectives get ready-made contiguous buffers and write in place; a boxing
leaves its input untouched and returns a new array, so it also allocates its output
(and, where the layout needs it, packs or copies). A third column does that by hand
with the same collective, to separate the cost of a new array from the global view's
own. Calls alternate, each timed on its own after a barrier; the table shows medians.
Workers get the launcher's environment contract, as in bench/collectives.py.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

CASES = ["P->B", "S(0)->B", "P->S(0)", "S(0)->S(1)"]
BARE = {"P->B": "all_reduce", "S(0)->B": "all_gather", "P->S(0)": "reduce_scatter",
        "S(0)->S(1)": "all_to_all"}  # fmt: skip


def worker(mib: int, reps: int, out: str) -> None:
    import numpy as np

    import paddlike.distributed as dist

    dist.init_parallel_env(timeout=300)
    n, me = dist.get_world_size(), dist.get_rank()
    S, B, P = dist.sbp.split, dist.sbp.broadcast, dist.sbp.partial_sum
    p = dist.placement("cpu", ranks=list(range(n)))
    side = int((mib * (1 << 20) // 4) ** 0.5)
    shape = (side, side)
    results: dict[str, dict[str, list[float]]] = {}
    for case in CASES:
        src, dst = {"P->B": (P, B), "S(0)->B": (S(0), B), "P->S(0)": (P, S(0)),
                    "S(0)->S(1)": (S(0), S(1))}[case]  # fmt: skip
        x = dist.ones(shape, placement=p, sbp=src)
        bare, by_hand = _collective_calls(dist, np, case, x.to_local(), n, side)
        boxing = lambda: x.to_global(sbp=dst)  # noqa: E731, B023 (used within the iteration)
        times: dict[str, list[float]] = {"boxing": [], "bare": [], "by_hand": []}
        calls = (("bare", bare), ("by_hand", by_hand), ("boxing", boxing))
        for _ in range(2):  # warm-up: groups, buffers
            for _, call in calls:
                call()
        for _ in range(reps):
            for name, call in calls:
                dist.barrier()
                t0 = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - t0)
        results[case] = times
    if me == 0:
        with open(out, "w") as f:
            json.dump({"results": results, "bytes": side * side * 4}, f)
    dist.destroy_process_group()


def _collective_calls(dist, np, case: str, local, n: int, side: int):
    """(the bare collective on ready-made buffers, the same collective by hand making a
    new array) for one boxing case."""
    per = side // n
    shape = (side, side)
    if case == "P->B":
        buf = np.zeros(shape, np.float32)
        return (lambda: dist.all_reduce(buf)), (lambda: dist.all_reduce(local.copy()))
    if case == "S(0)->B":
        full = np.empty(shape, np.float32)
        outs = [full[k * per : (k + 1) * per] for k in range(n)]

        def gather_new() -> None:
            new = np.empty(shape, np.float32)
            dist.all_gather([new[k * per : (k + 1) * per] for k in range(n)], local)

        return (lambda: dist.all_gather(outs, local)), gather_new
    if case == "P->S(0)":
        ins = [local[k * per : (k + 1) * per] for k in range(n)]
        part = np.empty((per, side), np.float32)
        return (lambda: dist.reduce_scatter(part, ins)), (
            lambda: dist.reduce_scatter(np.empty((per, side), np.float32), ins)
        )
    flat = local.reshape(-1)
    m = flat.size // n
    ins = [flat[k * m : (k + 1) * m] for k in range(n)]
    outs = [np.empty(m, np.float32) for _ in range(n)]

    def all_to_all_new() -> None:
        packed = [np.ascontiguousarray(local[:, k * per : (k + 1) * per]) for k in range(n)]
        new = np.empty((side, per), np.float32)
        dist.all_to_all([new[k * per : (k + 1) * per] for k in range(n)], packed)

    return (lambda: dist.all_to_all(outs, ins)), all_to_all_new


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(n: int, mib: int, reps: int) -> dict:
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        eps = [f"127.0.0.1:{_free_port()}" for _ in range(n)]
        procs = []
        for r in range(n):
            env = dict(os.environ)
            env.update(
                RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n),
                PADDLE_TRAINER_ID=str(r), PADDLE_TRAINERS_NUM=str(n),
                PADDLE_MASTER=f"127.0.0.1:{port}", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                PADDLE_TRAINER_ENDPOINTS=",".join(eps), PADDLE_CURRENT_ENDPOINT=eps[r],
            )  # fmt: skip
            cmd = [sys.executable, __file__, "--worker", "--out", out, "--mib", str(mib),
                   "--reps", str(reps)]  # fmt: skip
            procs.append(subprocess.Popen(cmd, env=env))
        codes = [p.wait(timeout=900) for p in procs]
        if any(codes):
            raise SystemExit(f"workers failed: exit codes {codes}")
        with open(out) as f:
            return json.load(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.worker:
        return worker(args.mib, args.reps, args.out)
    got = run_job(args.ranks, args.mib, args.reps)
    mib = got["bytes"] / (1 << 20)
    print(f"# {args.ranks} ranks, {os.cpu_count()} CPUs, {mib:.0f} MiB float32 global array, "
          f"median of {args.reps} calls each, alternating")  # fmt: skip
    print(f"{'boxing':<12}{'collective':<16}{'boxing ms':>11}{'bare ms':>10}{'ratio':>8}"
          f"{'by hand ms':>12}{'ratio':>8}")  # fmt: skip
    for case in CASES:
        t = got["results"][case]
        box, bare = statistics.median(t["boxing"]), statistics.median(t["bare"])
        hand = statistics.median(t["by_hand"])
        print(f"{case:<12}{BARE[case]:<16}{box * 1e3:>11.2f}{bare * 1e3:>10.2f}"
              f"{box / bare:>7.2f}x{hand * 1e3:>12.2f}{box / hand:>7.2f}x")  # fmt: skip
    print("# bare: the collective in place on warm, ready-made buffers; by hand: the same")
    print("# collective producing a new array and keeping its input, as a boxing must")
    print("# (a fresh output; P->B copies its input first; S(0)->S(1) packs columns)")
    print("# target: boxing / bare <= 1.1x")


if __name__ == "__main__":
    main()
