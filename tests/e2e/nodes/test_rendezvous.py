"""Many nodes (network namespaces): ranks, endpoints and logs agree; disagreement and
absence are reported by name."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

import pytest

from tests.support.multinode_common import ranks_and_endpoints, start_launcher, write_worker
from tests.support.netns import netns_cluster

pytestmark = pytest.mark.netns


@pytest.mark.parametrize("n", [2, 4])
def test_every_node_gets_its_ranks_and_the_same_endpoints(tmp_path: Path, n: int) -> None:
    script = write_worker(tmp_path)
    names = [f"node{chr(97 + i)}" for i in range(n)]
    with netns_cluster(n, names) as cluster:
        ips = ",".join(names)
        procs = [
            start_launcher(node, ips, tmp_path / f"log{i}", script)
            for i, node in enumerate(cluster.nodes)
        ]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
        codes = [p.returncode for p in procs]
    assert codes == [0] * n, outs
    # e.g. node 0's store closing early; node 0's one expected warning: no job token
    unexpected = [
        line
        for out in outs
        for line in out.splitlines()
        if "warning" in line and "has no job token" not in line
    ]
    assert not unexpected, outs
    assert sum("has no job token" in out for out in outs) == 1, outs
    endpoint_files = {(tmp_path / f"log{i}" / "endpoints.log").read_text() for i in range(n)}
    assert len(endpoint_files) == 1
    lines = endpoint_files.pop().splitlines()
    assert lines[0] == "PADDLE_TRAINER_ENDPOINTS: "
    eps = lines[1:]
    assert len(eps) == 2 * n == len(set(eps))
    assert [e.split(":")[0] for e in eps] == [a for node in cluster.nodes for a in [node.addr] * 2]
    for i in range(n):
        ranks = ranks_and_endpoints(tmp_path / f"log{i}")
        assert sorted(r for r, _ in ranks) == [2 * i, 2 * i + 1]
        assert {e for _, e in ranks} == {",".join(eps)}
    summaries = [json.loads((tmp_path / f"log{i}" / "summary.json").read_text()) for i in range(n)]
    assert {s["job_id"] for s in summaries} == {summaries[0]["job_id"]}


@pytest.mark.parametrize(
    ("only_b", "field", "theirs", "ours"),
    [
        (["--max_restarts", "1"], "--max_restarts", "'1'", "'0'"),
        (["--straggler_check", "3"], "--straggler_check", "'3'", "'60'"),
        (["--straggler_threshold", "0.5"], "--straggler_threshold", "'0.5'", "'0.1'"),
    ],
)
def test_round_settings_given_to_one_node_only_make_both_exit_2_naming_them(
    tmp_path: Path, only_b: list[str], field: str, theirs: str, ours: str
) -> None:
    """A node with other restarts would restart alone and wait for nodes that ended; a
    straggler check one node runs compares nothing: both refused before anything runs."""
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        pa = start_launcher(a, "nodea,nodeb", tmp_path / "la", script)
        pb = start_launcher(b, "nodea,nodeb", tmp_path / "lb", script, options=only_b)
        out_a = pa.communicate(timeout=60)[0].decode()
        out_b = pb.communicate(timeout=60)[0].decode()
    assert (pa.returncode, pb.returncode) == (2, 2), (out_a, out_b)
    for out in (out_a, out_b):
        assert f"disagrees on {field}: it has {theirs}, node 0 (" in out, out
        assert f") has {ours}; run the same command on every node" in out, out
    assert not list(tmp_path.glob("l?/workerlog.*"))  # no worker started anywhere


@pytest.mark.parametrize("meet", ["at node a's store (--master)", "each at its own store"])
def test_a_different_ips_order_on_one_node_makes_both_exit_2_naming_it(
    tmp_path: Path, meet: str
) -> None:
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        # node b lists the nodes the other way round and so believes it is node 0. With
        # --master both meet at node a's store, where two claims to node 0 show; without,
        # each hosts a store of its own, and each finds the other's while waiting for it.
        master = ["--master", f"{a.addr}:6170"] if "--master" in meet else []
        pa = start_launcher(a, "nodea,nodeb", tmp_path / "la", script, options=master)
        pb = start_launcher(b, "nodeb,nodea", tmp_path / "lb", script, options=master)
        out_a = pa.communicate(timeout=60)[0].decode()
        out_b = pb.communicate(timeout=60)[0].decode()
    assert (pa.returncode, pb.returncode) == (2, 2), (out_a, out_b)
    for out in (out_a, out_b):
        assert "disagrees on ips" in out or "two launchers claim node index 0" in out, out
        assert "run the same command on every node" in out or "check --ips" in out, out
    if not master:
        assert "198.18.0.2,198.18.0.1" in out_a and "198.18.0.2,198.18.0.1" in out_b
    assert not list((tmp_path / "la").glob("workerlog.*"))
    assert not list((tmp_path / "lb").glob("workerlog.*"))


def test_a_node_that_never_starts_is_named_when_the_rendezvous_times_out(tmp_path: Path) -> None:
    script = write_worker(tmp_path)
    with netns_cluster(3, ["nodea", "nodeb", "nodec"]) as cluster:
        a, b, _ = cluster.nodes
        opts = ["--rdzv_timeout", "2"]
        procs = [
            start_launcher(n, "nodea,nodeb,nodec", tmp_path / f"l{i}", script, options=opts)
            for i, n in enumerate((a, b))
        ]
        outs = [p.communicate(timeout=60)[0].decode() for p in procs]
        codes = [p.returncode for p in procs]
    assert all(c not in (0, None) for c in codes), outs
    for out in outs:
        assert "node 2 (198.18.0.3) never joined" in out, out
        assert "--rdzv_timeout" in out


def test_launchers_started_seconds_apart_still_meet(tmp_path: Path) -> None:
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        pb = start_launcher(b, "nodea,nodeb", tmp_path / "lb", script)  # node 0 not up yet
        with contextlib.suppress(subprocess.TimeoutExpired):
            pb.wait(timeout=1.5)
        pa = start_launcher(a, "nodea,nodeb", tmp_path / "la", script)
        outs = [p.communicate(timeout=60)[0].decode() for p in (pa, pb)]
    assert (pa.returncode, pb.returncode) == (0, 0), "\n".join(outs)
