"""A large job's log directory, written without running it: the job page's tests and
bench/logs_html.py need 512 ranks on 64 nodes, which this machine cannot run.

`write_hung_job(parent, nodes, per_node)` writes what paddlike's launchers would have
left after a hang that `--hang_timeout ... --on_hang abort` ended: one directory per node
(`node00/`, ...) with summary.json, endpoints.log, workerlog.N (a run header, some
steps), `.progress/rank.N` (heartbeats and flight records in the real binary layout of
paddlike.distributed.progress) and, on node 0, the stack dump's stacks.json. One rank
(`HUNG_RANK` scaled to the job) stopped in `load_batch` before its 201st all_reduce;
one rank (`slow_rank`) computes three times slower than the others.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from paddlike.distributed import progress as P
from paddlike.summary import ProcessRecord, RootCause, RunSummary, write_summary

STEPS = 100
OPS_PER_STEP = 2


@dataclass(frozen=True)
class SyntheticJob:
    parent: Path
    world: int
    hung_rank: int
    slow_rank: int
    node_dirs: list[Path]


def _progress_bytes(
    rank: int, world: int, host: str, job_id: str, t0: float, ops: int, step: int,
    step_time: float, busy: float, hang_running: bool,
) -> bytes:  # fmt: skip
    buf = bytearray(P.FILE_BYTES)
    mono0 = 1000.0  # this node's monotonic clock when the file was made (at t0)
    P.STATIC.pack_into(buf, 0, P.MAGIC, P.VERSION, P.CAPACITY, rank, world, 40000 + rank, 0,
                       t0, mono0, job_id.encode(), host.encode())  # fmt: skip
    last = mono0 + 1.0 + step * step_time
    P.LIVE.pack_into(buf, P.LIVE_OFFSET, step, step, last, ops * 0.002, step_time, busy)
    code = (ord("f") << 8) | 4
    for n in range(max(1, ops - P.CAPACITY + 1), ops + 1):
        start = mono0 + 1.0 + (n / OPS_PER_STEP) * step_time
        end, state = start + 0.002, P.DONE
        if n == ops and hang_running:
            end, state = 0.0, P.RUNNING
        op = P.OP_CODES["all_reduce"] if n % OPS_PER_STEP else P.OP_CODES["broadcast"]
        peer = 0 if op == P.OP_CODES["broadcast"] else -1
        offset = P.HEADER_BYTES + (n % P.CAPACITY) * P.ENTRY.size
        P.ENTRY.pack_into(buf, offset, n, n, 0, op, 4096, code, peer, start, end, state, 0)
    return bytes(buf)


def write_hung_job(parent: Path, nodes: int = 64, per_node: int = 8) -> SyntheticJob:
    """A job of nodes × per_node trainers that hung (see the module's docstring)."""
    world = nodes * per_node
    hung, slow = (world * 301) // 512, (world * 77) // 512
    hung = hung if hung != slow else (hung + 1) % world
    job_id = "synthetic-hang"
    t0 = time.time() - 600.0
    step_time, hang_at = 0.5, 0.5 * STEPS + 2.0
    end = t0 + hang_at + 30.0
    hosts = [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(nodes)]
    hung_node, hung_local = divmod(hung, per_node)
    reason = (
        f"rank {hung} (node{hung_node:02d}, workerlog.{hung_local}) is in `load_batch` at "
        "train.py:41"
    )
    summary_lines = [
        reason,
        f"ranks 0–{world - 1} except {hung} ({world - 1} of {world}) wait in `all_reduce` "
        "called from train.py:57 (main)",
        "no progress for 30 s on any rank",
    ]
    cause = RootCause(
        reason=reason, host=hosts[0], node_index=0, exit_code=124,
        log_file="stacks/20261122-120000/summary.txt", tail=summary_lines, time=end - 1.0,
    )  # fmt: skip
    endpoints = [f"{hosts[r // per_node]}:{6170 + r % per_node}" for r in range(world)]
    node_dirs = []
    for node in range(nodes):
        d = parent / f"node{node:02d}"
        (d / ".progress").mkdir(parents=True)
        node_dirs.append(d)
        (d / "endpoints.log").write_text("PADDLE_TRAINER_ENDPOINTS: \n" + "\n".join(endpoints))
        records = []
        for local in range(per_node):
            rank = node * per_node + local
            start = t0 + 0.2 + 0.001 * local
            records.append(ProcessRecord(
                "trainer", rank, local, hosts[node], f"workerlog.{local}", endpoints[rank],
                pid=40000 + rank, start_time=start, end_time=end + 0.01 * (rank % 7),
                signal="SIGTERM", status="killed",
            ))  # fmt: skip
            steps = STEPS - 5 if rank == hung else STEPS
            lines = [
                f"==== paddlike run {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(start))} "
                f"job {job_id} trainer rank {rank} local {local} restart 0: python -u train.py ===="
            ]
            lines += [f"rank {rank} step {s} loss {1 / (s + 1):.3f}" for s in range(steps)]
            (d / f"workerlog.{local}").write_text("\n".join(lines) + "\n")
            ops = steps * OPS_PER_STEP + (0 if rank == hung else 1)
            busy = 0.45 * (3 if rank == slow else 1)
            (d / ".progress" / f"rank.{rank}").write_bytes(_progress_bytes(
                rank, world, f"node{node:02d}", job_id, t0, ops, steps, step_time, busy,
                hang_running=rank != hung,
            ))  # fmt: skip
        write_summary(d, RunSummary(
            job_id, "collective", node, nodes, hosts[node], f"node{node:02d}", str(d), t0,
            status="failed", exit_code=124, end_time=end + 0.1, processes=records, root_cause=cause,
        ))  # fmt: skip
    dump = node_dirs[0] / "stacks" / "20261122-120000"
    dump.mkdir(parents=True)
    (dump / "summary.txt").write_text("\n".join(summary_lines) + "\n")
    (dump / "stacks.json").write_text(
        json.dumps({"time": end - 1.0, "summary": summary_lines, "stacks": [], "progress": {}})
    )
    return SyntheticJob(parent, world, hung, slow, node_dirs)


def write_elastic_job(parent: Path) -> list[Path]:
    """An elastic job (`--nnodes 2:3`, 2 trainers a node) as its two surviving nodes'
    directories record it: round 1 had 3 nodes until node 2 stopped sending heartbeats
    (lost), round 2 ran on the other two and succeeded. Node 2's own directory went with
    its machine. Logs carry a header per round (`restart 0 round N`)."""
    t0 = time.time() - 120.0
    hosts = ["198.18.0.1", "198.18.0.2", "198.18.0.3"]
    lost = (
        "node 2 (198.18.0.3) stopped sending heartbeats for 10 s (--heartbeat_timeout): its "
        "launcher died or the network to it failed"
    )
    rounds = [
        {"round": 1, "restarts": 0, "members": hosts, "ended": lost, "membership": "lost"},
        {"round": 2, "restarts": 0, "members": hosts[:2], "ended": "succeeded", "membership": None},
    ]
    round2 = t0 + 31.0
    dirs = []
    for node in range(2):
        d = parent / f"node{node}"
        d.mkdir(parents=True)
        dirs.append(d)
        endpoints = [f"{hosts[r // 2]}:{6170 + r % 2}" for r in range(4)]
        (d / "endpoints.log").write_text(
            f"# paddlike round 2: 2 nodes {','.join(hosts[:2])}\nPADDLE_TRAINER_ENDPOINTS: \n"
            + "\n".join(endpoints)
        )
        records = []
        for local in range(2):
            rank = node * 2 + local
            old_rank = node * 2 + local  # the same in round 1: nodes 0 and 1 came first
            lines = []
            for rnd, start, rk, world in ((1, t0 + 0.5, old_rank, 6), (2, round2, rank, 4)):
                stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start))
                lines.append(
                    f"==== paddlike run {stamp} job elastic-demo trainer rank {rk} local {local} "
                    f"restart 0 round {rnd}: python -u elastic_train.py ===="
                )
                lines.append(f"rank {rk} of {world}: resuming from checkpoint step {rnd * 40 - 40}")
                lines += [f"rank {rk} step {s}" for s in range(rnd * 40 - 40, rnd * 40, 10)]
            lines.append(f"rank {rank} done")
            (d / f"workerlog.{local}").write_text("\n".join(lines) + "\n")
            records.append(ProcessRecord(
                "trainer", rank, local, hosts[node], f"workerlog.{local}", endpoints[rank],
                pid=50000 + rank, start_time=round2 + 0.01 * local, end_time=round2 + 40.0,
                exit_code=0, status="ok",
            ))  # fmt: skip
        write_summary(d, RunSummary(
            "elastic-demo", "collective", node, 2, hosts[node], f"node{'ab'[node]}", str(d), t0,
            status="succeeded", exit_code=0, end_time=round2 + 40.5, processes=records,
            rounds=rounds,
        ))  # fmt: skip
    return dirs


