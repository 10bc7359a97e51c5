"""Elastic jobs on namespace nodes (`--nnodes MIN:MAX`): nodes join a running job and
leave it (launcher SIGKILLed), every change a new round with a consistent world, through
node 0's store and through a real etcd."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.support.logwait import wait_until
from tests.support.multinode_common import LAUNCH
from tests.support.netns import Node, netns_cluster

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]

HEARTBEAT = 2.0  # --heartbeat_timeout of these jobs: a lost node is noticed within it

# Each worker prints one line per round it runs in, then waits for the test's "stop" file.
# With a "fail" file, rank 0 exits 3 (in rounds before the first failure restart).
WORKER = """
import os, sys, time, pathlib
ctl = pathlib.Path(sys.argv[1])
rank, restart = int(os.environ["RANK"]), os.environ["PADDLIKE_RESTART_COUNT"]
print("ROUND", rank, os.environ["WORLD_SIZE"], os.environ["GROUP_RANK"],
      os.environ["PADDLE_TRAINERS_NUM"], restart, os.environ["TORCHELASTIC_RESTART_COUNT"],
      os.environ["PADDLE_TRAINER_ENDPOINTS"], repr(time.time()), flush=True)
while not (ctl / "stop").exists():
    if (ctl / "fail").exists() and restart == "0" and rank == 0:
        sys.exit(3)
    time.sleep(0.05)
"""


class Line:
    """One ROUND line of a worker log."""

    def __init__(self, text: str) -> None:
        f = text.split()
        self.rank, self.world, self.group_rank = int(f[1]), int(f[2]), int(f[3])
        self.trainers_num, self.restart, self.torch_restart = int(f[4]), int(f[5]), int(f[6])
        self.endpoints, self.time = f[7], float(f[8])


def _lines(log_dir: Path) -> list[Line]:
    log = log_dir / "workerlog.0"
    if not log.exists():
        return []
    return [Line(t) for t in _complete_lines(log.read_text()) if t.startswith("ROUND ")]


def _complete_lines(text: str) -> list[str]:
    """The lines a worker has finished: `python -u` writes a print's pieces one by one,
    so the file may end in the middle of a line."""
    return text.split("\n")[:-1]


def _last(log_dir: Path) -> Line | None:
    lines = _lines(log_dir)
    return lines[-1] if lines else None


def _wait_until(
    under: Path,
    what: str,
    ok: Callable[[], bool],
    timeout: float = 30.0,
    procs: Sequence[subprocess.Popen[bytes]] = (),
) -> None:
    """Wait until `ok` (files the workers write under `under`); on the deadline, stop
    `procs` and fail with the end of each launcher's output."""
    try:
        wait_until(ok, under=under, timeout=timeout, what=what)
    except AssertionError:
        outs = []
        for proc in procs:
            proc.kill()
            out = proc.communicate(timeout=10)[0].decode(errors="replace")
            outs.append("\n".join(out.splitlines()[-15:]))
        pytest.fail(f"timed out waiting for {what}; launchers said:\n" + "\n--\n".join(outs))


def _worlds(dirs: Sequence[Path], size: int, after: float = 0.0) -> bool:
    lasts = [_last(d) for d in dirs]
    return all(line is not None and line.world == size and line.time > after for line in lasts)


def _restarted(dirs: Sequence[Path]) -> bool:
    lasts = [_last(d) for d in dirs]
    return all(line is not None and line.restart == 1 == line.torch_restart for line in lasts)


