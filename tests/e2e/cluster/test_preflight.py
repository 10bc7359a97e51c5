"""Before anything starts anywhere, every host is checked over ssh at once: a host that
cannot be reached, whose host key is not known, or that lacks the Python, is one line
naming the host, exit code 2, and no process on any host."""

from __future__ import annotations

import pytest

from tests.e2e.cluster.common import REPO, site

pytestmark = pytest.mark.timeout(120)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "error:" in line]


def test_a_host_without_sshd_is_one_line_and_nothing_starts_anywhere(tmp_path) -> None:
    with site(tmp_path, sshd_on=[0, 1]) as s:  # h2 has no sshd: connection refused
        hostfile = s.hostfile("h0 slots=1\nh1 slots=1\nh2 slots=1\n")
        done = s.run(s.argv(hostfile))
        assert done.returncode == 2, done.stdout + done.stderr
        assert _error_lines(done.stderr) == [
            "paddlike.launch: error: --hostfile: host h2: ssh: connection refused on the ssh "
            "port (is sshd running there?); nothing was started"
        ]
        assert not (s.tmp / "log").exists()
        assert s.leftovers() == {}


def test_a_host_whose_key_is_not_known_is_one_line_and_nothing_starts(tmp_path) -> None:
    with site(tmp_path) as s:
        known = s.tmp / "known_hosts_without_h1"
        known.write_text(
            "".join(
                line + "\n"
                for line in s.ssh.known_hosts.read_text().splitlines()
                if not line.startswith("h1,")
            )
        )
        config = s.tmp / "ssh_config"
        config.write_text(s.ssh.config.read_text().replace(str(s.ssh.known_hosts), str(known)))
        hostfile = s.hostfile("h0 slots=1\nh1 slots=1\nh2 slots=1\n")
        argv = [
            a if not a.startswith("--ssh_args=") else f"--ssh_args=-F {config}"
            for a in s.argv(hostfile)
        ]
        done = s.run(argv)
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = _error_lines(done.stderr)
        assert line.startswith(
            "paddlike.launch: error: --hostfile: host h1: its ssh host key is not known here"
        )
        assert not (s.tmp / "log").exists()
        assert s.leftovers() == {}


def test_a_missing_remote_python_or_script_is_named_before_anything_starts(tmp_path) -> None:
    with site(tmp_path, hosts=2) as s:
        hostfile = s.hostfile("h0\nh1\n")
        done = s.run(s.argv(hostfile, "--remote_python", "/nonexistent/python3"))
        assert done.returncode == 2, done.stdout + done.stderr
        assert _error_lines(done.stderr) == [
            f"paddlike.launch: error: --hostfile: host {h}: no Python at /nonexistent/python3 "
            "there (give --remote_python PATH); nothing was started"
            for h in ("h0", "h1")
        ]
        argv = s.argv(hostfile)
        argv[-1] = str(s.tmp / "missing.py")
        done = s.run(argv)
        assert done.returncode == 2, done.stdout + done.stderr
        assert _error_lines(done.stderr)[0] == (
            f"paddlike.launch: error: --hostfile: host h0: the training script {argv[-1]} is "
            f"not there (in {REPO}); nothing was started"
        )
        assert s.leftovers() == {}
