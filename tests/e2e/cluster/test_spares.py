"""Spares (issue 35): a hostfile of 3 hosts with --num_nodes 2 over real OpenSSH. Every
host's launcher runs the pre-flight check; the job runs on the first 2 healthy hosts: a
throttled host is named with its figure and left out, a healthy third stands by."""

from __future__ import annotations

import json
import signal

import pytest

from paddlike.launch.plan.exitcode import LEFT_OUT
from tests.e2e.cluster.common import site, worker_ranks
from tests.e2e.nodes.test_preflight import throttle

pytestmark = [pytest.mark.netns, pytest.mark.timeout(240)]

HOSTFILE = "h0 slots=1\nh1 slots=1\nh2 slots=1\n"


def _hosts_with_workers(log_dir) -> set[str]:
    """The hosts whose launcher started a worker (each summary.json names its host)."""
    out = set()
    for path in log_dir.rglob("summary.json"):
        summary = json.loads(path.read_text())
        if summary.get("processes"):
            out.add(summary["host"])
    return out


def test_a_throttled_host_is_left_out_and_the_job_runs_on_the_two_healthy_ones(
    tmp_path,
) -> None:
    with site(tmp_path) as s:
        slow = s.hosts[1]
        throttle(slow)
        done = s.run(s.argv(s.hostfile(HOSTFILE), "--num_nodes", "2"), timeout=200)
        out = done.stdout + done.stderr
        assert done.returncode == 0, out
        for host in ("h0", "h1", "h2"):  # every node's console names the slow one
            assert f"[{host}] paddlike.launch: error: pre-flight check: node 1 ({slow.addr}" in out
        assert " MB/s to node " in out and ", median " in out, out
        assert "this host is left out of the job" in out and f"exits {LEFT_OUT}" in out
        assert (
            "pre-flight check: the job runs on h0, h2 (--num_nodes 2); left out by the check: "
            "h1 (exit 69 there" in out
        ), out
        assert "standing by: none" in out, out
        assert worker_ranks(s.tmp / "log") == [0, 1]
        assert "[h0] OK: 1 worker finished" in out and "[h2] OK: 1 worker finished" in out, out
        for host in ("h0", "h2"):  # the chosen hosts' consoles say who runs too
            assert f"[{host}] paddlike.launch: pre-flight check: the job runs on h0, h2" in out
        assert "[h1] OK" not in out, out
        assert s.leftovers() == {}


def test_all_healthy_the_job_runs_on_the_first_two_and_the_third_stands_by(tmp_path) -> None:
    with site(tmp_path) as s:
        done = s.run(s.argv(s.hostfile(HOSTFILE), "--num_nodes", "2"), timeout=200)
        out = done.stdout + done.stderr
        assert done.returncode == 0, out
        assert "[h2] paddlike.launch: pre-flight check: 3 nodes healthy" in out, out
        assert (
            "pre-flight check: the job runs on h0, h1 (--num_nodes 2); left out by the check: "
            "none" in out
        ), out
        assert "standing by: h2 (passed the check, no worker started)" in out, out
        assert worker_ranks(s.tmp / "log") == [0, 1]
        assert "[h2] OK" not in out, out
        assert s.leftovers() == {}


def test_preflight_off_runs_on_the_first_two_hosts_as_deepspeed_does(tmp_path) -> None:
    with site(tmp_path) as s:
        throttle(s.hosts[1])
        done = s.run(
            s.argv(s.hostfile(HOSTFILE), "--num_nodes", "2", "--preflight", "off"), timeout=200
        )
        out = done.stdout + done.stderr
        assert done.returncode == 0, out
        assert "pre-flight" not in out, out
        assert "[h0] OK: 1 worker finished" in out and "[h1] OK: 1 worker finished" in out, out
        assert "[h2]" not in out, out


def test_ctrl_c_during_the_check_of_every_host_starts_nothing_and_leaves_nothing(
    tmp_path,
) -> None:
    with site(tmp_path) as s:
        # full: each link measured 1 s, so the check is still on when the hosts have met
        argv = s.argv(s.hostfile(HOSTFILE), "--num_nodes", "2", "--preflight", "full")
        proc = s.start(argv)
        try:
            assert proc.stderr is not None
            seen = []
            for raw in proc.stderr:  # the shared log directory's line: a host's launcher runs
                seen.append(raw.decode())
                if "paddlike.launch: log directory " in seen[-1]:
                    break
            proc.send_signal(signal.SIGINT)
            rest = proc.communicate(timeout=120)[1].decode()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out = "".join(seen) + rest
        assert proc.returncode == 130, out
        assert "SIGINT: stopped during the pre-flight check" in out, out
        assert "the job runs on" not in out, out
        assert not list((s.tmp / "log").rglob("workerlog.*")), out
        assert s.leftovers() == {}
