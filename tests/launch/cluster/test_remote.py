"""Each host's command: the same directory, Python, environment, options and job id; its
own node rank and worker count."""

from __future__ import annotations

import shlex

from paddlike.launch.cluster.remote import (
    RemoteJob,
    check_command,
    check_failure,
    gated_command,
    host_command,
    launcher_refusal,
)
from paddlike.launch.cluster.selection import Pick

JOB = RemoteJob(
    picks=(Pick("h0", 2), Pick("h1", None, (0, 3)), Pick("h2", None)),
    launcher_args=("--log_dir", "my log"),
    script=("train.py", "--lr", "0.1"),
    cwd="/home/u/proj",
    python="/opt/py/bin/python3",
    environment={"NCCL_DEBUG": "INFO", "ODD": "a b'c"},
    job_id="job-1",
)


def test_each_host_runs_the_launcher_with_its_rank_and_its_own_workers() -> None:
    words = [shlex.split(host_command(JOB, i)) for i in range(3)]
    for i, w in enumerate(words):
        assert w[:4] == ["cd", "/home/u/proj", "&&", "exec"]
        assert w[4:8] == ["env", "NCCL_DEBUG=INFO", "ODD=a b'c", "PADDLIKE_STDIN_EOF_ENDS=1"]
        launcher = w[8:]
        assert launcher[:9] == [
            "/opt/py/bin/python3", "-m", "paddlike.launch", "--ips", "h0,h1,h2",
            "--node_rank", str(i), "--job_id", "job-1",
        ]  # fmt: skip
        assert launcher[-5:] == ["--log_dir", "my log", "train.py", "--lr", "0.1"]
    assert words[0][17:19] == ["--slots", "2"]
    assert words[1][17:19] == ["--gpus", "0,3"]
    assert words[2][17:19] == ["--log_dir", "my log"]  # its launcher's own default


def test_without_the_eof_watch_the_command_carries_only_the_users_environment() -> None:
    assert "PADDLIKE_STDIN_EOF_ENDS" not in host_command(JOB, 0, end_on_eof=False)


def test_the_preflight_checks_directory_python_and_paddlike_by_exit_code() -> None:
    text = check_command("/d", "/p/python")
    assert text.startswith("cd /d 2>/dev/null || exit 201; [ -x /p/python ] || exit 202;")
    assert check_failure(0, "/d", "/p") is None
    assert check_failure(201, "/d", "/p").startswith("the working directory /d does not exist")
    assert check_failure(202, "/d", "/p") == "no Python at /p there (give --remote_python PATH)"
    assert "cannot import paddlike" in check_failure(203, "/d", "/p")
    with_script = check_command("/d", "/p/python", "my train.py")
    assert with_script.endswith("; [ -f 'my train.py' ] || exit 204")
    assert check_failure(204, "/d", "/p", "t.py") == "the training script t.py is not there (in /d)"


def test_a_gated_command_checks_then_holds_the_launcher_itself_at_the_gate() -> None:
    text = gated_command(JOB, 1, "train.py")
    check, launcher = text.split("; cd /home/u/proj && ")
    assert check == (
        "cd /home/u/proj 2>/dev/null || exit 201; [ -x /opt/py/bin/python3 ] || exit 202; "
        "[ -f train.py ] || exit 204"
    )
    assert "import paddlike" not in text  # one Python start-up per host: the launcher's
    words = shlex.split(launcher)
    assert "PADDLIKE_HELD_AT_GATE=1" in words and "PADDLIKE_STDIN_EOF_ENDS=1" in words
    assert words[words.index("--node_rank") + 1] == "1"


def test_ips_are_the_names_ssh_connects_to() -> None:
    aliased = JOB._replace(addresses=("10.0.0.1", "tc1", "tc2"))
    words = shlex.split(host_command(aliased, 2))
    assert words[words.index("--ips") + 1] == "10.0.0.1,tc1,tc2"


def test_a_held_launchers_refusal_is_its_own_line() -> None:
    err = "warning\npaddlike.launch: error: --gpus: no NVIDIA GPU found (looked at x)\n"
    assert launcher_refusal(2, err, "/p") == "--gpus: no NVIDIA GPU found (looked at x)"
    missing = "/p: No module named paddlike.launch\n"
    assert "cannot import paddlike" in launcher_refusal(1, missing, "/p")
    assert launcher_refusal(1, "Traceback ...\n", "/p") is None
