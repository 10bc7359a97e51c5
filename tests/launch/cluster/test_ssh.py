"""ssh's complaints as one line a user acts on, naming the host; its options."""

from __future__ import annotations

import pytest

from paddlike.launch.cluster.remote import REMOTE_SHELL
from paddlike.launch.cluster.ssh import session_argv, ssh_base, ssh_failure, users_masters

CHANGED = """@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
Host key verification failed."""


@pytest.mark.parametrize(
    ("stderr", "line"),
    [
        (CHANGED, "host h1: its ssh host key has changed since it was recorded"),
        ("Host key verification failed.", "host h1: its ssh host key is not known here"),
        ("root@h1: Permission denied (publickey,password).", "host h1: ssh refused the login"),
        ("ssh: connect to host h1 port 22: Connection refused", "host h1: ssh: connection refused"),
        ("ssh: connect to host h1 port 22: No route to host", "host h1: ssh: no route to it"),
        ("ssh: connect to host h1 port 22: Connection timed out", "host h1: ssh: no answer within"),
        (
            "ssh: Could not resolve hostname h1: Name or service not known",
            "host h1: ssh: its name does not resolve",
        ),
        ("kex_exchange_identification: read: Connection reset", "host h1: ssh failed: kex_"),
        ("", "host h1: ssh failed: no message"),
    ],
)
def test_ssh_failures_become_one_line_naming_the_host(stderr, line) -> None:
    message = ssh_failure("h1", stderr)
    assert message.startswith(line)
    assert "\n" not in message


def test_the_users_ssh_options_come_first_so_that_they_win() -> None:
    base = ssh_base("-F /my/config -p 2222", "/tmp/c")
    assert base[:5] == ["ssh", "-F", "/my/config", "-p", "2222"]
    assert "BatchMode=yes" in base and "ControlPath=/tmp/c/%C" in base
    assert session_argv(base, "h0", "cmd")[-5:] == ["-T", "-x", "--", "h0", "cmd"]
    # the script comes on stdin: the command is the same words in every login shell
    assert session_argv(base, "-oProxyCommand=x")[-3:] == ["--", "-oProxyCommand=x", REMOTE_SHELL]


def test_masters_under_the_users_own_control_path_are_theirs_to_keep() -> None:
    assert users_masters("-o ControlPath=~/.ssh/cm-%C -o ControlPersist=1h")
    assert users_masters("-F cfg -o controlpath=/x/%C")
    assert not users_masters("-F cfg -p 22")
    assert not users_masters(None)


def test_ssh_port_and_the_names_ssh_connects_to(tmp_path) -> None:
    from paddlike.launch.cluster.ssh import connected_names, resolved_hostname, ssh_base

    base = ssh_base("-F cfg", "/c", port=2222)
    assert base[:5] == ["ssh", "-F", "cfg", "-p", "2222"]
    config = tmp_path / "config"
    config.write_text("Host node-a\n  HostName tc0\n")
    local = ["ssh", "-F", str(config)]
    assert connected_names(local, ["node-a", "tc1"]) == ("tc0", "tc1")  # no connection made
    assert resolved_hostname("user u\nhostname tc0\nport 22\n") == "tc0"


def test_dry_run_ssh_port_force_multi_and_aliases(tmp_path) -> None:
    import os
    import shlex
    import subprocess
    import sys

    (tmp_path / "hf").write_text("node-a slots=1\n")
    (tmp_path / "train.py").write_text("")
    config = tmp_path / "config"
    config.write_text("Host node-a\n  HostName tc0\n")
    argv = [sys.executable, "-m", "paddlike.launch", "--hostfile", "hf", f"--ssh_args=-F {config}",
            "--ssh_port", "2222", "--force_multi", "--dry_run", "train.py"]  # fmt: skip
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    words = shlex.split(lines[0].removeprefix("[node-a] ").removesuffix(" <<'SCRIPT'"))
    assert words[1:5] == ["-F", str(config), "-p", "2222"]
    assert words[-3:] == ["--", "node-a", REMOTE_SHELL]
    (launcher,) = [line for line in lines if line.startswith("[node-a]   exec ")]
    remote = shlex.split(launcher.removeprefix("[node-a]   exec "))
    assert remote[remote.index("--ips") + 1] == "tc0"  # what ssh connects to, not the alias
    assert not {"--ssh_port", "--force_multi", "2222"} & set(remote)
    pdsh = subprocess.run(
        [*argv[:-1], "--launcher", "pdsh", "train.py"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=dict(os.environ),
    )  # fmt: skip
    assert pdsh.returncode == 0, pdsh.stderr
    assert f"PDSH_SSH_ARGS='-F {config} -p 2222 " in pdsh.stdout
