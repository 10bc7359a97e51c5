"""Parameter-server lists on two nodes behave as one job (network namespaces nodea / nodeb).

`--servers nodea:7000,nodeb:7000 --workers ...` runs on both nodes. The launchers meet at
a rendezvous on the node of the first server; a node's servers stop only once every
trainer of the whole job has exited 0, and a failure anywhere ends the job everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from paddlike.launch.context.master import ps_master_port
from paddlike.launch.context.options import UsageError
from paddlike.launch.peers.services import ServicesStop
from paddlike.launch.plan.plan import Role
from tests.e2e.nodes.test_start import clean_env
from tests.launch.run.test_supervisor import Run, make_plan
from tests.support.logwait import wait_until
from tests.support.netns import Node, netns_cluster

# Paddle's usual server port, which is also the default --master_port: the launchers' store
# moves to the next port on node a (identically on both nodes).
SERVERS = "nodea:6170,nodeb:6170"

# The real PS runtime: trainer 0 (node a) is done at once; the others keep pulling from and
# pushing to both servers (the dense table is split between them) for `argv[1]` seconds.
TRAIN = """
import os, sys, time
import numpy as np
from paddlike.distributed import ps

ps.init()
if ps.is_server():
    ps.run_server()
    sys.exit(0)
ps.init_worker(mode="async")
w = ps.dense_table("w", shape=(16,), optimizer=ps.SGD(lr=0.01))
if int(os.environ["PADDLE_TRAINER_ID"]) == 0:
    print("trainer 0 done", flush=True)
    sys.exit(0)
steps, end = 0, time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    w.pull()
    w.push(np.ones(16, dtype=np.float32))
    steps += 1
w.pull()
print("STEPS", steps, flush=True)
ps.stop_worker()
"""

# No runtime: servers wait to be stopped; trainer `argv[1]` exits with code `argv[2]` after
# 0.5 s (in rounds before `argv[4]`, if given), the other trainers sleep `argv[3]` seconds.
BEHAVE = """
import os, sys, time
restart = int(os.environ["PADDLIKE_RESTART_COUNT"])
print("ROUND", restart, os.environ["TRAINING_ROLE"], flush=True)
if os.environ["TRAINING_ROLE"] == "PSERVER":
    time.sleep(60)
    sys.exit(0)
fails = restart < int(sys.argv[4]) if len(sys.argv) > 4 else True
if os.environ["PADDLE_TRAINER_ID"] == sys.argv[1] and fails:
    time.sleep(0.5)
    sys.exit(int(sys.argv[2]))
