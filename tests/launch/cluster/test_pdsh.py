"""pdsh's one command runs each host's script from a file its check wrote (0600); its
output lines get [host]."""

from __future__ import annotations

import shlex
import stat
import subprocess

import pytest

from paddlike.launch.cluster.pdsh import (
    check_hosts,
    host_of_line,
    pdsh_argv,
    pdsh_environment,
    run_file,
    writer_script,
)
from paddlike.launch.cluster.remote import RemoteJob
from paddlike.launch.cluster.selection import Pick
from paddlike.launch.context.options.record import UsageError

JOB = RemoteJob(
    picks=(Pick("h0", 1), Pick("h1", 3)),
    launcher_args=(),
    script=("train.py", "50%h"),
    cwd="/w",
    python="/py",
    environment={},
    job_id="j",
)


def test_the_command_is_the_same_words_for_every_host_and_carries_no_secret() -> None:
    job = JOB._replace(environment={"WANDB_API_KEY": "secret123"})
    argv = pdsh_argv(job, "ab12")
    assert argv == [
        "pdsh", "-S", "-f", "32", "-w", "h0,h1", "exec /bin/sh .paddlike-run-ab12-%h.sh",
    ]  # fmt: skip
    assert "secret123" not in " ".join(argv)


def test_the_check_writes_each_hosts_script_to_a_file_only_its_owner_reads(tmp_path) -> None:
    job = JOB._replace(environment={"WANDB_API_KEY": "secret123"}, cwd=str(tmp_path))
    writer = writer_script(job, 1, "ab12")
    assert "secret123" in writer  # on the check's stdin, not in its argv
    done = subprocess.run(["/bin/sh", "-s"], input=writer, text=True, cwd=tmp_path, timeout=30)
    assert done.returncode == 202  # /py is not there: the file is written first
    path = tmp_path / run_file("ab12", "h1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert text.startswith(f"rm -f -- {run_file('ab12', 'h1')}\n")
    assert "--node_rank 1 " in text and "export WANDB_API_KEY=secret123\n" in text
    again = subprocess.run(["/bin/sh", "-s"], input=writer, text=True, cwd=tmp_path, timeout=30)
    assert again.returncode == 205  # never over a file already there


def test_a_host_name_that_would_need_quoting_is_refused_with_pdsh() -> None:
    check_hosts(JOB)
    odd = JOB._replace(picks=(Pick("h0", 1), Pick("h1;x", 1)))
    with pytest.raises(UsageError, match=r"^--launcher pdsh: host 'h1;x': only letters"):
        check_hosts(odd)


def test_pdsh_uses_ssh_with_our_options() -> None:
    env = pdsh_environment({"PDSH_SSH_ARGS_APPEND": "-q", "PATH": "/bin"}, ["ssh", "-o", "X=1"])
    assert env["PDSH_RCMD_TYPE"] == "ssh"
    assert shlex.split(env["PDSH_SSH_ARGS"]) == ["-o", "X=1", "-T", "-x", "--", "%h"]
    assert "PDSH_SSH_ARGS_APPEND" not in env and env["PATH"] == "/bin"


def test_pdsh_lines_name_their_host_and_its_own_lines_do_not() -> None:
    assert host_of_line(b"h0: RANK 0: x\n") == ("h0", b"RANK 0: x\n")
    assert host_of_line(b"pdsh@login: h0: ssh exited with exit code 3\n") is None
    assert host_of_line(b"no colon here\n") is None
