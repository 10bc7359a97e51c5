"""A node whose launcher cannot start (a missing script there, its log directory held by
another launcher) tells the launchers' store why, and every other node stops within
seconds naming it, instead of waiting out --rdzv_timeout for a node that "never joined"."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from paddlike.launch.peers.start_verdict import failure_message
from tests.launch.peers.test_etcd import ETCD, etcd  # noqa: F401  (the fixture: an etcd server on loopback)
from tests.support.fixed_ports import fixed_ports
from tests.support.multinode_common import LAUNCH, start_launcher, write_worker
from tests.support.netns import Node, netns_cluster

IPS = "nodea,nodeb"
SLOW = ["--rdzv_timeout", "60"]  # far beyond what any of these tests may take


def _wait_both(first: subprocess.Popen[bytes], other: subprocess.Popen[bytes]) -> float:
    """`first`'s exit, then `other`'s: the seconds between the two."""
    first.wait(timeout=30)
    ended = time.monotonic()
    other.wait(timeout=30)
    return time.monotonic() - ended


def _output(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stdout is not None
    return proc.stdout.read().decode()


def _await_line(proc: subprocess.Popen[bytes], text: str) -> str:
    """Lines up to the first containing `text`."""
    assert proc.stdout is not None
    seen = ""
    for raw in proc.stdout:
        seen += raw.decode()
        if text in seen:
            return seen
    raise AssertionError(f"{text!r} never printed; output: {seen}")


@pytest.mark.netns
def test_a_missing_script_on_node_1_ends_node_0_within_5_s_naming_it(tmp_path: Path) -> None:
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        pa = start_launcher(a, IPS, tmp_path / "la", script, options=SLOW)
        pb = start_launcher(b, IPS, tmp_path / "lb", tmp_path / "missing.py", options=SLOW)
        gap = _wait_both(pb, pa)
        out_a, out_b = _output(pa), _output(pb)
    assert (pa.returncode, pb.returncode) == (2, 2), (out_a, out_b)
    assert gap < 5, (gap, out_a)
    assert "'" + str(tmp_path / "missing.py") + "' not found" in out_b, out_b
    assert out_b.count("\n") == 1, out_b  # its own one line, nothing more
    assert f"could not start: training_script: '{tmp_path / 'missing.py'}' not found" in out_a
    assert f"node 1, {b.addr}" in out_a, out_a
    assert "never joined" not in out_a and "timed out" not in out_a, out_a
    assert not list((tmp_path / "la").glob("workerlog.*"))


@pytest.mark.netns
def test_node_1s_log_dir_held_by_another_job_ends_node_0_within_5_s_naming_it(
    tmp_path: Path,
) -> None:
    """(Nodes of one job that share a directory both run: test_many_nodes_shared_log_dir.)"""
    script = write_worker(tmp_path)
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\nprint('holding', flush=True)\ntime.sleep(60)\n")
    busy = tmp_path / "busy"
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        # another launcher (a one-node job) holds node b's log directory
        holder = b.popen(
            [*LAUNCH, "--log_dir", str(busy), "--tee", "0", str(sleeper)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        _await_line(holder, "holding")
        pa = start_launcher(a, IPS, tmp_path / "la", script, options=SLOW)
        pb = start_launcher(b, IPS, busy, script, options=SLOW)
        gap = _wait_both(pb, pa)
        out_a, out_b = _output(pa), _output(pb)
        holder.kill()
    assert (pa.returncode, pb.returncode) == (2, 2), (out_a, out_b)
    assert gap < 5, (gap, out_a)
    assert f"log directory {busy} is in use by launcher pid {holder.pid}" in out_b, out_b
    assert "for another job" in out_b, out_b
    assert f"node 1, {b.addr}) could not start: --log_dir: log directory {busy} is in use" in (
        out_a
    ), out_a


@pytest.mark.netns
def test_a_missing_script_on_node_0_ends_node_1_waiting_for_its_store(tmp_path: Path) -> None:
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes
        pb = start_launcher(b, IPS, tmp_path / "lb", script, options=SLOW)
        seen = _await_line(pb, "to host the launchers' store")  # node 0 not up yet
        started = time.monotonic()
        pa = start_launcher(a, IPS, tmp_path / "la", tmp_path / "missing.py", options=SLOW)
        pb.wait(timeout=30)
        took = time.monotonic() - started
        pa.wait(timeout=30)
        out_a, out_b = _output(pa), seen + _output(pb)
    assert (pa.returncode, pb.returncode) == (2, 2), (out_a, out_b)
    assert took < 5, (took, out_b)
    assert f"node 0, {a.addr}) could not start: training_script:" in out_b, out_b
    assert "not found" in out_b
    assert out_a.count("\n") == 1, out_a


def _loopback_pair(
    tmp_path: Path, master: str, *options: str
) -> Callable[[int, Path], subprocess.Popen[bytes]]:
    """launcher(rank, script): node `rank` of 127.0.0.1,127.0.0.2, meeting at `master`."""

    def launcher(rank: int, path: Path) -> subprocess.Popen[bytes]:
        cmd = [*LAUNCH, "--ips", "127.0.0.1,127.0.0.2", "--node_rank", str(rank)]
        cmd += ["--master", master, *options, *SLOW, "--log_dir", str(tmp_path / f"l{rank}")]
        return subprocess.Popen([*cmd, str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    return launcher


def _node_1_misses_its_script(
    tmp_path: Path, launcher: Callable[[int, Path], subprocess.Popen[bytes]]
) -> str:
    """Node 0 with a script, node 1 with a missing one: both exit 2 within 5 s of each
    other, node 0 naming node 1's error. Node 0's output."""
    script = tmp_path / "ok.py"
    script.write_text("print('ran')\n")
    procs = [launcher(0, script), launcher(1, tmp_path / "nope.py")]
    try:
        gap = _wait_both(procs[1], procs[0])
        out0 = _output(procs[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [2, 2], out0
    assert gap < 5, (gap, out0)
    assert "(node 1, 127.0.0.2) could not start: training_script:" in out0, out0
    return out0


def test_a_missing_script_on_loopback_node_1_ends_node_0_at_once(tmp_path: Path) -> None:
    """The same on one machine (nodes 127.0.0.1 and 127.0.0.2, --node_rank each)."""
    launcher = _loopback_pair(tmp_path, f"127.0.0.1:{fixed_ports()}")
    out0 = _node_1_misses_its_script(tmp_path, launcher)
    assert "nope.py' not found" in out0


def test_the_message_names_the_host_the_node_and_its_own_error() -> None:
    message = failure_message("x: boom", address="10.0.0.2", hostname="b7", node_index=1)
    assert message == (
        "rendezvous: the launcher on b7 (node 1, 10.0.0.2) could not start: x: boom; fix "
        "that there, then start the launcher on every node again"
    )
    assert "on 10.0.0.2 could" in failure_message(
        "x", address="10.0.0.2", hostname="10.0.0.2", node_index=None
    )


@pytest.mark.skipif(ETCD is None, reason="etcd is not installed (Debian: etcd-server)")
def test_a_missing_script_on_node_1_ends_node_0_through_etcd(
    tmp_path: Path,
    etcd: tuple[str, int],  # noqa: F811  (the fixture imported above)
) -> None:
    launcher = _loopback_pair(tmp_path, f"etcd://{etcd[0]}:{etcd[1]}", "--job_id", "startfail")
    _node_1_misses_its_script(tmp_path, launcher)
    script = tmp_path / "ok.py"
    # the verdict went with its lease: the same job id starts cleanly afterwards
    again = [launcher(0, script), launcher(1, script)]
    outs = [p.communicate(timeout=60)[0].decode() for p in again]
    assert [p.returncode for p in again] == [0, 0], outs


def test_a_node_that_never_contacted_the_store_is_named_as_such_at_the_timeout(
    tmp_path: Path,
) -> None:
    script = tmp_path / "ok.py"
    script.write_text("print('ran')\n")
    cmd = [*LAUNCH, "--ips", "127.0.0.1,127.0.0.2", "--node_rank", "0", "--rdzv_timeout", "1"]
    cmd += ["--master", f"127.0.0.1:{fixed_ports()}", "--log_dir", str(tmp_path / "l0")]
    cmd += [str(script)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert (
        "node 1 (127.0.0.2) never joined: no launcher there contacted the store" in done.stderr
    ), done.stderr


@pytest.mark.netns
def test_with_the_identical_command_a_missing_script_on_one_node_ends_the_other(
    tmp_path: Path,
) -> None:
    script = write_worker(tmp_path)
    with netns_cluster(2, ["nodea", "nodeb"]) as cluster:
        a, b = cluster.nodes

        def start(node: Node, log_dir: Path, path: Path) -> subprocess.Popen[bytes]:
            argv = [*LAUNCH, "--master", f"{a.addr}:7413", "--nnodes", "2", *SLOW]
            return node.popen(
                [*argv, "--log_dir", str(log_dir), str(path)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )

        pa = start(a, tmp_path / "la", script)
        pb = start(b, tmp_path / "lb", tmp_path / "missing.py")
        gap = _wait_both(pb, pa)
        out_a = _output(pa)
    assert (pa.returncode, pb.returncode) == (2, 2), out_a
    assert gap < 5, (gap, out_a)
    assert f"({b.addr}) could not start: training_script:" in out_a, out_a
