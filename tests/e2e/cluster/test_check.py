"""The check of every host is that host's own launcher describing its job (then held at
the gate): what it would refuse after the start it refuses before any host starts; and
hostfile names that are ssh-config aliases reach the launchers as the names ssh connects to."""

from __future__ import annotations

import pytest

from tests.e2e.cluster.common import site, worker_ranks

pytestmark = pytest.mark.timeout(150)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "error:" in line]


def _with_ssh_args(argv: list[str], ssh_args: str) -> list[str]:
    return [a if not a.startswith("--ssh_args=") else f"--ssh_args={ssh_args}" for a in argv]


def test_hostfile_names_that_are_ssh_aliases_run_the_job(tmp_path) -> None:
    with site(tmp_path, hosts=2) as s:
        config = s.tmp / "ssh_config_aliases"
        aliases = "Host node-a\n  HostName h0\nHost node-b\n  HostName h1\n"
        config.write_text(aliases + s.ssh.config.read_text())
        hostfile = s.hostfile("node-a slots=1\nnode-b slots=1\n")
        argv = _with_ssh_args(s.argv(hostfile, "--rdzv_timeout", "20"), f"-F {config}")
        done = s.run(argv, timeout=100)
        assert done.returncode == 0, done.stdout + done.stderr
        assert worker_ranks(s.tmp / "log") == [0, 1]
        assert s.leftovers() == {}


@pytest.mark.skipif(
    __import__("os").path.isdir("/proc/driver/nvidia/gpus"), reason="this machine has GPUs"
)
def test_devices_a_host_lacks_are_refused_before_any_host_starts(tmp_path) -> None:
    with site(tmp_path, hosts=2) as s:
        hostfile = s.hostfile("h0 slots=2\nh1 slots=2\n")
        done = s.run(s.argv(hostfile, "--include", "h0:0@h1:1"))
        assert done.returncode == 2, done.stdout + done.stderr
        lines = _error_lines(done.stderr)
        assert [line.split(": ")[3] for line in lines] == ["host h0", "host h1"], lines
        for line in lines:
            assert line.startswith("paddlike.launch: error: --hostfile: host h")
            assert ": --include h0:0@h1:1: no NVIDIA GPU found on this node" in line  # as typed
            assert line.endswith("; nothing was started")
        assert not (s.tmp / "log").exists()
        assert s.leftovers() == {}


def test_a_name_only_the_login_node_resolves_is_refused_naming_the_hosts(tmp_path) -> None:
    with site(tmp_path, hosts=2) as s:
        h0 = s.hosts[0]
        with open(s.login.hosts_path, "a") as f:  # this machine's name for h0 alone
            f.write(f"{h0.addr} far-h0\n")
        config = s.tmp / "ssh_config_far"
        config.write_text("Host far-h0\n  HostKeyAlias h0\n" + s.ssh.config.read_text())
        hostfile = s.hostfile("far-h0 slots=1\nh1 slots=1\n")
        argv = _with_ssh_args(s.argv(hostfile, "--rdzv_timeout", "20"), f"-F {config}")
        done = s.run(argv, timeout=100)
        assert done.returncode == 2, done.stdout + done.stderr
        lines = _error_lines(done.stderr)
        assert [line.split(": ")[3] for line in lines] == ["host far-h0", "host h1"], lines
        assert all("far-h0" in line.split(": ", 4)[4] for line in lines), lines
        assert all(line.endswith("; nothing was started") for line in lines), lines
        assert not (s.tmp / "log").exists()
        assert s.leftovers() == {}
