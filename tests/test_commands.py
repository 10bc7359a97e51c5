"""Both commands as command-line tools: a closed stdout (`| head -1`) ends them quietly,
`--help` names the command the user typed, and options that would be silently ignored
together are one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddlike.commands import EXIT_PIPE_CLOSED

pytestmark = pytest.mark.timeout(60)

BIN = Path(sys.executable).parent


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}


@pytest.fixture(scope="module")
def failed_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log directory of a job whose rank 1 exited 3 (the reader has something to say)."""
    root = tmp_path_factory.mktemp("job")
    (root / "t.py").write_text("import os, sys\nsys.exit(3 * int(os.environ['RANK']))\n")
    done = subprocess.run(
        [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", "2", "t.py"],
        cwd=root, env=_env(), capture_output=True, text=True, timeout=45,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    return root


def _console_script(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed beside {sys.executable}")
    return str(path)


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "paddlike.launch", "--dry_run", "t.py"],
        ["-m", "paddlike.logs", "log"],
        ["-m", "paddlike.logs", "log", "--json"],
    ],
)
def test_a_reader_that_stopped_reading_ends_the_command_quietly(failed_log, command):
    read, write = os.pipe()
    os.close(read)  # as `| head -1` once it has its line: every write fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, *command], cwd=failed_log, env=_env(), stdout=write,
            stderr=subprocess.PIPE, text=True, timeout=45,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (EXIT_PIPE_CLOSED, "")


@pytest.mark.parametrize("name", ["paddlike-launch", "paddlike-logs"])
def test_help_names_the_console_script_that_was_typed(name):
    done = subprocess.run(
        [_console_script(name), "--help"], env=_env(), capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {name} [")


@pytest.mark.parametrize("module", ["paddlike.launch", "paddlike.logs"])
def test_help_under_python_m_says_python_m(module):
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], env=_env(), capture_output=True, text=True,
        timeout=30,
    )  # fmt: skip
    assert done.stdout.startswith(f"usage: python -m {module} [")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--json", "--html", "x.html"],
         "--json with --html: one output at a time (the page holds the same facts)"),
        (["--tail", "3"],
         "--tail 3: the lines of one log, with --rank N or --role R (or --follow); the default "
         "view quotes the failed process's last lines"),
    ],
)  # fmt: skip
def test_options_the_reader_would_ignore_are_refused_in_one_line(failed_log, args, line):
    done = subprocess.run(
        [sys.executable, "-m", "paddlike.logs", "log", *args], cwd=failed_log, env=_env(),
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"paddlike.logs: {line}\n")
    assert not (failed_log / "x.html").exists()
