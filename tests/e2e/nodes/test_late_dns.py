"""Names that resolve late, through the real launcher on namespace nodes: the launchers
start before the nodes' names exist (as Kubernetes pods do before their headless
service's records), wait showing which names are missing, and start the job once the
names are written into the nodes' hosts files; a name that never comes is named at the
deadline with the exit code of a rendezvous timeout (1).

The hosts files are rewritten in place (`Cluster.write_hosts`): `ip netns exec` has them
mounted over /etc/hosts, and glibc reads that file again at each lookup.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.multinode_common import LAUNCH, ranks_and_endpoints, write_worker
from tests.support.netns import LOCALHOST, netns_cluster

REPO = Path(__file__).resolve().parents[3]
WAITING = "waiting for names to resolve, still missing: --ips:"


def _read_until(proc: subprocess.Popen[bytes], text: str, timeout: float) -> str:
    """The launcher's output up to and including the first line holding `text`; an
    AssertionError with what it printed when the line does not come within `timeout`."""
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, left))
        chunk = os.read(proc.stdout.fileno(), 4096) if ready else b""
        if not chunk:
            raise AssertionError(f"no {text!r} within {timeout} s; printed:\n{seen.decode()}")
        seen += chunk
    return seen.decode()


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_launchers_started_before_the_names_exist_wait_and_run_the_job(tmp_path: Path) -> None:
    worker = write_worker(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with netns_cluster(2, hostnames=["late-a", "late-b"], hosts=LOCALHOST) as cluster:
        procs = [
            node.popen(
                [
                    *LAUNCH,
                    "--ips",
                    "late-a,late-b",
                    "--nproc_per_node",
                    "2",
                    "--log_dir",
                    str(tmp_path / f"log{i}"),
                    str(worker),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
            )
            for i, node in enumerate(cluster.nodes)
        ]
        before = [_read_until(p, WAITING, 30) for p in procs]
        for text in before:
            assert f"{WAITING} 'late-a', 'late-b'" in text, text
        cluster.write_hosts()  # the names appear, as a headless service's records do
        outputs = [
            b + p.communicate(timeout=90)[0].decode() for b, p in zip(before, procs, strict=True)
        ]
    context = "\n".join(outputs)
    assert [p.returncode for p in procs] == [0, 0], context
    a, b = cluster.nodes
    expected = ",".join(f"{n.addr}:" for n in (a, a, b, b))
    got = ranks_and_endpoints(tmp_path / "log0") + ranks_and_endpoints(tmp_path / "log1")
    assert sorted(r for r, _ in got) == [0, 1, 2, 3], context
    for _, eps in got:
        assert [e.rpartition(":")[0] + ":" for e in eps.split(",")] == expected.split(","), eps


@pytest.mark.netns
@pytest.mark.timeout(60)
def test_a_name_that_never_resolves_is_named_at_the_deadline(tmp_path: Path) -> None:
    worker = write_worker(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with netns_cluster(1, hostnames=["late-a"]) as cluster:
        (node,) = cluster.nodes
        started = time.monotonic()
        done = node.run(
            [
                *LAUNCH,
                "--ips",
                "late-a,never-b",
                "--rdzv_timeout",
                "2",
                "--log_dir",
                str(tmp_path / "log"),
                str(worker),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=40,
        )
        took = time.monotonic() - started
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 1, done.stdout + done.stderr
    assert errors == [
        "paddlike.launch: error: --ips: 'never-b' still does not resolve after 2 s "
        "(--rdzv_timeout): " + errors[0].rpartition("(--rdzv_timeout): ")[2]
    ], done.stderr
    assert "waiting for names to resolve, still missing: --ips: 'never-b'" in done.stderr
    assert took < 30, took
    assert not list((tmp_path / "log").glob("workerlog.*"))  # nothing started


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_a_node_whose_own_name_does_not_resolve_runs_by_its_pod_ip(tmp_path: Path) -> None:
    # each node's hosts file names only the other node (a pod whose own record is not
    # published yet); POD_IP says which address is this node's
    worker = write_worker(tmp_path)
    with netns_cluster(2, hostnames=["late-a", "late-b"], hosts=LOCALHOST) as cluster:
        a, b = cluster.nodes
        a.hosts_path.write_text(f"{LOCALHOST}{b.addr} {b.hostname}\n")
        b.hosts_path.write_text(f"{LOCALHOST}{a.addr} {a.hostname}\n")
        procs = [
            node.popen(
                [*LAUNCH, "--ips", "late-a,late-b", "--nproc_per_node", "2",
                 "--log_dir", str(tmp_path / f"log{i}"), str(worker)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(REPO), "POD_IP": node.addr},
            )
            for i, node in enumerate(cluster.nodes)
        ]  # fmt: skip
        outputs = [p.communicate(timeout=90)[0].decode() for p in procs]
    context = "\n".join(outputs)
    assert [p.returncode for p in procs] == [0, 0], context
    got = ranks_and_endpoints(tmp_path / "log0") + ranks_and_endpoints(tmp_path / "log1")
    assert sorted(r for r, _ in got) == [0, 1, 2, 3], context
    assert len({eps for _, eps in got}) == 1, got  # every node derived the same list
