"""In-process restarts in an elastic job (`--nnodes MIN:MAX`, 2 namespace nodes, one rank
each): node b's launcher is SIGKILLed; with MIN 1 node a's rank is kept into the new round
of one node (its pid, the new world in its environment); with MIN 2 the job ends, and the
parked rank is ended with it, the exit code and summary as without `restartable`."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from paddlike.summary import read_summary
from tests.support.logwait import wait_until
from tests.support.multinode_common import LAUNCH
from tests.support.netns import Node, netns_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(240)]

# Steps (an all_reduce each) until OUT/stop exists; every call of fn writes what it saw to
# OUT/seen.<pid>.<call>.json
SCRIPT = r"""
import json, os, sys, time
import numpy as np
import paddlike.distributed as dist
out, how = sys.argv[1], sys.argv[2]
calls = []

def main():
    calls.append(1)
    dist.init_parallel_env()
    seen = {"pid": os.getpid(), "world": os.environ["WORLD_SIZE"], "rank": os.environ["RANK"]}
    path = os.path.join(out, f"seen.{os.getpid()}.{len(calls)}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(seen, f)
    os.replace(path + ".tmp", path)
    while not os.path.exists(os.path.join(out, "stop")):
        x = np.ones(2)
        dist.all_reduce(x)
        time.sleep(0.05)
    dist.destroy_process_group()

if how == "restartable":
    dist.restartable(main)
else:
    main()
"""


def _start(node: Node, nnodes: str, master: str, tmp: Path, name: str, how: str):
    argv = [*LAUNCH, "--nnodes", nnodes, "--master", master, "--nproc_per_node", "1"]
    argv += ["--heartbeat_timeout", "2", "--rdzv_last_call", "1", "--kill_timeout", "5"]
    argv += ["--log_dir", str(tmp / name), str(tmp / "train.py"), str(tmp / "out"), how]
    return node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _seen(out: Path) -> list[dict]:
    found = []
    for path in sorted(out.glob("seen.*.json")):
        call = path.name.split(".")[2]
        found.append({**json.loads(path.read_text()), "call": int(call)})
    return found


def _run(tmp: Path, nnodes: str, how: str, port: int) -> tuple[subprocess.Popen, str]:
    (tmp / "train.py").write_text(SCRIPT)
    out = tmp / "out"
    out.mkdir()
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        master = f"{a.addr}:{port}"
        pa = _start(a, nnodes, master, tmp, "la", how)
        pb = _start(b, nnodes, master, tmp, "lb", how)
        try:
            wait_until(
                lambda: len([s for s in _seen(out) if s["world"] == "2"]) == 2,
                under=out, timeout=120, what="both ranks in a round of 2", writer=pa,
            )  # fmt: skip
            pb.send_signal(signal.SIGKILL)
            pb.wait(timeout=30)
            if nnodes.startswith("1:"):
                wait_until(
                    lambda: any(s["world"] == "1" for s in _seen(out)),
                    under=out, timeout=120, what="node a's round of 1", writer=pa,
                )  # fmt: skip
            (out / "stop").write_text("")
            text = pa.communicate(timeout=120)[0].decode()
        finally:
            for p in (pa, pb):
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return pa, text


def test_node_as_rank_is_kept_into_the_round_of_one_node(tmp_path: Path) -> None:
    pa, text = _run(tmp_path, "1:2", "restartable", 7431)
    assert pa.returncode == 0, text
    seen = _seen(tmp_path / "out")
    (first,) = [s for s in seen if s["world"] == "2" and s["rank"] == "0"]
    (after,) = [s for s in seen if s["world"] == "1"]
    assert after["pid"] == first["pid"] and after["call"] == 2, seen
    assert f"new round: 1 process kept (rank 0, pid {first['pid']}), 0 started anew" in text
    summary = read_summary(tmp_path / "la")
    assert summary is not None and summary.status == "succeeded"
    assert [k["pid"] for k in summary.recoveries[-1]["kept"]] == [first["pid"]]


def test_a_job_that_ends_below_min_ends_its_kept_rank_as_without_restartable(
    tmp_path: Path,
) -> None:
    ended = {}
    for how, port in (("plain", 7432), ("restartable", 7433)):
        tmp = tmp_path / how
        tmp.mkdir()
        pa, text = _run(tmp, "2:3", how, port)
        summary = read_summary(tmp / "la")
        assert summary is not None, text
        assert len({s["pid"] for s in _seen(tmp / "out")}) == 2, text  # no round after
        ended[how] = (pa.returncode, summary.status, [p.status for p in summary.processes])
        if how == "restartable":
            assert "stopping 1 kept process (no further round" in text, text
    assert ended["plain"][0] != 0 and ended["plain"][2] == ["killed"], ended
    assert ended["restartable"] == ended["plain"]
