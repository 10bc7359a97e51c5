"""One command on a login node (none of the hosts) starts the job on three hosts over
real OpenSSH: every rank runs once, each host's console comes back with its name, the
job's exit code is the command's, and Ctrl-C or one worker's failure leaves nothing
running on any machine."""

from __future__ import annotations

import os
import signal

import pytest

from tests.e2e.cluster.common import endpoints_logs, site, worker_ranks

pytestmark = pytest.mark.timeout(180)


def test_a_three_host_job_from_a_login_node_runs_every_rank_and_names_each_hosts_lines(
    tmp_path,
) -> None:
    with site(tmp_path) as s:
        hostfile = s.hostfile("# three hosts\nh0 slots=2\nh1 slots=2\nh2 slots=2  # last\n")
        done = s.run(s.argv(hostfile))
        assert done.returncode == 0, done.stdout + done.stderr
        assert worker_ranks(s.tmp / "log") == [0, 1, 2, 3, 4, 5]
        logs = endpoints_logs(s.tmp / "log")
        assert len(logs) == 3 and len(set(logs)) == 1  # one world, the same on every host
        for host, rank in (("h0", 0), ("h1", 2), ("h2", 4)):
            assert f"[{host}] RANK {rank} " in done.stdout
            assert f"[{host}] OK: 2 workers finished" in done.stderr
        unprefixed = [
            line
            for line in (done.stdout + done.stderr).splitlines()
            if not line.startswith(("[h0] ", "[h1] ", "[h2] "))
        ]
        assert unprefixed == []
        assert s.leftovers() == {}


def test_a_worker_failing_on_one_host_ends_the_job_everywhere_with_its_exit_code(
    tmp_path,
) -> None:
    with site(tmp_path) as s:
        hostfile = s.hostfile("h0 slots=2\nh1 slots=2\nh2 slots=2\n")
        argv = s.argv(hostfile, script_args=["--fail", "3", "--code", "7", "--sleep", "60"])
        done = s.run(argv)
        assert done.returncode == 7, done.stdout + done.stderr
        assert "[h1] FAILED: trainer rank 3 exited with code 7" in done.stderr
        assert s.leftovers() == {}


def test_ctrl_c_on_the_login_node_ends_the_job_on_every_host_and_leaves_nothing(
    tmp_path,
) -> None:
    with site(tmp_path) as s:
        hostfile = s.hostfile("h0 slots=2\nh1 slots=2\nh2 slots=2\n")
        proc = s.start(s.argv(hostfile, script_args=["--sleep", "120"]))
        started: set[str] = set()
        assert proc.stdout is not None
        for line in proc.stdout:  # every host's rank-0 worker shows on the console
            if b"] RANK " in line:
                started.add(line.split(b"]")[0].decode())
            if len(started) == 3:
                break
        assert started == {"[h0", "[h1", "[h2"}
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err.decode()
        assert b"SIGINT: ending the job on every host" in err
        # every host names the one cause, the start command's Ctrl-C (a trial: each host
        # blamed another's launcher)
        text = err.decode()
        stopped = [ln for ln in text.splitlines() if ln.startswith("[h") and "STOPPED: " in ln]
        assert stopped, text
        assert all("STOPPED: the cluster start command received SIGINT" in ln for ln in stopped)
        assert "received SIGINT: put down to" not in text, text
        assert s.leftovers() == {}


def test_exclude_and_include_choose_the_hosts_of_the_job(tmp_path) -> None:
    with site(tmp_path) as s:
        hostfile = s.hostfile("h0 slots=2\nh1 slots=2\nh2 slots=2\n")
        done = s.run(s.argv(hostfile, "--exclude", "h1"))
        assert done.returncode == 0, done.stdout + done.stderr
        assert worker_ranks(s.tmp / "log") == [0, 1, 2, 3]
        assert "[h1]" not in done.stdout and "[h2] RANK 2 " in done.stdout
        done = s.run(s.argv(hostfile, "-i", "h2@h1", "--log_dir", str(s.tmp / "log2")))
        assert done.returncode == 0, done.stdout + done.stderr
        assert worker_ranks(s.tmp / "log2") == [0, 1, 2, 3]
        assert "[h0]" not in done.stdout and "[h1] RANK 0 " in done.stdout  # the file's order
        assert s.leftovers() == {}


@pytest.mark.skipif(
    os.path.exists("/proc/driver/nvidia/gpus") or os.path.exists("/dev/nvidiactl"),
    reason="this machine has NVIDIA GPUs",
)
def test_gpu_ids_a_host_lacks_are_named_as_the_include_typed_here(tmp_path) -> None:
    """The host's launcher is given --gpus 0; its refusal names what was typed on the login
    node (a user trial's finding: it said --gpus)."""
    with site(tmp_path, hosts=2) as s:
        hostfile = s.hostfile("h0 slots=2\nh1 slots=2\n")
        done = s.run(s.argv(hostfile, "--include", "h0:0@h1"))
        assert done.returncode == 2, done.stdout + done.stderr
        assert (
            "paddlike.launch: error: --hostfile: host h0: --include h0:0@h1: no NVIDIA GPU found "
            "on this node (/proc/driver/nvidia/gpus is missing), got '0'; to run CPU workers, "
            "name the hosts without GPU ids and give --devices cpu (with a hostfile, each host's "
            "slots become CPU workers); nothing was started"
        ) in done.stderr.splitlines()
        assert worker_ranks(s.tmp / "log") == []
        assert s.leftovers() == {}


def test_hosts_with_different_slots_make_one_node_major_world(tmp_path) -> None:
    with site(tmp_path) as s:
        hostfile = s.hostfile("h0 slots=1\nh1 slots=3\nh2 slots=2\n")
        done = s.run(s.argv(hostfile))
        assert done.returncode == 0, done.stdout + done.stderr
        assert worker_ranks(s.tmp / "log") == [0, 1, 2, 3, 4, 5]
        assert "[h0] RANK 0 " in done.stdout
        assert "[h1] RANK 1 " in done.stdout
        assert "[h2] RANK 4 " in done.stdout
        logs = endpoints_logs(s.tmp / "log")
        assert len(set(logs)) == 1 and logs[0].count("\n") >= 6
        assert s.leftovers() == {}


def test_a_lost_ssh_connection_ends_the_job_on_every_host(tmp_path) -> None:
    with site(tmp_path) as s:
        hostfile = s.hostfile("h0 slots=1\nh1 slots=1\nh2 slots=1\n")
        proc = s.start(s.argv(hostfile, script_args=["--sleep", "120"]))
        assert proc.stdout is not None
        started = 0
        for line in proc.stdout:
            started += b"] RANK " in line
            if started == 3:
                break
        s.cut_ssh(1)
        _, err = proc.communicate(timeout=60)
        # h1's launcher hangs up at once (its stdin closed): the others may hear it from
        # the rendezvous (129) before this side's ssh notices the connection is gone (255)
        assert proc.returncode in (129, 255), err.decode()
        assert (
            b"host h1: the ssh connection failed or was lost" in err
            or b"launcher on 198.18.0.3 received SIGHUP" in err
        )
        assert s.leftovers() == {}
