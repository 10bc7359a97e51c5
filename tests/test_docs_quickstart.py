"""Every command of the quickstarts (docs/quickstart.md, docs/zh/quickstart.md) runs as
printed, from where the pages say: the repository's root, in its .venv (issue 32).

A command block is a ```sh fence; each of its lines is one command, run by bash in the
page's order in a stand-in for the repository's root (a temporary directory whose
`examples/` is the repository's, so that the jobs' `log/` is the test's own), with the
.venv's bin first on PATH (what `. .venv/bin/activate` does):

    the command                           how it runs here
    make env, . .venv/bin/activate        in the repository, when `make -q env` says the
                                          environment is up to date (this test runs in it)
    names nodea (two machines)            on two network namespaces, nodea and nodeb, at
                                          once; the page's comment must say so
    has --gpus (GPUs), not --dry_run      with --dry_run (this machine may have none); the
                                          page's comment must say it needs GPUs
    --master 127.0.0.1:P --nnodes N       N copies at once ("in two terminals")
    any other                             once

Every command must exit 0.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.fixed_ports import fixed_ports

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("docs/quickstart.md", "docs/zh/quickstart.md")
LAUNCH = "python -m paddlike.launch "
TIMEOUT = 120.0  # seconds for one command (a PS job of 2 servers and 2 trainers: ~15 s)


def command_lines(page: str) -> list[str]:
    """Every line of every ```sh block of `page`, in order."""
    blocks = re.findall(r"^```sh\n(.*?)^```$", (ROOT / page).read_text(), re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def comment(line: str) -> str:
    return line.partition("#")[2]


def as_run_here(line: str, port: int) -> str:
    """The command as this test runs it: with --dry_run where it needs GPUs, and a loopback
    job at a port of its own (the page's 29517 is a port someone else on this machine may
    be using for the same example, whose launchers would join this job)."""
    if "--gpus" in line and "--dry_run" not in line:
        return line.replace(LAUNCH, LAUNCH + "--dry_run ", 1)
    return re.sub(r"--master 127\.0\.0\.1:\d+", f"--master 127.0.0.1:{port}", line)


def copies(line: str) -> int:
    """How many copies run at once: N for a job of N nodes on the loopback address."""
    argv = shlex.split(line, comments=True)
    if "--nnodes" in argv and any(a.startswith("127.0.0.1:") for a in argv):
        return int(argv[argv.index("--nnodes") + 1])
    return 1


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "PET_"))}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def _bash(
    popen: Callable[..., subprocess.Popen[bytes]], line: str, cwd: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """`line` started by bash (here, or in a namespace: `popen`), its output captured."""
    return popen(
        ["bash", "-c", line], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _finish(procs: list[subprocess.Popen[bytes]], line: str) -> None:
    """Every copy's exit 0, or the failure with what each printed; none left running."""
    try:
        outs = [p.communicate(timeout=TIMEOUT)[0].decode(errors="replace") for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    codes = [p.returncode for p in procs]
    assert codes == [0] * len(procs), f"{line}\n exited {codes}:\n" + "\n--\n".join(
        out[-3000:] for out in outs
    )


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", PAGES)
def test_every_command_of_the_quickstart_runs_as_printed(page, tmp_path):
    lines = command_lines(page)
    assert any(line.startswith(LAUNCH) for line in lines), page
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    port = fixed_ports()
    # as the page advises on a shared machine: a token, so that no other launcher joins
    env = {**_env(), "PADDLIKE_JOB_TOKEN": os.urandom(16).hex()}
    skipped = []
    with contextlib.ExitStack() as stack:
        cluster = None
        for line in lines:
            run = as_run_here(line, port)
            if line.startswith(("make ", ". ")):
                up_to_date = subprocess.run(["make", "-q", "env"], cwd=ROOT, check=False)
                if up_to_date.returncode != 0:
                    skipped.append(f"{line} (the environment is not up to date)")
                    continue
                procs = [_bash(subprocess.Popen, line, ROOT, env)]
            elif "nodea" in line:
                assert "nodea" in comment(line) and "nodeb" in comment(line), line
                if cluster is None:
                    from tests.support.netns import netns_cluster

                    try:
                        cluster = stack.enter_context(netns_cluster(2, ["nodea", "nodeb"]))
                    except pytest.skip.Exception as why:
                        skipped.append(f"{line} ({why})")
                        continue
                procs = [_bash(node.popen, run, tmp_path, env) for node in cluster.nodes]
            else:
                procs = [_bash(subprocess.Popen, run, tmp_path, env) for _ in range(copies(line))]
            if "--dry_run" in run and "--dry_run" not in line:  # a real run of it needs GPUs
                assert "GPU" in comment(line), f"the page must say that this needs GPUs: {line}"
            _finish(procs, run)
    if skipped:
        pytest.skip("ran all but: " + "; ".join(skipped))


def test_the_pages_commands_name_no_script_the_repository_lacks():
    """`train.py` and `ps_ctr.py` in the repository's root were not there (issue 32)."""
    for page in PAGES:
        for line in command_lines(page):
            for arg in shlex.split(line, comments=True):
                if arg.endswith(".py"):
                    assert (ROOT / arg).is_file(), f"{page}: {line}"
