"""Worker: the NCCL double's own rules on two real processes (forked), and its signatures.

`nccl_double_rules.py RULE` prints one JSON line: per rank, what the calls of RULE gave
(the error text, or the values received). `nccl_double_rules.py signatures` prints the
module's names, constants and parameter lists. Run with tests/support/doubles on PYTHONPATH (or a
real CuPy, for `signatures` only).
"""

from __future__ import annotations

import inspect
import json
import multiprocessing
import sys
from collections.abc import Callable

import numpy as np


def signatures() -> dict:
    from cupy.cuda import nccl

    def params(fn: Callable) -> list[str] | None:
        """The parameter names; None when unknown: a Cython method without a signature, or
        one that introspects as (*args, **kwargs) (CuPy 14's NcclCommunicator.__init__)."""
        try:
            found = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        except (TypeError, ValueError):
            return None
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in found):
            return None
        return [p.name for p in found]

    methods = ["allReduce", "reduce", "broadcast", "bcast", "reduceScatter", "allGather",
               "send", "recv", "check_async_error", "abort", "destroy", "device_id", "rank_id",
               "size"]  # fmt: skip
    return {
        "available": bool(getattr(nccl, "available", False)),
        "init": params(nccl.NcclCommunicator.__init__),
        "methods": {m: params(getattr(nccl.NcclCommunicator, m)) for m in methods
                    if hasattr(nccl.NcclCommunicator, m)},
        "functions": {
            f: params(getattr(nccl, f))
            for f in ("get_unique_id", "get_version", "groupStart", "groupEnd")
            if hasattr(nccl, f)
        },
        "constants": {k: getattr(nccl, k) for k in dir(nccl) if k.startswith("NCCL_")},
    }


def rank(rule: str, r: int, ids: multiprocessing.Queue, out: multiprocessing.Queue) -> None:
    import cupy
    from cupy.cuda import nccl

    if r == 0:  # the maker of the id hosts its hub, as NCCL's rank 0 does
        uid = nccl.get_unique_id()
        ids.put(uid)
    else:
        uid = ids.get(timeout=30)
        ids.put(uid)
    comm = nccl.NcclCommunicator(2, uid, r)
    s = cupy.cuda.get_current_stream()
    x = cupy.asarray(np.full(4, r + 1, np.float32))
    f32 = nccl.NCCL_FLOAT32
    result: dict = {}
    try:
        if rule == "mismatch":
            comm.allReduce(x.data.ptr, x.data.ptr, 4, f32, nccl.NCCL_SUM, s.ptr)  # both: #1
            if r == 0:
                comm.allReduce(x.data.ptr, x.data.ptr, 4, f32, nccl.NCCL_SUM, s.ptr)
            else:
                comm.bcast(x.data.ptr, 4, f32, 0, s.ptr)
        elif rule == "unmatched_send":
            if r == 0:
                comm.send(x.data.ptr, 4, f32, 1, s.ptr)
            else:
                comm.allReduce(x.data.ptr, x.data.ptr, 4, f32, nccl.NCCL_SUM, s.ptr)
        elif rule == "count_mismatch":
            nccl.groupStart()
            if r == 0:
                comm.send(x.data.ptr, 4, f32, 1, s.ptr)
            else:
                comm.recv(x.data.ptr, 2, f32, 0, s.ptr)
            nccl.groupEnd()
        elif rule == "p2p":
            nccl.groupStart()
            comm.send(x.data.ptr, 2, f32, 1 - r, s.ptr)
            y = cupy.asarray(np.zeros(2, np.float32))
            comm.recv(y.data.ptr, 2, f32, 1 - r, s.ptr)
            nccl.groupEnd()
            s.synchronize()
            result["received"] = y.get().tolist()
        elif rule == "group_end_alone":
            nccl.groupEnd()
        elif rule == "bfloat16":
            comm.allReduce(x.data.ptr, x.data.ptr, 2, nccl.NCCL_BFLOAT16, nccl.NCCL_SUM, s.ptr)
        elif rule == "after_abort":
            comm.abort()
            comm.allReduce(x.data.ptr, x.data.ptr, 4, f32, nccl.NCCL_SUM, s.ptr)
        elif rule == "bytes_id":
            nccl.NcclCommunicator(2, bytes(128), r)
        s.synchronize()
        comm.check_async_error()
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    out.put((r, result))
    comm.abort()


def main() -> None:
    rule = sys.argv[1]
    if rule == "signatures":
        print(json.dumps(signatures()))
        return
    ctx = multiprocessing.get_context("fork")
    out, ids = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=rank, args=(rule, r, ids, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    print(json.dumps({str(k): v for k, v in sorted(results.items())}))


if __name__ == "__main__":
    main()
