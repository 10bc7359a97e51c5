"""`--master_port` means what torchrun and OneFlow make it mean: the port of node 0 that
the workers' store listens on (their MASTER_PORT / PADDLE_MASTER). The launchers then
meet at the port after it, unless --master (Paddle's: where the launchers meet) says
where. Parameter-server jobs, whose workers have no MASTER_PORT, keep --master_port as
the launchers' port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.launch.context.master import cannot_host_line, launchers_master, workers_port
from paddlike.launch.context.options import UsageError, parse_options
from paddlike.launch.plan.layout import collective_layout
from paddlike.launch.plan.world import NodeEntry, RendezvousResult
from tests.support.fixed_ports import fixed_ports
from tests.support.multinode_common import LAUNCH
from tests.support.netns import Node, netns_cluster

HOSTS = ("10.0.0.1", "10.0.0.2")
PS_LISTS = ("--servers", "10.0.0.1:6000,10.0.0.2:6000", "--workers", "10.0.0.1,10.0.0.2")


def _options(argv, env=None):  # type: ignore[no-untyped-def]
    return parse_options([*argv, "train.py"], env or {})


@pytest.mark.parametrize(
    ("argv", "env", "scheduler_master", "launchers", "workers"),
    [
        # no --master_port: as before, launchers at 6170, the workers' port picked free
        ((), {}, None, ("10.0.0.1", 6170), None),
        (("--master_addr", "10.0.0.1"), {}, None, ("10.0.0.1", 6170), None),
        (("--master", "10.0.0.1:7100"), {}, None, ("10.0.0.1", 7100), None),
        # --ips lists + --master_port: the workers at P, the launchers at P+1
        (("--ips", "10.0.0.1,10.0.0.2", "--master_port", "7000"), {}, None,
         ("10.0.0.1", 7001), 7000),
        # torchrun / OneFlow: --nnodes --node_rank --master_addr --master_port
        (("--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.1",
          "--master_port", "29500"), {}, None, ("10.0.0.1", 29501), 29500),
        (("--master-addr", "10.0.0.1", "--master-port", "29500"), {}, None,
         ("10.0.0.1", 29501), 29500),
        # Kubeflow's PyTorchJob sets the same as PET_ variables
        ((), {"PET_MASTER_ADDR": "10.0.0.1", "PET_MASTER_PORT": "29500"}, None,
         ("10.0.0.1", 29501), 29500),
        ((), {"PADDLIKE_MASTER_PORT": "29500"}, None, ("10.0.0.1", 29501), 29500),
        # the identical command on every node: --master (or --rdzv-endpoint) says where
        # the launchers meet; --master_port stays the workers'
        (("--master", "10.0.0.1:7100", "--nnodes", "2", "--master_port", "7000"), {}, None,
         ("10.0.0.1", 7100), 7000),
        (("--rdzv-endpoint", "10.0.0.1:7100", "--master_port", "7000"), {}, None,
         ("10.0.0.1", 7100), 7000),
        # PaddleCloud's PADDLE_MASTER is where the launchers meet
        ((), {}, "10.0.0.5:7000", ("10.0.0.5", 7000), None),
        (("--master_port", "7100"), {}, "10.0.0.5:7000", ("10.0.0.5", 7000), 7100),
        # parameter-server lists: the workers have no MASTER_PORT; the launchers' port
        ((*PS_LISTS, "--master_port", "7000"), {}, None, ("10.0.0.1", 7000), None),
        (PS_LISTS, {}, None, ("10.0.0.1", 6170), None),
    ],
)  # fmt: skip
def test_where_the_launchers_meet_and_which_port_the_workers_get(
    argv, env, scheduler_master, launchers, workers
):
    o = _options(argv, env)
    assert launchers_master(o, HOSTS, scheduler_master) == launchers
    assert workers_port(o) == workers


def test_etcd_is_where_the_launchers_meet_and_master_port_stays_the_workers():
    o = _options(["--master", "etcd://10.0.0.9:2379", "--master_port", "7000"])
    assert workers_port(o) == 7000


@pytest.mark.parametrize(
    ("argv", "scheduler_master", "message"),
    [
        (("--master", "10.0.0.1:7000", "--master_port", "7000"), None,
         r"^--master_port: 7000 is the workers' port on node 0, but the launchers meet there "
         r"too \(--master 10.0.0.1:7000\)"),
        (("--master_port", "7000"), "10.0.0.5:7000",
         r"^--master_port: 7000 is the workers' port on node 0, but the launchers meet there "
         r"too \(PADDLE_MASTER=10.0.0.5:7000\)"),
        (("--master_port", "65535"), None,
         r"^--master_port: 65535 is the workers' port, and the launchers meet at the port "
         r"after it, which does not exist"),
    ],
)  # fmt: skip
def test_one_port_for_both_stores_is_a_usage_error(argv, scheduler_master, message):
    with pytest.raises(UsageError, match=message):
        launchers_master(_options(argv), HOSTS, scheduler_master)


@pytest.mark.parametrize(
    ("argv", "env", "scheduler_master", "line"),
    [
        # torchrun's --master_port: the port taken is one the user never typed
        (("--master_port", "29500"), {}, None,
         "--master_port: 29500 is the workers' MASTER_PORT, and the launchers meet at the "
         "port after it: node 0 cannot host the launchers' store at h:29501 (Address already "
         "in use); pick a --master_port whose next port is free too, or give the launchers a "
         "port of their own with --master h:PORT (torchrun's --rdzv_endpoint)"),
        ((), {"PET_MASTER_PORT": "29500"}, None,
         "--master_port (from PET_MASTER_PORT): 29500 is the workers' MASTER_PORT, and"),
        # the launchers' port itself, as given
        (("--rdzv_endpoint", "h:29501", "--master_port", "29500"), {}, None,
         "--master (from --rdzv_endpoint): cannot host the launchers' store at h:29501: Address "
         "already in use; another job's store may hold it, pick another port"),
        (("--master_port", "29500"), {}, "h:29501",
         "PADDLE_MASTER=h:29501 (set by the scheduler): cannot host the launchers' store at "
         "h:29501: Address already in use; another job's store may hold it"),
        ((*PS_LISTS, "--master_port", "29501"), {}, None,
         "--master_port: cannot host the launchers' store at h:29501: Address already in use; "
         "another job's store may hold it, pick another --master_port"),
        ((), {}, None,
         "--master: cannot host the launchers' store at h:29501 (the default port, no --master "
         "given): Address already in use; another job's store may hold it; give the launchers "
         "a port of their own with --master h:PORT"),
    ],
)  # fmt: skip
def test_a_taken_launchers_port_is_named_after_the_option_that_chose_it(
    argv, env, scheduler_master, line
):
    reason = "Address already in use"
    got = cannot_host_line(_options(argv, env), scheduler_master, "h:29501", reason)
    assert got.startswith(line), got


def test_the_given_port_is_the_workers_store_port_in_the_layout():
    nodes = tuple(
        NodeEntry(i, h, "", 0, (40001 + 10 * i, 40002 + 10 * i), {}, "j")
        for i, h in enumerate(HOSTS)
    )
    world = RendezvousResult(0, nodes, "j", 0.0)
    assert collective_layout(world, 1, 1).master == "10.0.0.1:40002"
    assert collective_layout(world, 1, 1, master_port=7000).master == "10.0.0.1:7000"


# A worker that writes what it was told about the workers' store.
MASTER_ENV = """
import json, os, sys
with open(os.path.join(sys.argv[1], f"master.{os.environ['RANK']}.json"), "w") as f:
    json.dump([os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"],
               os.environ["PADDLE_MASTER"]], f)
