"""pdsh's one command picks each host's own launcher line; its output lines get [host]."""

from __future__ import annotations

import shlex

from paddlike.launch.cluster.pdsh import host_of_line, pdsh_argv, pdsh_environment
from paddlike.launch.cluster.remote import RemoteJob, host_command
from paddlike.launch.cluster.selection import Pick

JOB = RemoteJob(
    picks=(Pick("h0", 1), Pick("h1", 3)),
    launcher_args=(),
    script=("train.py", "50%h"),
    cwd="/w",
    python="/py",
    environment={},
    job_id="j",
)


def test_the_command_chooses_by_host_name_and_doubles_percent_signs() -> None:
    argv = pdsh_argv(JOB)
    assert argv[:6] == ["pdsh", "-S", "-f", "32", "-w", "h0,h1"]
    command = argv[6]
    assert command.startswith("case %h in h0) cd /w && exec")
    assert host_command(JOB, 1).replace("%", "%%") in command
    assert "50%%h" in command and command.endswith(";; esac")


def test_pdsh_uses_ssh_with_our_options() -> None:
    env = pdsh_environment({"PDSH_SSH_ARGS_APPEND": "-q", "PATH": "/bin"}, ["ssh", "-o", "X=1"])
    assert env["PDSH_RCMD_TYPE"] == "ssh"
    assert shlex.split(env["PDSH_SSH_ARGS"]) == ["-o", "X=1", "-T", "-x", "%h"]
    assert "PDSH_SSH_ARGS_APPEND" not in env and env["PATH"] == "/bin"


def test_pdsh_lines_name_their_host_and_its_own_lines_do_not() -> None:
    assert host_of_line(b"h0: RANK 0: x\n") == ("h0", b"RANK 0: x\n")
    assert host_of_line(b"pdsh@login: h0: ssh exited with exit code 3\n") is None
    assert host_of_line(b"no colon here\n") is None