time.sleep(float(sys.argv[3]))
"""


def _launch(
    node: Node, tmp_path: Path, workers: str, script: str, *args: str, options=()
) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "paddlike.launch", "--servers", SERVERS, "--workers", workers,
            "--log_dir", f"log_{node.hostname}", "--tee", "none", "--kill_timeout", "3",
            *options, script, *args]  # fmt: skip
    env = dict(clean_env(), PADDLIKE_TIMEOUT="20")
    return node.popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)


def _summary(log_dir: Path) -> dict:
    return json.loads((log_dir / "summary.json").read_text())


@pytest.mark.netns
def test_servers_keep_serving_the_other_nodes_trainers_after_this_nodes_trainer_is_done(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        procs = [
            _launch(node, tmp_path, "nodea,nodeb,nodeb", "train.py", "2") for node in cluster.nodes
        ]
        errs = [p.communicate(timeout=90)[1] for p in procs]
    for p, err in zip(procs, errs, strict=True):
        assert p.returncode == 0, err
    a, b = tmp_path / "log_nodea", tmp_path / "log_nodeb"
    assert "trainer 0 done" in (a / "workerlog.0").read_text()
    for n in range(2):
        assert "STEPS" in (b / f"workerlog.{n}").read_text()
    for log_dir in (a, b):
        summary = _summary(log_dir)
        assert summary["status"] == "succeeded" and summary["root_cause"] is None
        assert {p["status"] for p in summary["processes"]} == {"ok"}
    assert "every trainer of the job finished: asking the servers to stop" in errs[0]
    assert "rendezvous with 2 nodes at 198.18.0.1:6171" in errs[0]


@pytest.mark.netns
def test_a_trainer_exiting_3_on_node_b_ends_node_a_at_once_with_the_same_cause(
    tmp_path: Path,
) -> None:
    (tmp_path / "behave.py").write_text(BEHAVE)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        pa, pb = (
            _launch(node, tmp_path, "nodea,nodeb,nodeb", "behave.py", "2", "3", "60")
            for node in cluster.nodes
        )
        err_b = pb.communicate(timeout=60)[1]
        b_done = time.monotonic()
        err_a = pa.communicate(timeout=60)[1]
        gap = time.monotonic() - b_done
    assert (pa.returncode, pb.returncode) == (3, 3), err_a + err_b
    assert gap < 1.5, err_a
    ca, cb = (_summary(tmp_path / f"log_{h}")["root_cause"] for h in ("nodea", "nodeb"))
    assert ca == cb
    assert (ca["role"], ca["rank"], ca["exit_code"]) == ("trainer", 2, 3)
    assert ca["host"] == "198.18.0.2"
    assert "trainer rank 2 exited with code 3" in err_a


@pytest.mark.netns
def test_a_restart_round_starts_servers_and_trainers_again_on_every_node(tmp_path: Path) -> None:
    (tmp_path / "behave.py").write_text(BEHAVE)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        opts = ["--max_restarts", "1"]
        procs = [
            _launch(node, tmp_path, "nodea,nodeb", "behave.py", "1", "3", "0", "1", options=opts)
            for node in cluster.nodes
        ]
        errs = [p.communicate(timeout=60)[1] for p in procs]
    for p, err in zip(procs, errs, strict=True):
        assert p.returncode == 0, err
        assert "restart 1 of 1 after: trainer rank 1 exited with code 3" in err
    for host in ("nodea", "nodeb"):
        log_dir = tmp_path / f"log_{host}"
        # (the servers may be stopped before they print: the trainers do not wait for them)
        assert "local 0 restart 1:" in (log_dir / "serverlog.0").read_text()
        assert "ROUND 1 TRAINER" in (log_dir / "workerlog.0").read_text()
        summary = _summary(log_dir)
        assert summary["status"] == "succeeded"
        assert {(p["restarts"], p["status"]) for p in summary["processes"]} == {(1, "ok")}


@pytest.mark.netns
def test_a_node_with_only_servers_stops_them_when_the_other_nodes_trainers_are_done(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        # trainer 0 is on node b here; node a only serves
        procs = [_launch(node, tmp_path, "nodeb,nodeb", "train.py", "1") for node in cluster.nodes]
        errs = [p.communicate(timeout=90)[1] for p in procs]
    for p, err in zip(procs, errs, strict=True):
        assert p.returncode == 0, err
    a = tmp_path / "log_nodea"
    assert [p["role"] for p in _summary(a)["processes"]] == ["server"]
    assert "STEPS" in (tmp_path / "log_nodeb" / "workerlog.1").read_text()


@pytest.mark.netns
def test_a_node_with_only_servers_ends_when_the_trainers_node_is_lost(tmp_path: Path) -> None:
    (tmp_path / "behave.py").write_text(BEHAVE)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        opts = ["--heartbeat_timeout", "2"]
        pa = _launch(a, tmp_path, "nodeb", "behave.py", "-1", "0", "60", options=opts)
        pb = _launch(b, tmp_path, "nodeb", "behave.py", "-1", "0", "60", options=opts)
        log = tmp_path / "log_nodeb" / "workerlog.0"
        wait_until(log.exists, under=log.parent, timeout=30, what="node b's trainer", writer=pb)
        pb.kill()
        killed = time.monotonic()
        err_a = pa.communicate(timeout=30)[1]
        took = time.monotonic() - killed
    assert pa.returncode != 0, err_a
    assert took < 2 + 2, err_a
    # its guardian outlives the SIGKILLed launcher and says so at once
    assert "node 1 (198.18.0.2) was lost: its launcher" in err_a


@pytest.mark.netns
def test_a_ps_job_on_two_nodes_meets_and_ends_through_etcd(tmp_path: Path) -> None:
    from tests.launch.peers.test_etcd import ETCD, _etcd_in, _stop

    if ETCD is None:
        pytest.skip("etcd is not installed (Debian: etcd-server)")
    (tmp_path / "train.py").write_text(TRAIN)
    with netns_cluster(3, ["nodea", "nodeb", "etcdhost"]) as cluster:
        a, b, e = cluster.nodes
        server = _etcd_in(e, tmp_path)
        try:
            opts = ["--master", f"etcd://{e.addr}:2379", "--rdzv_timeout", "30"]
            procs = [
                _launch(node, tmp_path, "nodea,nodeb,nodeb", "train.py", "1", options=opts)
                for node in (a, b)
            ]
            errs = [p.communicate(timeout=90)[1] for p in procs]
        finally:
            _stop(server)
    for p, err in zip(procs, errs, strict=True):
        assert p.returncode == 0, err
    assert f"at etcd://{e.addr}:2379" in errs[0]
    for n in range(2):
        assert "STEPS" in (tmp_path / "log_nodeb" / f"workerlog.{n}").read_text()


@pytest.mark.netns
def test_different_worker_lists_make_both_launchers_exit_2_naming_the_field(
    tmp_path: Path,
) -> None:
    (tmp_path / "behave.py").write_text(BEHAVE)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        pa = _launch(a, tmp_path, "nodea,nodeb,nodeb", "behave.py", "-1", "0", "0")
        pb = _launch(b, tmp_path, "nodea,nodeb", "behave.py", "-1", "0", "0")
        errs = [p.communicate(timeout=60)[1] for p in (pa, pb)]
    assert (pa.returncode, pb.returncode) == (2, 2), errs
    for err in errs:
        assert "rendezvous: node 1 (" in err and "198.18.0.2) disagrees on workers" in err
    assert not (tmp_path / "log_nodea" / "workerlog.0").exists()


@pytest.mark.netns
def test_servers_listed_in_another_order_on_one_node_make_both_exit_2(tmp_path: Path) -> None:
    # each node then finds itself first, so both host a rendezvous: they must find each other
    (tmp_path / "behave.py").write_text(BEHAVE)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        opts = ["--rdzv_timeout", "30"]
        pa = _launch(a, tmp_path, "nodea,nodeb", "behave.py", "-1", "0", "0", options=opts)
        pb = b.popen(
            [sys.executable, "-m", "paddlike.launch", "--servers", "nodeb:6170,nodea:6170",
             "--workers", "nodea,nodeb", "--log_dir", "log_nodeb", *opts, "behave.py"],
            cwd=tmp_path, env=clean_env(), stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        errs = [p.communicate(timeout=60)[1] for p in (pa, pb)]
    assert (pa.returncode, pb.returncode) == (2, 2), errs
    for err in errs:
        assert "disagrees on servers" in err and "both believe they are node 0" in err


@pytest.mark.parametrize(
    ("master", "master_port", "taken", "port"),
    [
        (("198.18.0.1", 6170), 6170, ["198.18.0.1:6170", "198.18.0.2:6170"], 6171),
        (("198.18.0.1", 6170), 6170, ["198.18.0.1:6170", "198.18.0.1:6171"], 6172),
        (("198.18.0.1", 6170), 6170, ["198.18.0.2:6170"], 6170),
        (("198.18.0.1", 7100), 7100, ["198.18.0.1:6170"], 7100),
    ],
)
def test_the_default_store_port_steps_past_the_ports_the_lists_give_away(
    master, master_port, taken, port
) -> None:
    assert ps_master_port(master, master_port, taken) == port


def test_a_chosen_store_port_that_a_server_uses_is_bad_input() -> None:
    with pytest.raises(UsageError, match=r"^--master_port: 7000 on 198.18.0.1 is also a server"):
        ps_master_port(("198.18.0.1", 7000), 7000, ["198.18.0.1:7000"])


# --- the supervisor's hook, on one machine ------------------------------------------------


class JobWideStop:
    """A ServicesStop the test drives: `trainers_done` is set when the supervisor reports
    this node's trainers done; `say_stop()` is the job-wide answer."""

    def __init__(self, *, answer_at_once: bool) -> None:
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.answer_at_once = answer_at_once
        self.trainers_done = threading.Event()
        self.reports = 0

    def hook(self) -> ServicesStop:
        return self

    @property
    def fd(self) -> int:
        return self.read_fd

    def local_trainers_done(self) -> None:
        self.reports += 1
        self.trainers_done.set()
        if self.answer_at_once:
            self.say_stop()

    def say_stop(self) -> None:
        os.write(self.write_fd, b"!")

    def stop_now(self) -> bool:
        return bool(os.read(self.read_fd, 16))

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_servers_outlive_this_nodes_trainers_until_the_job_says_stop(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    stop = JobWideStop(answer_at_once=False)
    # the trainer ends (exit 0) once the server is ready, so the server's pid file is there
    argv = [str(work), "term_exit:0", "exit:0"]
    run = Run(tmp_path, make_plan(argv, 2, roles=[Role.SERVER, Role.TRAINER]))
    server_alive: list[bool] = []

    def answer() -> None:  # the job-wide answer comes from another thread, as in jobwatch
        try:
            if stop.trainers_done.wait(20):
                server_alive.append(_alive(int((work / "pid.0").read_text())))
        finally:
            stop.say_stop()  # whatever happened: the round must end

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    try:
        outcome = run(services_stop=stop.hook())
    finally:
        t.join(5)
        stop.close()
    assert outcome.exit_code == 0, run.err.getvalue()
    assert [r.status for r in outcome.records] == ["ok", "ok"]
    assert server_alive == [True] and stop.reports == 1
    assert "every trainer of the job finished: asking the servers to stop" in run.err.getvalue()
    assert "all trainers finished" not in run.err.getvalue()


def test_a_node_without_trainers_reports_them_done_at_once(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    stop = JobWideStop(answer_at_once=True)
    run = Run(tmp_path, make_plan([str(work), "term_exit:0"], 1, roles=[Role.SERVER]))
    try:
        outcome = run(services_stop=stop.hook())
    finally:
        stop.close()
    assert outcome.exit_code == 0, run.err.getvalue()
    assert [r.status for r in outcome.records] == ["ok"] and stop.reports == 1