def write_paddle_job(path: Path) -> Path:
    """What Paddle's own launcher leaves (no summary.json, no run headers): endpoints.log
    and workerlog.N; rank 1's log ends in Paddle's C++ error block."""
    path.mkdir(parents=True)
    (path / "endpoints.log").write_text("PADDLE_TRAINER_ENDPOINTS: \n10.0.0.1:6070\n10.0.0.1:6071")
    (path / "workerlog.0").write_text("I0101 init\nstep 1\n")
    (path / "workerlog.1").write_text(
        "I0101 init\n"
        "----------------------\nError Message Summary:\n----------------------\n"
        "ExternalError: NCCL error, unhandled system error (at /paddle/nccl_helper.h:1)\n"
    )
    return path


def write_running_job(path: Path) -> Path:
    """A job whose summary says running, with the calling process as its live trainer and
    as its launcher (the owner file a launcher keeps while it holds the directory)."""
    path.mkdir(parents=True)
    owner = {"pid": os.getpid(), "host": "127.0.0.1", "hostname": socket.gethostname()}
    (path / ".paddlike.owner").write_text(json.dumps({**owner, "since": time.time()}))
    (path / "workerlog.0").write_text("step 1\n")
    now = time.time()
    proc = ProcessRecord(
        "trainer", 0, 0, "127.0.0.1", "workerlog.0", pid=os.getpid(), start_time=now - 5
    )
    write_summary(path, RunSummary(
        "job-follow", "collective", 0, 1, "127.0.0.1", socket.gethostname(), str(path),
        now - 5, processes=[proc],
    ))  # fmt: skip
    return path


def write_torch_hang(
    root: Path, samples: Path, *, last: dict[int, float], summary: list[str] | None = None
) -> Path:
    """log_samples/torch_flight (rank 1 skipped an all_reduce #5, ranks 0 and 2 wait in it)
    copied to `root`, each flight record entry given the time its rank entered it (torch's
    `time_created_ns`): a rank's last `last[rank]` s after the job's start, each earlier
    one a second before the next. `summary`: the dump's report instead of the sample's
    (whose first line names rank 1). Returns the dump's stacks.json."""
    import shutil

    shutil.copytree(samples / "torch_flight", root)
    (stacks,) = root.glob("stacks/*/stacks.json")
    data = json.loads(stacks.read_text())
    start = json.loads((root / "summary.json").read_text())["start_time"]
    for rank, ops in data["torch_flight"].items():
        for k, op in enumerate(ops):
            op["created"] = start + last[int(rank)] - (len(ops) - 1 - k)
    if summary is not None:
        data["summary"] = summary
    stacks.write_text(json.dumps(data))
    return stacks
