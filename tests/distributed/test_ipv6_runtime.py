"""The workers' runtime over IPv6: the workers' store, the CPU collectives' TCP path and the
parameter servers, as real processes on ``::1`` (and, with namespaces, on ULA addresses of
two namespace nodes), started with the environment the launcher gives them: endpoints
written ``[addr]:port``, MASTER_ADDR bare."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from paddlike import netaddr
from paddlike.distributed.ps.stage_channel import StageReceiver, StageSender
from paddlike.distributed.store import StoreClient, StoreServer
from paddlike.distributed.store.server import listen
from tests.support import netns
from tests.support.fixed_ports import fixed_ports

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "support" / "ipv6_workers" / "all_reduce.py"
PS_WORKERS = REPO / "tests" / "support" / "ps_workers"


def _no_ipv6_loopback() -> str | None:
    if not socket.has_ipv6:
        return "Python was built without IPv6"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        return f"this machine has no IPv6 loopback (binding ::1: {exc})"
    return None


NO_IPV6 = _no_ipv6_loopback()
pytestmark = pytest.mark.skipif(NO_IPV6 is not None, reason=NO_IPV6 or "")


def _ports(n: int) -> list[int]:
    start = fixed_ports(n)
    return list(range(start, start + n))


def _clean_env() -> dict[str, str]:
    drop = ("PADDLE", "TRAINING_ROLE", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_", "PADDLIKE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(REPO)
    return env


@contextlib.contextmanager
def _processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every process started into the list is killed (its whole session) at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)


def _start(
    procs: list[subprocess.Popen[bytes]], argv: Sequence[str], env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *argv], env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    procs.append(proc)
    return proc


def _wait_all(procs: Sequence[subprocess.Popen[bytes]], logs: Sequence[Path], timeout: float):
    for p, log in zip(procs, logs, strict=True):
        try:
            code = p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{log.name} still running:\n{log.read_text()}") from None
        assert code == 0, f"{log.name} exited {code}:\n{log.read_text(errors='replace')}"


def _collective_env(rank: int, endpoints: list[str], master: str, host: str) -> dict[str, str]:
    """What the launcher gives a collective worker: endpoints [addr]:port, MASTER_ADDR bare."""
    master_host, master_port = netaddr.split(master)
    return {
        "PADDLE_TRAINER_ID": str(rank),
        "PADDLE_TRAINERS_NUM": str(len(endpoints)),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints),
        "PADDLE_CURRENT_ENDPOINT": endpoints[rank],
        "PADDLE_MASTER": master,
        "MASTER_ADDR": master_host,
        "MASTER_PORT": master_port,
        "PADDLE_LOCAL_RANK": str(rank),
        "PADDLE_RANK_IN_NODE": str(rank),
        "PADDLIKE_NODE_HOSTS": host,
        "PADDLIKE_CPU_TRANSPORT": "tcp",  # the TCP path even though every rank is on one host
    }


def _check_reports(out: Path, n: int, peer: str | Sequence[str]) -> None:
    got = {int(p.stem[4:]): json.loads(p.read_text()) for p in out.glob("rank*.json")}
    assert sorted(got) == list(range(n))
    peers = {peer} if isinstance(peer, str) else set(peer)
    for report in got.values():
        assert report["correct"], report
        assert report["transport"] == "tcp", report
        assert report["store_family"] == "ipv6" and report["store_peer"] in peers, report
        assert report["mesh_families"] == ["ipv6"] * (n - 1), report
        assert set(report["mesh_peers"]) <= peers, report


# --- the workers' store --------------------------------------------------------------------


def test_listen_binds_the_given_ipv6_address_not_a_wildcard() -> None:
    with listen("::1", 0, backlog=1) as sock, listen("[::1]", 0) as bracketed:
        assert sock.family == socket.AF_INET6 and sock.getsockname()[0] == "::1"
        assert bracketed.getsockname()[0] == "::1"
    with listen("127.0.0.1", 0) as v4:
        assert v4.family == socket.AF_INET


@pytest.mark.timeout(30)
def test_the_store_serves_over_ipv6_loopback_to_bracketed_and_bare_hosts() -> None:
    # Allowed hosts as the launcher writes them: a bracketed and a bare ULA; loopback passes.
    with StoreServer("::1", 0, allowed_hosts=["[fd00::7]", "fd00::8"], token=b"t").start() as srv:
        host, port = srv.address
        assert host == "::1" and srv.address_str == f"[::1]:{port}"
        with (
            StoreClient("[::1]", port, timeout=10, token=b"t") as a,
            StoreClient("::1", port, timeout=10, token=b"t") as b,
        ):
            a.set("k", b"v6")
            assert b.get("k") == b"v6"
            assert a.address == f"[::1]:{port}"
            assert b.add("n", 2) == 2
        assert srv.refused == {}


@pytest.mark.timeout(30)
def test_a_store_client_names_the_ipv6_store_it_could_not_reach_in_brackets() -> None:
    (port,) = _ports(1)
    with pytest.raises(Exception, match=rf"\[::1\]:{port}"):
        StoreClient("::1", port, timeout=0.3)


# --- the CPU collectives' TCP path -------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nproc", [2, 4])
def test_all_reduce_over_tcp_between_workers_whose_endpoints_are_ipv6_loopback(
    tmp_path: Path, nproc: int
) -> None:
    ports = _ports(nproc + 1)
    endpoints = [netaddr.join("::1", p) for p in ports[1:]]
    master = netaddr.join("::1", ports[0])
    out = tmp_path / "out"
    out.mkdir()
    logs = [tmp_path / f"workerlog.{r}" for r in range(nproc)]
    with _processes() as procs:
        for rank in range(nproc):
            env = {**_clean_env(), **_collective_env(rank, endpoints, master, "::1")}
            _start(procs, [str(WORKER), str(out)], env, logs[rank])
        _wait_all(procs, logs, 90)
    _check_reports(out, nproc, "::1")


@pytest.mark.timeout(120)
def test_a_torchrun_style_environment_with_a_bare_ipv6_master_addr_finds_its_own_address(
    tmp_path: Path,
) -> None:
    """No endpoints at all: each worker learns its address from the route to MASTER_ADDR."""
    (port,) = _ports(1)
    out = tmp_path / "out"
    out.mkdir()
    logs = [tmp_path / f"workerlog.{r}" for r in range(2)]
    with _processes() as procs:
        for rank in range(2):
            env = {**_clean_env(), "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                   "MASTER_ADDR": "::1", "MASTER_PORT": str(port),
                   "PADDLIKE_CPU_TRANSPORT": "tcp"}  # fmt: skip
            _start(procs, [str(WORKER), str(out)], env, logs[rank])
        _wait_all(procs, logs, 90)
    _check_reports(out, 2, "::1")


@contextlib.contextmanager
def _ula_nodes(n: int) -> Iterator[tuple[netns.Cluster, list[str]]]:
    """`n` namespace nodes, each with a ULA IPv6 address on its link to the others (the
    cluster's own bridge: the addresses are private to this test)."""
    with netns.netns_cluster(n) as cluster:
        # canonical spelling (no leading zeros), as the servers' and stores' lines print it
        tag = int(cluster.tag[-4:], 16)
        addrs = [str(ipaddress.IPv6Address(f"fd00:5eed:{tag:x}::{i + 1}")) for i in range(n)]
        for node, addr in zip(cluster.nodes, addrs, strict=True):
            # nodad: usable at once, not after duplicate address detection's second or so
            node.run(["ip", "-6", "addr", "add", f"{addr}/64", "dev", "eth0", "nodad"],
                     check=True, capture_output=True)  # fmt: skip
        yield cluster, addrs


@pytest.mark.netns
@pytest.mark.timeout(180)
def test_all_reduce_between_two_namespace_nodes_on_ula_ipv6_addresses(tmp_path: Path) -> None:
    """Non-loopback IPv6: each rank binds its own ULA address (node 0 also the store)."""
    with _ula_nodes(2) as (cluster, addrs):
        port = 29700  # inside the namespaces: no other test binds there
        endpoints = [netaddr.join(a, port + 1) for a in addrs]
        master = netaddr.join(addrs[0], port)
        out = tmp_path / "out"
        out.mkdir()
        logs = [tmp_path / f"workerlog.{r}" for r in range(2)]
        procs = []
        for rank, node in enumerate(cluster.nodes):
            env = {**_clean_env(), **_collective_env(rank, endpoints, master, ",".join(addrs))}
            env["PADDLE_LOCAL_RANK"] = env["PADDLE_RANK_IN_NODE"] = "0"
            env["PADDLE_NNODES"] = "2"
            with logs[rank].open("wb") as log:
                procs.append(node.popen([sys.executable, str(WORKER), str(out)], env=env,
                                        stdout=log, stderr=subprocess.STDOUT))  # fmt: skip
        _wait_all(procs, logs, 120)
    _check_reports(out, 2, addrs)


# --- the parameter servers ---------------------------------------------------------------


Starter = Callable[[int, Sequence[str], dict[str, str], Path], subprocess.Popen[bytes]]


def _ps_job(tmp: Path, servers: list[str], trainers: list[str], hosts: str, start: Starter):
    """Server i and trainer i of ctr_train.py started by `start(i, ...)`; every one must
    exit 0, each server must serve on its own endpoint, and the loss must fall."""
    env = _clean_env()
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO), str(PS_WORKERS)]),
        PADDLE_PSERVERS_IP_PORT_LIST=",".join(servers),
        PADDLE_TRAINER_ENDPOINTS=",".join(trainers),
        PADDLE_TRAINERS_NUM=str(len(trainers)),
        PADDLIKE_NODE_HOSTS=hosts,  # the servers serve only these (and loopback)
        PADDLIKE_JOB_TOKEN="ipv6-job",
    )
    out = tmp / "model"
    args = [str(PS_WORKERS / "ctr_train.py"), str(out), "--mode", "sync", "--steps", "8"]
    server_logs = [tmp / f"serverlog.{i}" for i in range(len(servers))]
    trainer_logs = [tmp / f"workerlog.{i}" for i in range(len(trainers))]
    server_procs = []
    for i, ep in enumerate(servers):
        host, port = netaddr.split(ep)
        e = dict(env, TRAINING_ROLE="PSERVER", PADDLE_ROLE="PSERVER", POD_IP=host,
                 PADDLE_PORT=port)  # fmt: skip
        server_procs.append(start(i, args, e, server_logs[i]))
    trainer_procs = []
    for i in range(len(trainers)):
        e = dict(env, TRAINING_ROLE="TRAINER", PADDLE_ROLE="TRAINER", PADDLE_TRAINER_ID=str(i))
        trainer_procs.append(start(i, args, e, trainer_logs[i]))
    _wait_all(trainer_procs, trainer_logs, 120)
    _wait_all(server_procs, server_logs, 60)
    for ep, log in zip(servers, server_logs, strict=True):
        assert f"serving on tcp://{ep}" in log.read_text(), log.read_text()
    losses = json.loads(Path(f"{out}.trainer0.json").read_text())["losses"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0], losses
    assert Path(f"{out}.npz").exists()


