"""Port reservation: launchers starting at the same moment never get the same port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paddlike.launch.context.node import PsNode
from paddlike.launch.context.options import UsageError, parse_options
from paddlike.launch.plan.layout import (
    PortRequest,
    collective_layout,
    port_request,
    ps_counts_layout,
    ps_lists_layout,
    start_port_ports,
    workers_port_overlap,
)
from paddlike.launch.plan.world import NodeEntry, RendezvousResult
from paddlike.launch.run.ports import _process_start_time, free_ports, reserve_ports

RESERVE = """
import json, sys
from pathlib import Path
from paddlike.launch.run.ports import reserve_ports
sys.stdin.readline()  # start together
print(json.dumps(reserve_ports(int(sys.argv[2]), registry_dir=Path(sys.argv[1]))), flush=True)
sys.stdin.readline()  # hold the reservation until told to exit
"""


def test_reserved_ports_are_distinct_and_bindable(tmp_path):
    ports = reserve_ports(5, registry_dir=tmp_path)
    assert len(set(ports)) == 5
    for port in ports:
        with socket.socket() as s:
            s.bind(("", port))
    assert sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()) == sorted(ports)


def test_many_concurrent_reservations_get_disjoint_ports(tmp_path):
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RESERVE, str(tmp_path), "8"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    try:
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        got = [json.loads(p.stdout.readline()) for p in procs]
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=30)
    everything = [port for ports in got for port in ports]
    assert len(everything) == 48
    assert len(set(everything)) == 48


def test_a_live_owners_ports_are_skipped(tmp_path):
    mine = set(reserve_ports(3, registry_dir=tmp_path))
    again = set(reserve_ports(50, registry_dir=tmp_path))
    assert not mine & again


def test_entries_of_dead_owners_and_expired_entries_are_cleared(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    (tmp_path / "50001").write_text(f"{dead.stdout.strip()} 123 {time.time()}\n")
    started = _process_start_time(os.getpid())
    (tmp_path / "50002").write_text(f"{os.getpid()} {started} {time.time() - 3600}\n")
    (tmp_path / "50003").write_text("garbage")
    reserve_ports(1, registry_dir=tmp_path)
    left = {p.name for p in tmp_path.iterdir() if p.name.isdigit()}
    assert not left & {"50001", "50002", "50003"}


def test_two_launchers_at_once_get_disjoint_endpoints(tmp_path):
    script = tmp_path / "dump.py"
    script.write_text(
        "import json, os\n"
        "keys = ['PADDLE_CURRENT_ENDPOINT', 'PADDLE_MASTER']\n"
        "print(json.dumps({k: os.environ[k] for k in keys}))\n"
    )
    launchers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "paddlike.launch",
                "--nproc_per_node",
                "2",
                "--log_dir",
                str(tmp_path / f"log{i}"),
                "--tee",
                "none",
                str(script),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        for p in launchers:
            assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        for p in launchers:
            if p.poll() is None:
                p.kill()
                p.wait()
    ports = []
    for i in range(2):
        for n in range(2):
            text = Path(tmp_path / f"log{i}" / f"workerlog.{n}").read_text()
            env = json.loads(text.splitlines()[-1])
            ports += [env["PADDLE_CURRENT_ENDPOINT"], env["PADDLE_MASTER"]]
    masters = set(ports[1::2])
    assert len(masters) == 2  # one master per launcher
    trainers = ports[0::2]
    assert len(set(trainers)) == 4
    assert not masters & set(trainers)


def _world(hosts: tuple[str, ...], ports: tuple[int, ...]) -> RendezvousResult:
    nodes = tuple(NodeEntry(i, h, "", 0, ports, {}) for i, h in enumerate(hosts))
    return RendezvousResult(0, nodes, "j", 0.0)


def test_many_nodes_dry_run_shows_ports_from_start_port_and_the_master_the_next_one():
    world = _world(("10.0.0.1", "10.0.0.2"), start_port_ports(6070, 2))
    layout = collective_layout(world, 1, 2)
    assert layout.trainer_endpoints() == (
        "10.0.0.1:6070", "10.0.0.1:6071", "10.0.0.2:6070", "10.0.0.2:6071",
    )  # fmt: skip
    assert layout.master == "10.0.0.1:6072"


def test_a_start_port_without_room_for_every_port_is_a_usage_error():
    with pytest.raises(UsageError, match="--start_port: 65534 leaves no room for 3 ports"):
        start_port_ports(65534, 2)


def test_one_node_reserves_distinct_ports_for_trainers_and_the_workers_store(tmp_path):
    ports = reserve_ports(4, registry_dir=tmp_path)
    layout = collective_layout(_world(("127.0.0.1",), ports), 0, 3)
    assert len({*layout.ports[0], layout.master_port}) == 4


def test_ps_workers_without_ports_skip_the_ports_listed_on_their_host():
    options = parse_options(
        ["--servers", "10.0.0.1:6070,10.0.0.2:7000", "--workers", "10.0.0.1,10.0.0.1:6072,10.0.0.1",
         "t.py"], {},
    )  # fmt: skip
    node = PsNode(
        host="10.0.0.1", interface="eth0", reason="",
        servers=(("10.0.0.1", 6070), ("10.0.0.2", 7000)),
        trainers=(("10.0.0.1", None), ("10.0.0.1", 6072), ("10.0.0.1", None)),
    )  # fmt: skip
    layout = ps_lists_layout(node, options.start_port)
    assert layout.trainers == ("10.0.0.1:6071", "10.0.0.1:6072", "10.0.0.1:6073")
    assert (layout.node_index, layout.nnodes) == (0, 2)


def test_ps_counts_put_everything_on_this_node_on_free_ports():
    layout = ps_counts_layout("127.0.0.1", 2, 3, free_ports(6))
    assert len(layout.servers) == 2 and len(layout.trainers) == 3
    assert len(set(layout.servers + layout.trainers)) == 5


@pytest.mark.parametrize(
    ("nnodes", "workers_port", "hosts_it", "start_from", "expected"),
    [
        # many nodes: free ports, traded at the rendezvous; node 0 claims a --master_port
        (2, None, True, None, PortRequest(3)),
        (2, 6170, True, None, PortRequest(2, workers_port=6170)),
        (2, 6170, False, None, PortRequest(3)),
        (2, None, False, "--start_port", PortRequest(3)),  # a start port is one node's
        # one node: it always hosts the workers' store; a given start is used as it is
        (1, 6170, False, None, PortRequest(2, workers_port=6170)),
        (1, None, False, "--start_port", PortRequest(3, 7000, "--start_port", 4)),
        (1, 6170, False, "PADDLE_PORT", PortRequest(2, 7000, "PADDLE_PORT", 4, 6170)),
    ],
)
def test_a_rounds_port_request_as_a_table(nnodes, workers_port, hosts_it, start_from, expected):
    request = port_request(
        reserve=3,
        nnodes=nnodes,
        workers_port=workers_port,
        hosts_workers_store=hosts_it,
        start_port=7000,
        start_port_from=start_from,
        ports_num=4,
    )
    assert request == expected


def test_nothing_to_reserve_asks_for_no_port():
    assert port_request(reserve=0, nnodes=2, workers_port=6170, hosts_workers_store=True) == (
        PortRequest(0)
    )


def test_a_master_port_among_the_trainers_consecutive_ports_is_named_with_its_source():
    request = port_request(
        reserve=3, nnodes=1, workers_port=7001, hosts_workers_store=True, start_port=7000,
        start_port_from="--start_port",
    )  # fmt: skip
    assert workers_port_overlap(request, (7000, 7001)) == (
        "--master_port 7001: also a trainer port from --start_port 7000 (this node needs "
        "ports 7000-7001 for its trainers); give ports that do not overlap"
    )
    assert workers_port_overlap(request, (7002, 7003)) is None
