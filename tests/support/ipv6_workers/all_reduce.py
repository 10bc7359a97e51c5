"""Worker: join the job from the launcher's environment, all_reduce over TCP, and report
what a user of an IPv6 cluster would check: the sum, the transport, and the address family
and peer addresses of the runtime store's and the mesh's connections.

argv: RESULT_DIR; PADDLIKE_CPU_TRANSPORT=tcp forces the TCP path on one host.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import numpy as np

import paddlike.distributed as dist
from paddlike.distributed.collective.group import runtime


def _family(sock: socket.socket) -> str:
    return "ipv6" if sock.family == socket.AF_INET6 else "ipv4"


def main() -> None:
    out_dir = sys.argv[1]
    group = dist.init_parallel_env(timeout=60)
    me, n = dist.get_rank(), dist.get_world_size()
    x = np.arange(1024, dtype=np.float32) * (me + 1)  # 4 KiB
    dist.all_reduce(x)
    expected = np.arange(1024, dtype=np.float32) * (n * (n + 1) // 2)
    comm = group.comm
    mesh = [comm.mesh.socks[p] for p in sorted(comm.mesh.socks)]
    store = runtime.store
    assert store is not None and store._sock is not None
    report = {
        "rank": me,
        "correct": bool(np.array_equal(x, expected)),
        "transport": comm.transport,
        "store_family": _family(store._sock),
        "store_peer": store._sock.getpeername()[0],
        "mesh_families": [_family(s) for s in mesh],
        "mesh_peers": [s.getpeername()[0] for s in mesh],
    }
    dist.barrier()
    with open(os.path.join(out_dir, f"rank{me}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