@pytest.mark.timeout(150)
def test_a_ps_job_trains_with_servers_and_trainers_on_ipv6_loopback(tmp_path: Path) -> None:
    """Two servers, two trainers, every endpoint [::1]:port."""
    ports = _ports(4)
    servers = [netaddr.join("::1", p) for p in ports[:2]]
    trainers = [netaddr.join("::1", p) for p in ports[2:]]
    with _processes() as procs:
        _ps_job(tmp_path, servers, trainers, "::1",
                lambda _i, argv, env, log: _start(procs, argv, env, log))  # fmt: skip


@pytest.mark.netns
@pytest.mark.timeout(180)
def test_a_ps_job_across_two_namespace_nodes_on_ula_ipv6_addresses(tmp_path: Path) -> None:
    """A server and a trainer on each node: every trainer reaches a server on the other
    node, whose gate admits it by its IPv6 address (a job host) and the job token."""
    with _ula_nodes(2) as (cluster, addrs):
        servers = [netaddr.join(a, 6170) for a in addrs]
        trainers = [netaddr.join(a, 6171) for a in addrs]

        def start(i: int, argv: Sequence[str], env: dict[str, str], log: Path):
            with log.open("wb") as out:
                return cluster.nodes[i].popen([sys.executable, *argv], env=env, stdout=out,
                                              stderr=subprocess.STDOUT)  # fmt: skip

        _ps_job(tmp_path, servers, trainers, ",".join(addrs), start)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_a_parameter_server_refuses_a_trainer_whose_ipv6_address_is_not_a_job_host(
    tmp_path: Path,
) -> None:
    """The gate compares IPv6 peer addresses too: a trainer on node 1, where the job says
    only node 0 is, is refused, and both sides name it."""
    with _ula_nodes(2) as (cluster, addrs):
        server, trainer = netaddr.join(addrs[0], 6170), netaddr.join(addrs[0], 6171)
        env = _clean_env()
        env.update(
            PYTHONPATH=os.pathsep.join([str(REPO), str(PS_WORKERS)]),
            PADDLE_PSERVERS_IP_PORT_LIST=server, PADDLE_TRAINER_ENDPOINTS=trainer,
            PADDLE_TRAINERS_NUM="1", PADDLIKE_NODE_HOSTS=addrs[0], PADDLIKE_TIMEOUT="20",
        )  # fmt: skip
        args = [sys.executable, str(PS_WORKERS / "ctr_train.py"), str(tmp_path / "m")]
        logs = [tmp_path / "serverlog.0", tmp_path / "workerlog.0"]
        roles = [
            dict(env, TRAINING_ROLE="PSERVER", POD_IP=addrs[0], PADDLE_PORT="6170"),
            dict(env, TRAINING_ROLE="TRAINER", PADDLE_TRAINER_ID="0"),
        ]
        procs = []
        for node, role_env, log in zip(cluster.nodes, roles, logs, strict=True):
            with log.open("wb") as out:
                procs.append(node.popen(args, env=role_env, stdout=out, stderr=subprocess.STDOUT))
        try:
            code = procs[1].wait(90)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the trainer was not refused:\n{logs[1].read_text()}") from None
        trainer_log, server_log = logs[1].read_text(), logs[0].read_text()
    assert code != 0, trainer_log
    assert "PsAuthError" in trainer_log, trainer_log
    assert f"refused peer {addrs[1]}" in server_log, server_log