def _start(
    node: Node, master: str, log_dir: Path, script: Path, ctl: Path, *extra: str
) -> subprocess.Popen[bytes]:
    argv = [*LAUNCH, "--nnodes", "2:4", "--master", master, "--nproc_per_node", "1"]
    argv += ["--heartbeat_timeout", str(HEARTBEAT), "--rdzv_last_call", "1"]
    argv += ["--rdzv_timeout", "60", "--log_dir", str(log_dir), "--kill_timeout", "2", *extra]
    return node.popen(
        [*argv, str(script), str(ctl)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    return script, ctl


def _consistent(dirs: Sequence[Path], size: int) -> None:
    """Every node's last round: ranks 0..size-1 once each, the same endpoints everywhere,
    Paddle's and torchrun's variables agreeing."""
    lasts = [_last(d) for d in dirs]
    assert all(line is not None for line in lasts)
    assert sorted(line.rank for line in lasts) == list(range(size))
    assert len({line.endpoints for line in lasts}) == 1
    assert len(lasts[0].endpoints.split(",")) == size
    for line in lasts:
        assert line.world == line.trainers_num == size
        assert line.group_rank == line.rank  # one worker per node


@contextlib.contextmanager
def _round_of_three(
    tmp_path: Path, port: int, *extra: str
) -> Iterator[tuple[list[Node], list[subprocess.Popen[bytes]], list[Path], Path]]:
    """Three namespace nodes running one elastic round together (node 0's store on the
    first): (nodes, launchers, log directories, the workers' control directory)."""
    script, ctl = _setup(tmp_path)
    dirs = [tmp_path / f"l{i}" for i in range(3)]
    with netns_cluster(3, ["nodea", "nodeb", "nodec"]) as cluster:
        master = f"{cluster.nodes[0].addr}:{port}"
        procs = [
            _start(n, master, d, script, ctl, *extra)
            for n, d in zip(cluster.nodes, dirs, strict=True)
        ]
        _wait_until(tmp_path, "a round of 3", lambda: _worlds(dirs, 3), timeout=40, procs=procs)
        yield cluster.nodes, procs, dirs, ctl


def test_a_node_that_joins_and_one_that_is_killed_each_start_a_new_round(tmp_path: Path) -> None:
    script, ctl = _setup(tmp_path)
    dirs = [tmp_path / f"l{i}" for i in range(3)]
    with netns_cluster(3, ["nodea", "nodeb", "nodec"]) as cluster:
        a, b, c = cluster.nodes
        master = f"{a.addr}:7410"
        opts = ("--max_restarts", "1")
        pa = _start(a, master, dirs[0], script, ctl, *opts)
        pb = _start(b, master, dirs[1], script, ctl, *opts)
        _wait_until(tmp_path, "a round of 2", lambda: _worlds(dirs[:2], 2), procs=(pa, pb))
        _consistent(dirs[:2], 2)

        pc = _start(c, master, dirs[2], script, ctl, *opts)
        _wait_until(
            tmp_path,
            "a round of 3 that includes the new node",
            lambda: _worlds(dirs, 3),
            procs=(pa, pb, pc),
        )
        _consistent(dirs, 3)

        killed_at = time.time()
        pc.send_signal(signal.SIGKILL)
        _wait_until(
            tmp_path,
            "the survivors' new round",
            lambda: _worlds(dirs[:2], 2, killed_at),
            procs=(pa, pb),
        )
        _consistent(dirs[:2], 2)
        restarted = max(_last(d).time for d in dirs[:2]) - killed_at  # type: ignore[union-attr]
        assert restarted < HEARTBEAT + 2.0, f"survivors restarted {restarted:.2f} s after"

        # two membership changes, and --max_restarts 1 is still there for a failure
        assert all(line.restart == 0 == line.torch_restart for d in dirs for line in _lines(d))
        (ctl / "fail").touch()
        _wait_until(
            tmp_path, "a failure and its restart", lambda: _restarted(dirs[:2]), procs=(pa, pb)
        )
        _consistent(dirs[:2], 2)
        (ctl / "stop").touch()
        outs = [p.communicate(timeout=60)[0].decode() for p in (pa, pb)]
    assert [pa.returncode, pb.returncode] == [0, 0], outs
    assert "new round (membership change)" in outs[0]
    assert f"{c.addr}" in outs[0]  # the lost node is named
    summary = json.loads((dirs[0] / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    members = [len(r["members"]) for r in summary["rounds"]]
    assert members == [2, 3, 2, 2], summary["rounds"]
    assert [r["membership"] for r in summary["rounds"]] == ["joined", "lost", None, None]
    endpoints = (dirs[0] / "endpoints.log").read_text()
    assert endpoints.startswith("# paddlike round 3: 2 nodes ")
    shown = subprocess.run(
        [sys.executable, "-m", "paddlike.logs", str(dirs[0])],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout
    assert f"round 1: 3 nodes ({a.addr}, {b.addr}, {c.addr}), restarts 0: node 2" in shown, shown


def test_below_min_every_node_left_exits_non_zero_naming_the_lost_node(tmp_path: Path) -> None:
    with _round_of_three(tmp_path, 7411, "--nnodes", "3:4") as (nodes, procs, _, _):
        procs[2].send_signal(signal.SIGKILL)  # (the later --nnodes wins: MIN is 3 here)
        outs = [p.communicate(timeout=30)[0].decode() for p in procs[:2]]
    assert [p.returncode for p in procs[:2]] == [1, 1], outs
    for out in outs:
        # its guardian said so at once (a launcher SIGKILLed: no waiting for heartbeats)
        assert f"node 2 ({nodes[2].addr}) was lost: its launcher (pid" in out, out
        assert "fewer than the 3 that --nnodes 3:4 needs" in out, out


def test_losing_the_node_that_hosts_the_store_ends_the_job_naming_it(tmp_path: Path) -> None:
    with _round_of_three(tmp_path, 7412) as (nodes, procs, _, _):
        procs[0].send_signal(signal.SIGKILL)
        outs = [p.communicate(timeout=30)[0].decode() for p in procs[1:]]
    assert [p.returncode for p in procs[1:]] == [1, 1], outs
    for out in outs:
        assert f"lost contact with node 0 ({nodes[0].addr})" in out, out


ETCD = shutil.which("etcd")


def _etcd_on(node: Node, tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A one-member etcd on `node` (the cluster's teardown kills it); its --master."""
    etcd = node.popen(
        [
            str(ETCD), "--data-dir", str(tmp_path / "etcd-data"), "--name", "t",
            "--listen-client-urls", f"http://{node.addr}:2379",
            "--advertise-client-urls", f"http://{node.addr}:2379",
            "--listen-peer-urls", f"http://{node.addr}:2380",
            "--initial-advertise-peer-urls", f"http://{node.addr}:2380",
            "--initial-cluster", f"t=http://{node.addr}:2380",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return etcd, f"etcd://{node.addr}:2379"


@pytest.mark.skipif(ETCD is None, reason="etcd is not installed (Debian: etcd-server)")
def test_on_etcd_losing_node_0_is_an_ordinary_membership_change(tmp_path: Path) -> None:
    script, ctl = _setup(tmp_path)
    dirs = [tmp_path / f"l{i}" for i in range(3)]
    with netns_cluster(4, ["nodea", "nodeb", "nodec", "etcd"]) as cluster:
        a, b, c, e = cluster.nodes
        etcd, master = _etcd_on(e, tmp_path)
        # etcd leases last whole seconds (2 at least): a wider margin on two busy cores
        extra = ("--job_id", "elastic-etcd", "--heartbeat_timeout", "4")
        procs = [
            _start(n, master, d, script, ctl, *extra) for n, d in zip((a, b, c), dirs, strict=True)
        ]
        _wait_until(tmp_path, "a round of 3", lambda: _worlds(dirs, 3), timeout=40, procs=procs)
        _consistent(dirs, 3)
        first = next(i for i, d in enumerate(dirs) if _last(d).rank == 0)  # type: ignore[union-attr]
        killed_at = time.time()
        procs[first].send_signal(signal.SIGKILL)
        rest = [d for i, d in enumerate(dirs) if i != first]
        _wait_until(
            tmp_path, "the survivors' new round", lambda: _worlds(rest, 2, killed_at), procs=procs
        )
        _consistent(rest, 2)
        (ctl / "stop").touch()
        outs = [p.communicate(timeout=60)[0].decode() for i, p in enumerate(procs) if i != first]
        etcd.terminate()
        etcd.wait(timeout=10)
    assert [p.returncode for i, p in enumerate(procs) if i != first] == [0, 0], outs


def test_a_node_whose_launcher_gets_sigterm_leaves_and_the_others_go_on(tmp_path: Path) -> None:
    with _round_of_three(tmp_path, 7413) as (nodes, procs, dirs, ctl):
        left_at = time.time()
        procs[2].send_signal(signal.SIGTERM)  # a preemption's notice
        out_c = procs[2].communicate(timeout=30)[0].decode()
        _wait_until(
            tmp_path,
            "the others' new round",
            lambda: _worlds(dirs[:2], 2, left_at),
            procs=procs[:2],
        )
        _consistent(dirs[:2], 2)
        (ctl / "stop").touch()
        outs = [p.communicate(timeout=60)[0].decode() for p in procs[:2]]
    assert procs[2].returncode == 143, out_c
    assert "this node leaves the elastic job" in out_c, out_c
    assert [p.returncode for p in procs[:2]] == [0, 0], outs
    assert f"launcher on {nodes[2].addr} received SIGTERM" in outs[0], outs[0]


def test_a_launcher_stopped_while_it_waits_for_more_nodes_exits_at_once(tmp_path: Path) -> None:
    script, ctl = _setup(tmp_path)
    with netns_cluster(1, ["nodea"]) as cluster:
        (a,) = cluster.nodes
        proc = _start(a, f"{a.addr}:7414", tmp_path / "l", script, ctl)
        assert proc.stdout is not None
        # it waits for a second node (MIN 2): its progress line says so
        first = proc.stdout.readline().decode()
        while "of at least 2 nodes" not in first:
            first = proc.stdout.readline().decode()
            assert first, "the launcher ended before it said what it waits for"
        stopped_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=10)[0].decode()
        took = time.monotonic() - stopped_at
    assert proc.returncode == 143, out
    assert "received SIGTERM while waiting for the other nodes at the rendezvous" in out, out
    assert took < 3.0, f"took {took:.2f} s to stop"


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "elastic_train.py"


def _example(node: Node, master: str, log_dir: Path, ckpt: Path) -> subprocess.Popen[bytes]:
    argv = [*LAUNCH, "--nnodes", "2:3", "--master", master, "--nproc_per_node", "1"]
    argv += ["--heartbeat_timeout", str(HEARTBEAT), "--rdzv_last_call", "1", "--kill_timeout", "2"]
    argv += ["--log_dir", str(log_dir), str(EXAMPLE), "--steps", "60", "--checkpoint_every", "5"]
    argv += ["--checkpoint", str(ckpt), "--step_time", "0.05"]
    return node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_the_example_ends_like_an_uninterrupted_run_after_a_join_and_a_loss(
    tmp_path: Path,
) -> None:
    alone = tmp_path / "alone"
    argv = [*LAUNCH, "--nproc_per_node", "1", "--log_dir", str(alone / "log"), str(EXAMPLE)]
    argv += ["--steps", "60", "--checkpoint_every", "5", "--checkpoint", str(alone / "ckpt")]
    done = subprocess.run(
        argv,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    expected = (alone / "ckpt" / "final.txt").read_text()

    ckpt = tmp_path / "ckpt"  # on the host: every namespace node sees it (a shared home)
    dirs = [tmp_path / f"l{i}" for i in range(3)]

    def resumed() -> int:
        return sum(
            t.startswith("RESUMED ")
            for d in dirs
            if (d / "workerlog.0").exists()
            for t in (d / "workerlog.0").read_text().splitlines()
        )

    with netns_cluster(3, ["nodea", "nodeb", "nodec"]) as cluster:
        a, b, c = cluster.nodes
        master = f"{a.addr}:7415"
        procs = [_example(n, master, d, ckpt) for n, d in ((a, dirs[0]), (b, dirs[1]))]
        _wait_until(
            tmp_path, "a first checkpoint", lambda: (ckpt / "checkpoint.npz").exists(), procs=procs
        )
        procs.append(_example(c, master, dirs[2], ckpt))
        _wait_until(tmp_path, "the round of 3 resuming", lambda: resumed() >= 1, procs=procs)
        procs[2].send_signal(signal.SIGKILL)
        _wait_until(tmp_path, "the survivors resuming", lambda: resumed() >= 2, procs=procs[:2])
        outs = [p.communicate(timeout=60)[0].decode() for p in procs[:2]]
    assert [p.returncode for p in procs[:2]] == [0, 0], outs
    assert (ckpt / "final.txt").read_text() == expected


def test_at_elastic_level_0_a_survivor_waits_for_a_replacement_node(tmp_path: Path) -> None:
    script, ctl = _setup(tmp_path)
    dirs = [tmp_path / f"l{i}" for i in range(3)]
    level0 = ("--nnodes", "2", "--elastic_level", "0")  # Paddle's fault tolerance: 2 nodes
    with netns_cluster(3, ["nodea", "nodeb", "nodec"]) as cluster:
        a, b, c = cluster.nodes
        master = f"{a.addr}:7416"
        procs = [
            _start(n, master, d, script, ctl, *level0)
            for n, d in zip((a, b), dirs[:2], strict=True)
        ]
        _wait_until(tmp_path, "a round of 2", lambda: _worlds(dirs[:2], 2), procs=procs)
        lost_at = time.time()
        procs[1].send_signal(signal.SIGKILL)
        procs.append(_start(c, master, dirs[2], script, ctl, *level0))  # the replacement
        _wait_until(
            tmp_path,
            "the survivor and the replacement in a new round",
            lambda: _worlds([dirs[0], dirs[2]], 2, lost_at),
            procs=[procs[0], procs[2]],
        )
        _consistent([dirs[0], dirs[2]], 2)
        (ctl / "stop").touch()
        outs = [p.communicate(timeout=60)[0].decode() for p in (procs[0], procs[2])]
    assert [procs[0].returncode, procs[2].returncode] == [0, 0], outs
    assert f"node 1 ({b.addr}) was lost: its launcher (pid" in outs[0], outs[0]


TORCH_SCRIPT = """
import os, sys, time, pathlib
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print("TORCH", rank, world, os.environ["TORCHELASTIC_RESTART_COUNT"], flush=True)
stop, t = pathlib.Path(sys.argv[1]), None
while not stop.exists():
    t = torch.ones(4) * (rank + 1)
    dist.all_reduce(t)
    time.sleep(0.05)
print("DONE", rank, world, t[0].item(), flush=True)
dist.destroy_process_group()
"""


def test_a_torch_script_under_torchruns_elastic_flags_grows_when_a_node_joins(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    script, stop = tmp_path / "train.py", tmp_path / "stop"
    script.write_text(TORCH_SCRIPT)
    dirs = [tmp_path / "la", tmp_path / "lb"]

    def lines(d: Path, tag: str) -> list[list[str]]:
        log = d / "workerlog.0"
        text = log.read_text() if log.exists() else ""
        return [t.split()[1:] for t in _complete_lines(text) if t.startswith(tag + " ")]

    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes

        def start(node: Node, log_dir: Path) -> subprocess.Popen[bytes]:
            argv = [*LAUNCH, "--nnodes", "1:2", "--rdzv-backend", "c10d"]
            argv += ["--rdzv-endpoint", f"{a.addr}:29400", "--nproc-per-node", "1"]
            argv += [
                "--rdzv-conf",
                "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=2",
            ]
            argv += ["--log_dir", str(log_dir), str(script), str(stop)]
            return node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        pa = start(a, dirs[0])
        _wait_until(
            tmp_path,
            "a world of 1",
            lambda: lines(dirs[0], "TORCH") == [["0", "1", "0"]],
            procs=[pa],
        )
        pb = start(b, dirs[1])
        _wait_until(
            tmp_path,
            "a world of 2",
            lambda: all(
                len(lines(d, "TORCH")) >= 1 and lines(d, "TORCH")[-1][1] == "2" for d in dirs
            ),
            procs=[pa, pb],
        )
        stop.touch()
        outs = [p.communicate(timeout=60)[0].decode() for p in (pa, pb)]
    assert [pa.returncode, pb.returncode] == [0, 0], outs
    assert sorted(lines(d, "TORCH")[-1][0] for d in dirs) == ["0", "1"]
    # ranks 1 and 2 summed in the world of 2, on both nodes; no failure restart used
    assert [lines(d, "DONE")[-1][1:] for d in dirs] == [["2", "3.0"], ["2", "3.0"]]
    assert all(t[2] == "0" for d in dirs for t in lines(d, "TORCH"))


@pytest.mark.parametrize("backend", ["store", "etcd"])
def test_a_node_waiting_at_max_is_told_the_job_ended_and_starts_nothing(
    tmp_path: Path, backend: str
) -> None:
    if backend == "etcd" and ETCD is None:
        pytest.skip("etcd is not installed (Debian: etcd-server)")
    script, ctl = _setup(tmp_path)
    dirs = [tmp_path / f"l{i}" for i in range(3)]
    one_to_two = ("--nnodes", "1:2")  # a node alone would be a job: it must not start one
    with netns_cluster(4, ["nodea", "nodeb", "nodec", "etcd"]) as cluster:
        a, b, c, e = cluster.nodes
        if backend == "etcd":
            _, master = _etcd_on(e, tmp_path)
            one_to_two += ("--job_id", "waiting-at-max", "--heartbeat_timeout", "4")
        else:
            master = f"{a.addr}:7417"
        procs = [
            _start(n, master, d, script, ctl, *one_to_two)
            for n, d in zip((a, b), dirs[:2], strict=True)
        ]
        _wait_until(tmp_path, "a round of 2", lambda: _worlds(dirs[:2], 2), procs=procs)
        waiting = _start(c, master, dirs[2], script, ctl, *one_to_two)
        assert waiting.stdout is not None
        line = waiting.stdout.readline().decode()
        while "waiting for the running round" not in line:
            assert line, "the third launcher ended before it said it waits"
            line = waiting.stdout.readline().decode()
        (ctl / "stop").touch()
        outs = [p.communicate(timeout=60)[0].decode() for p in (*procs, waiting)]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert waiting.returncode == 1, outs[2]
    assert "ended before this node got a place in it (it succeeded)" in outs[2], outs[2]
    assert _lines(dirs[2]) == []
