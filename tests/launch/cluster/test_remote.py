"""Each host's command: the same directory, Python, environment, options and job id; its
own node rank and worker count."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from paddlike.contract import GPUS_GIVEN_AS, HELD_AT_GATE, JOB_TOKEN, JOB_TOKEN_FILE, STDIN_EOF_ENDS
from paddlike.launch.cluster.remote import (
    RemoteJob,
    check_command,
    check_failure,
    gated_script,
    host_script,
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


def _launcher_words(script: str) -> list[str]:
    (exec_line,) = [line for line in script.splitlines() if line.startswith("exec ")]
    return shlex.split(exec_line)[1:]


def _exports(script: str) -> list[str]:
    return [shlex.split(line)[1] for line in script.splitlines() if line.startswith("export ")]


def test_each_host_runs_the_launcher_with_its_rank_and_its_own_workers() -> None:
    scripts = [host_script(JOB, i) for i in range(3)]
    for i, text in enumerate(scripts):
        assert text.startswith("cd /home/u/proj 2>/dev/null || exit 201\n")
        assert _exports(text) == ["NCCL_DEBUG=INFO", "ODD=a b'c", f"{STDIN_EOF_ENDS}=1"]
        launcher = _launcher_words(text)
        assert launcher[:9] == [
            "/opt/py/bin/python3", "-m", "paddlike.launch", "--ips", "h0,h1,h2",
            "--node_rank", str(i), "--job_id", "job-1",
        ]  # fmt: skip
        assert launcher[-5:] == ["--log_dir", "my log", "train.py", "--lr", "0.1"]
    assert _launcher_words(scripts[0])[9:11] == ["--slots", "2"]
    assert _launcher_words(scripts[1])[9:11] == ["--gpus", "0,3"]
    assert _launcher_words(scripts[2])[9:11] == ["--log_dir", "my log"]  # its own default


def test_the_environment_is_exported_by_the_script_never_on_the_launchers_command_line() -> None:
    secret = JOB._replace(environment={"WANDB_API_KEY": "secret123", JOB_TOKEN: "T0P"})
    text = host_script(secret, 0)
    assert "secret123" not in " ".join(_launcher_words(text))
    assert _exports(text)[:2] == ["WANDB_API_KEY=secret123", "PADDLIKE_JOB_TOKEN=T0P"]
    assert f"unset {JOB_TOKEN_FILE}\n" in text  # the host's own would contradict it
    hidden = host_script(secret, 0, hide=True)
    assert "secret123" not in hidden and "T0P" not in hidden
    assert "export WANDB_API_KEY=<hidden>\n" in hidden
    assert "export PADDLIKE_JOB_TOKEN=<hidden>\n" in hidden


def test_dry_run_shows_paddlikes_own_variables_and_hides_every_carried_one() -> None:
    env = {"HF_TOKEN": "hf_x", GPUS_GIVEN_AS: "--include", JOB_TOKEN: "T0P"}
    text = host_script(JOB._replace(environment=env), 0, hide=True)
    assert f"export {GPUS_GIVEN_AS}=--include\n" in text  # how --gpus was given: no secret
    assert "export HF_TOKEN=<hidden>\n" in text and "hf_x" not in text and "T0P" not in text


@pytest.mark.parametrize(
    "hostile",
    [
        "x\\'$(touch F)\" #",
        "x'$(touch F)\" #",
        "`touch F`",
        "a\nb",
        "!!",
        "",
        "$HOME",
        "a\\",
        "%h",
        "; touch F",
    ],
)
def test_every_argument_reaches_the_launcher_as_written_through_sh(tmp_path, hostile) -> None:
    job = JOB._replace(
        script=("train.py", hostile),
        environment={"V": hostile},
        cwd=str(tmp_path),
        python="printf",  # the launcher stands in: its argv, one per line
    )
    text = host_script(job, 0, end_on_eof=False).replace(
        "exec printf", "exec printf '<%s>\\n' \"$V\""
    )
    done = subprocess.run(
        ["/bin/sh", "-s"], input=text, capture_output=True, text=True, timeout=30, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(f"<train.py>\n<{hostile}>\n")
    assert done.stdout.startswith(f"<{hostile}>\n")
    assert not (tmp_path / "F").exists()


def test_without_the_eof_watch_the_script_carries_only_the_users_environment() -> None:
    assert STDIN_EOF_ENDS not in host_script(JOB, 0, end_on_eof=False)


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


def test_a_gated_script_checks_then_holds_the_launcher_itself_at_the_gate() -> None:
    text = gated_script(JOB, 1, "train.py")
    assert text.splitlines()[:3] == [
        "cd /home/u/proj 2>/dev/null || exit 201",
        "[ -x /opt/py/bin/python3 ] || exit 202",
        "[ -f train.py ] || exit 204",
    ]
    assert "import paddlike" not in text  # one Python start-up per host: the launcher's
    assert f"{HELD_AT_GATE}=1" in _exports(text)
    assert f"{STDIN_EOF_ENDS}=1" in _exports(text)
    words = _launcher_words(text)
    assert words[words.index("--node_rank") + 1] == "1"


def test_ips_are_the_names_ssh_connects_to() -> None:
    aliased = JOB._replace(addresses=("10.0.0.1", "tc1", "tc2"))
    words = _launcher_words(host_script(aliased, 2))
    assert words[words.index("--ips") + 1] == "10.0.0.1,tc1,tc2"


def test_a_held_launchers_refusal_is_its_own_line() -> None:
    err = "warning\npaddlike.launch: error: --gpus: no NVIDIA GPU found (looked at x)\n"
    assert launcher_refusal(2, err, "/p") == "--gpus: no NVIDIA GPU found (looked at x)"
    missing = "/p: No module named paddlike.launch\n"
    assert "cannot import paddlike" in launcher_refusal(1, missing, "/p")
    assert launcher_refusal(1, "Traceback ...\n", "/p") is None
