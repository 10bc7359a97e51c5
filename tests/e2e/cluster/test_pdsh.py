"""--launcher pdsh: one pdsh starts every host's launcher over ssh; the consoles come back
as ``[host] line`` and the exit code is the job's."""

from __future__ import annotations

import shutil
import signal

import pytest

from tests.e2e.cluster.common import site, worker_ranks

pytestmark = pytest.mark.timeout(150)


@pytest.fixture(autouse=True)
def _needs_pdsh() -> None:
    if shutil.which("pdsh") is None:
        pytest.skip("pdsh is not installed (Debian: pdsh)")


def test_pdsh_starts_every_host_and_passes_the_jobs_exit_code(tmp_path) -> None:
    with site(tmp_path) as s:
        hostfile = s.hostfile("h0 slots=2\nh1 slots=2\nh2 slots=2\n")
        done = s.run(s.argv(hostfile, "--launcher", "pdsh"))
        assert done.returncode == 0, done.stdout + done.stderr
        assert worker_ranks(s.tmp / "log") == [0, 1, 2, 3, 4, 5]
        for host, rank in (("h0", 0), ("h1", 2), ("h2", 4)):
            assert f"[{host}] RANK {rank} " in done.stdout
        argv = s.argv(
            hostfile,
            "--launcher",
            "pdsh",
            "--log_dir",
            str(s.tmp / "log2"),
            script_args=["--fail", "5", "--code", "9", "--sleep", "60"],
        )
        done = s.run(argv)
        assert done.returncode == 9, done.stdout + done.stderr
        assert s.leftovers() == {}


def test_ctrl_c_ends_a_pdsh_job_on_every_host_and_leaves_nothing(tmp_path) -> None:
    with site(tmp_path, hosts=2) as s:
        hostfile = s.hostfile("h0 slots=1\nh1 slots=1\n")
        proc = s.start(s.argv(hostfile, "--launcher", "pdsh", script_args=["--sleep", "120"]))
        assert proc.stdout is not None
        started = 0
        for line in proc.stdout:
            started += b"] RANK " in line
            if started == 2:
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err.decode()
        assert s.leftovers() == {}
