"""The identical command on every node: ``--master A:P --nnodes N`` and no --ips or
--node_rank. The rendezvous assigns the node ranks: the node hosting the launchers' store
(the --master address) is node 0, the others follow in the order of the address each
joined from, ties by arrival; a launcher arriving at a complete job is refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from paddlike.launch.plan.agreement import assign_ranks
from paddlike.launch.plan.world import NodeEntry
from tests.support.fixed_ports import fixed_ports
from tests.support.multinode_common import LAUNCH, ranks_and_endpoints, write_worker
from tests.support.netns import Node, netns_cluster

PORT = 7411


def _command(
    master: str, nnodes: int, log_dir: Path, script: Path, *args: str, options: tuple = ()
) -> list[str]:
    """The same on every node but for the log directory (a shared one is another matter)."""
    argv = [*LAUNCH, "--master", master, "--nnodes", str(nnodes), "--nproc_per_node", "2"]
    argv += ["--rdzv_timeout", "30", *options]
    return [*argv, "--log_dir", str(log_dir), str(script), *args]


def _start(node: Node, argv: list[str]) -> subprocess.Popen[bytes]:
    return node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.netns
@pytest.mark.parametrize("n", [2, 4])
def test_the_identical_command_on_every_node_ranks_them_by_address(tmp_path: Path, n: int) -> None:
    script = write_worker(tmp_path)
    with netns_cluster(n) as cluster:
        master = f"{cluster.nodes[0].addr}:{PORT}"
        # started last address first, so that arrival order is not what decides
        procs = {
            i: _start(node, _command(master, n, tmp_path / f"l{i}", script))
            for i, node in reversed(list(enumerate(cluster.nodes)))
        }
        outs = {i: p.communicate(timeout=60)[0].decode() for i, p in procs.items()}
    assert [procs[i].returncode for i in range(n)] == [0] * n, outs
    files = {(tmp_path / f"l{i}" / "endpoints.log").read_text() for i in range(n)}
    assert len(files) == 1, files
    eps = files.pop().splitlines()[1:]
    assert [e.split(":")[0] for e in eps] == [node.addr for node in cluster.nodes for _ in "ab"]
    for i in range(n):
        seen = ranks_and_endpoints(tmp_path / f"l{i}")
        assert sorted(r for r, _ in seen) == [2 * i, 2 * i + 1], outs[i]
        assert {e for _, e in seen} == {",".join(eps)}
        addr = cluster.nodes[i].addr
        assert f"node {i} of {n} ({addr} on eth0: rank assigned at the rendezvous" in outs[i]


@pytest.mark.netns
def test_a_third_node_at_a_complete_two_node_job_is_refused(tmp_path: Path) -> None:
    script = write_worker(tmp_path)
    with netns_cluster(3) as cluster:
        a, b, c = cluster.nodes
        master = f"{a.addr}:{PORT}"
        args = ("--sleep", "2")
        pa = _start(a, _command(master, 2, tmp_path / "la", script, *args))
        pb = _start(b, _command(master, 2, tmp_path / "lb", script, *args))
        assert pa.stdout is not None
        seen = ""
        for raw in pa.stdout:  # the job is complete once node 0 says how long it took
            seen += raw.decode()
            if "rendezvous with 2 nodes" in seen:
                break
        pc = _start(c, _command(master, 2, tmp_path / "lc", script, *args))
        out_c = pc.communicate(timeout=30)[0].decode()
        out_a = seen + pa.communicate(timeout=60)[0].decode()
        out_b = pb.communicate(timeout=60)[0].decode()
    assert pc.returncode == 2, out_c
    assert "was refused at the store" in out_c and "the job there is complete already" in out_c
    assert c.addr in out_c, out_c
    assert not list((tmp_path / "lc").glob("workerlog.*"))
    assert (pa.returncode, pb.returncode) == (0, 0), (out_a, out_b)  # the job went on


def test_two_launchers_on_one_machine_with_the_identical_command_get_ranks_0_and_1(
    tmp_path: Path,
) -> None:
    port = fixed_ports()
    script = write_worker(tmp_path)
    master = f"127.0.0.1:{port}"
    procs = [
        subprocess.Popen(
            _command(master, 2, tmp_path / f"l{i}", script),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for i in range(2)
    ]
    try:
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], outs
    ranks = sorted(r for i in range(2) for r, _ in ranks_and_endpoints(tmp_path / f"l{i}"))
    assert ranks == [0, 1, 2, 3]
    files = {(tmp_path / f"l{i}" / "endpoints.log").read_text() for i in range(2)}
    assert len(files) == 1


def _entry(host: str, index: int = -1) -> NodeEntry:
    return NodeEntry(index, host, "", 100, (), {})


@pytest.mark.parametrize(
    ("arrivals", "order"),
    [
        # the store's host (asks for 0) first, then by address, whatever the arrival order
        ([("10.0.0.3", -1), ("10.0.0.1", 0), ("10.0.0.2", -1)], [2, 3, 1]),
        # numeric, not text order: 10.0.0.9 before 10.0.0.10
        ([("10.0.0.10", -1), ("10.0.0.9", -1), ("10.0.0.1", 0)], [3, 2, 1]),
        # one address for several nodes (one machine): ties by arrival
        ([("127.0.0.1", -1), ("127.0.0.1", 0), ("127.0.0.1", -1)], [2, 1, 3]),
        # --node_rank honoured; the others fill the free ranks by address
        ([("10.0.0.5", 2), ("10.0.0.4", -1), ("10.0.0.1", 0)], [3, 2, 1]),
        ([("10.0.0.5", 1), ("10.0.0.4", -1), ("10.0.0.1", 0), ("10.0.0.2", -1)], [3, 1, 4, 2]),
    ],
)
def test_ranks_follow_the_store_host_then_the_address_then_the_arrival(
    arrivals: list[tuple[str, int]], order: list[int]
) -> None:
    entries = [(t, _entry(h, i)) for t, (h, i) in enumerate(arrivals, start=1)]
    assert assign_ranks(entries, len(entries)) == order


def test_two_nodes_asking_for_one_rank_are_named_both() -> None:
    got = assign_ranks([(1, _entry("10.0.0.1", 0)), (2, _entry("10.0.0.2", 0))], 2)
    assert isinstance(got, str)
    assert "two launchers claim node index 0" in got
    assert "10.0.0.1" in got and "10.0.0.2" in got


def test_a_rank_out_of_range_is_named() -> None:
    got = assign_ranks([(1, _entry("10.0.0.1", 0)), (2, _entry("10.0.0.2", 5))], 2)
    assert got == (
        "rendezvous: 10.0.0.2 (pid 100) asks for node rank 5, out of range for --nnodes 2; "
        "give --node_rank 0..1 or none"
    )


@pytest.mark.netns
def test_the_ranks_assigned_in_round_0_hold_in_a_restart(tmp_path: Path) -> None:
    script = write_worker(tmp_path)
    with netns_cluster(2) as cluster:
        a, b = cluster.nodes
        master = f"{a.addr}:{PORT}"
        fail = ("--fail", "2", "--fail_rounds", "1")  # global rank 2 (node 1) fails in round 0
        restart = ("--max_restarts", "1")
        procs = [
            _start(n, _command(master, 2, tmp_path / f"l{i}", script, *fail, options=restart))
            for i, n in ((1, b), (0, a))
        ]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    for i in range(2):
        rounds = {}
        for log in (tmp_path / f"l{i}").glob("workerlog.*"):
            for line in log.read_text().splitlines():
                if line.startswith("RANK "):
                    _, rank, _, round_ = line.split()
                    rounds.setdefault(int(round_), set()).add(int(rank))
        assert rounds == {0: {2 * i, 2 * i + 1}, 1: {2 * i, 2 * i + 1}}, outs