@pytest.mark.timeout(60)
def test_a_heter_stage_channel_carries_a_batch_and_its_answer_over_ipv6_loopback() -> None:
    (port,) = _ports(1)
    endpoint = netaddr.join("::1", port)
    receiver = StageReceiver(endpoint, stage=2, index=0, senders={0: "[::1]:6100"}, timeout=20)
    sender = StageSender(endpoint, stage=1, index=0, timeout=20)
    try:
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        sender.send_forward(x, batch_id=3)
        trainer_id, batch_id, got = receiver.recv_forward()
        assert (trainer_id, batch_id) == (0, 3)
        receiver.send_backward(got * 2, 3)
        np.testing.assert_array_equal(sender.recv_backward(3), x * 2)
    finally:
        sender.close()
        receiver.close()


# --- through the launcher: python -m paddlike.launch --ips ::1 ----------------------------


def _launch(tmp: Path, argv: Sequence[str], env: dict[str, str]) -> str:
    """Run the launcher to its end (its whole session killed if it overstays); its output."""
    cmd = [sys.executable, "-m", "paddlike.launch", "--ips", "::1", "--log_dir", str(tmp / "log"),
           *argv]  # fmt: skip
    with _processes() as procs:
        with (tmp / "launcher.out").open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
        procs.append(proc)
        code = proc.wait(100)
    text = (tmp / "launcher.out").read_text(errors="replace")
    logs = "".join(f"--- {p.name}\n{p.read_text(errors='replace')}"
                   for p in sorted((tmp / "log").glob("*log.*")))  # fmt: skip
    assert code == 0, text + logs
    return text + logs


@pytest.mark.timeout(120)
def test_the_launcher_with_ips_ipv6_loopback_runs_all_reduce_over_tcp_on_ipv6(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = dict(_clean_env(), PADDLIKE_CPU_TRANSPORT="tcp")
    _launch(tmp_path, ["--nproc_per_node", "4", str(WORKER), str(out)], env)
    _check_reports(out, 4, "::1")


@pytest.mark.timeout(120)
def test_the_launcher_with_ips_ipv6_loopback_runs_a_ps_job(tmp_path: Path) -> None:
    env = dict(_clean_env(), PYTHONPATH=os.pathsep.join([str(REPO), str(PS_WORKERS)]))
    model = tmp_path / "model"
    script = [str(PS_WORKERS / "ctr_train.py"), str(model), "--steps", "8"]
    text = _launch(tmp_path, ["--server_num", "2", "--worker_num", "2", *script], env)
    assert text.count("serving on tcp://[::1]:") == 2, text
    losses = json.loads(Path(f"{model}.trainer0.json").read_text())["losses"]
    assert losses[-1] < losses[0], losses