"""


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "master_env.py"
    path.write_text(MASTER_ENV)
    return path


def _clean_env() -> dict[str, str]:
    drop = ("PADDLE", "PET_", "PADDLIKE_", "MASTER_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def _seen(out_dir: Path, world: int) -> list[list[str]]:
    return [json.loads((out_dir / f"master.{r}.json").read_text()) for r in range(world)]


@pytest.mark.timeout(60)
def test_a_one_node_launch_gives_its_workers_the_master_port(tmp_path):
    port = fixed_ports()
    cmd = [*LAUNCH, "--nproc_per_node", "2", "--master_port", str(port)]
    cmd += ["--log_dir", str(tmp_path / "log"), str(_script(tmp_path)), str(tmp_path)]
    done = subprocess.run(cmd, env=_clean_env(), capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stdout + done.stderr
    expected = ["127.0.0.1", str(port), f"127.0.0.1:{port}"]
    assert _seen(tmp_path, 2) == [expected, expected]


@pytest.mark.timeout(60)
def test_a_one_node_launch_whose_master_port_is_taken_exits_2_naming_it(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cmd = [*LAUNCH, "--nproc_per_node", "2", "--master_port", str(port)]
        cmd += ["--log_dir", str(tmp_path / "log"), str(_script(tmp_path)), str(tmp_path)]
        done = subprocess.run(cmd, env=_clean_env(), capture_output=True, text=True, timeout=50)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--master_port {port}: port {port} on 127.0.0.1 is in use" in done.stderr
    assert not list(tmp_path.glob("master.*.json"))


@pytest.mark.timeout(60)
def test_a_node_whose_node_0_never_comes_names_node_0s_address_in_the_torchrun_form(tmp_path):
    """--master_addr names node 0 before anyone published an address: the timeout's line
    names it, as the --ips form does (it printed "node 0 ()")."""
    port = fixed_ports(2)  # the workers' port and the launchers' after it: nobody there
    cmd = [*LAUNCH, "--nnodes", "2", "--node_rank", "1", "--master_addr", "127.0.0.1"]
    cmd += ["--master_port", str(port), "--rdzv_timeout", "1", "--log_dir", str(tmp_path / "l")]
    cmd += [str(_script(tmp_path)), str(tmp_path)]
    done = subprocess.run(cmd, env=_clean_env(), capture_output=True, text=True, timeout=50)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        f"rendezvous: node 0 (127.0.0.1) never opened the launchers' store at 127.0.0.1:"
        f"{port + 1} within 1 s (--rdzv_timeout)"
    ) in done.stderr, done.stderr


# Namespace nodes have ports of their own, but the launchers' port registry is shared by
# the machine: a run of ports no other test and no launcher's reservation uses (below the
# ephemeral range, where launchers' workers get theirs), P..P+5 for the tests here.
NETNS_PORT = fixed_ports(6)


def _start(  # type: ignore[no-untyped-def]
    node: Node, rank: int, master: Node, log_dir: Path, script: Path, out: Path, timeout=30
):
    argv = [*LAUNCH, "--nnodes", "2", "--node_rank", str(rank), "--master_addr", master.addr]
    argv += ["--master_port", str(NETNS_PORT), "--nproc_per_node", "2"]
    argv += ["--rdzv_timeout", str(timeout)]
    argv += ["--log_dir", str(log_dir), str(script), str(out)]
    return node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_clean_env())


@pytest.mark.netns
@pytest.mark.xdist_group("master_port")
@pytest.mark.timeout(90)
def test_torchrun_style_nodes_give_every_worker_node_0_and_the_master_port(tmp_path):
    script = _script(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        procs = [
            _start(n, i, a, tmp_path / f"l{i}", script, tmp_path) for i, n in enumerate((a, b))
        ]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    expected = [a.addr, str(NETNS_PORT), f"{a.addr}:{NETNS_PORT}"]
    assert _seen(tmp_path, 4) == [expected] * 4
    assert f"rendezvous with 2 nodes at {a.addr}:{NETNS_PORT + 1}" in outs[1], outs[1]


@pytest.mark.netns
@pytest.mark.xdist_group("master_port")
@pytest.mark.timeout(90)
def test_a_master_port_taken_on_node_0_exits_2_naming_it_and_no_worker_starts(tmp_path):
    script = _script(tmp_path)
    hold = "import socket,sys,time; s=socket.socket(); s.bind(('', int(sys.argv[1]))); "
    hold += "s.listen(); print('ready', flush=True); time.sleep(120)"
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        busy = a.popen([sys.executable, "-c", hold, str(NETNS_PORT)], stdout=subprocess.PIPE)
        assert busy.stdout is not None and busy.stdout.readline() == b"ready\n"
        procs = [
            _start(n, i, a, tmp_path / f"l{i}", script, tmp_path, timeout=8)
            for i, n in enumerate((a, b))
        ]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
        busy.kill()
        busy.wait()
    assert procs[0].returncode == 2, outs
    assert f"--master_port {NETNS_PORT}: port {NETNS_PORT} on {a.addr} is in use" in outs[0]
    # node 1 is told why (node 0 claims the port before anyone waits for it), at once
    assert procs[1].returncode == 2, outs
    assert "could not start: --master_port" in outs[1] and "(node 0, " in outs[1], outs
    assert not list(tmp_path.glob("master.*.json"))


@pytest.mark.netns
@pytest.mark.xdist_group("master_port")
@pytest.mark.timeout(90)
def test_the_identical_command_on_every_node_keeps_master_for_the_launchers(tmp_path):
    script = _script(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        argv = [*LAUNCH, "--master", f"{a.addr}:{NETNS_PORT + 5}", "--nnodes", "2"]
        argv += ["--master_port", str(NETNS_PORT), "--nproc_per_node", "2", "--rdzv_timeout"]
        argv += ["30"]
        procs = [
            n.popen(
                [*argv, "--log_dir", str(tmp_path / f"l{i}"), str(script), str(tmp_path)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=_clean_env(),
            )
            for i, n in enumerate((b, a))  # node 1 first: ranks come from the rendezvous
        ]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    expected = [a.addr, str(NETNS_PORT), f"{a.addr}:{NETNS_PORT}"]
    assert _seen(tmp_path, 4) == [expected] * 4
    assert f"rendezvous with 2 nodes at {a.addr}:{NETNS_PORT + 5}" in outs[0], outs[0]


@pytest.mark.netns
@pytest.mark.xdist_group("master_port")
@pytest.mark.timeout(90)
def test_the_port_after_master_port_taken_on_node_0_ends_both_nodes_with_2_naming_it(tmp_path):
    """torchrun's --master_port P: the launchers meet at P+1, a port the user never typed.
    Another program holding it on node 0 (node 1 then reaches that program, not a store)
    is named after --master_port, and node 1 is told through node 0's spare address (the
    workers' port P) instead of waiting out --rdzv_timeout for a store that never opens."""
    script = _script(tmp_path)
    hold = "import socket,sys,time; s=socket.socket(); s.bind(('', int(sys.argv[1]))); "
    hold += "s.listen(); print('ready', flush=True); time.sleep(120)"
    launchers = NETNS_PORT + 1
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        busy = a.popen([sys.executable, "-c", hold, str(launchers)], stdout=subprocess.PIPE)
        try:
            assert busy.stdout is not None and busy.stdout.readline() == b"ready\n"
            procs = [
                _start(n, i, a, tmp_path / f"l{i}", script, tmp_path, timeout=40)
                for i, n in enumerate((a, b))
            ]
            outs = [p.communicate(timeout=80)[0].decode() for p in procs]
        finally:
            busy.kill()
            busy.wait()
    line = (
        f"--master_port: {NETNS_PORT} is the workers' MASTER_PORT, and the launchers meet at "
        f"the port after it: node 0 cannot host the launchers' store at {a.addr}:{launchers} "
        "(Address already in use); pick a --master_port whose next port is free too, or give "
        f"the launchers a port of their own with --master {a.addr}:PORT"
    )
    assert procs[0].returncode == 2, outs
    assert f"paddlike.launch: error: {line}" in outs[0], outs[0]
    # node 1 is told, naming node 0 and its line, not "never opened the launchers' store"
    assert procs[1].returncode == 2, outs
    assert f"(node 0, {a.addr}) could not start: {line}" in outs[1], outs[1]
    assert "never opened" not in outs[1], outs[1]
    assert not list(tmp_path.glob("master.*.json"))
