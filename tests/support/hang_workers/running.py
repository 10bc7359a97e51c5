"""Start a job under the real launcher and keep it running while a test looks at it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from paddlike.summary import read_summary

WORKERS = Path(__file__).resolve().parent
REPO = WORKERS.parents[2]
DEADLINE = 60.0


@contextlib.contextmanager
def running_job(
    tmp: Path,
    script: str,
    *args: str,
    nproc: int = 4,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
) -> Iterator[subprocess.Popen[str]]:
    """`python -m paddlike.launch --nproc_per_node N script args` with logs in tmp/log;
    on leaving, SIGTERM to the launcher (it tears its workers down), SIGKILL if it lingers.
    `env` is added to this environment (PYTHONPATH: the repository, unless env sets it)."""
    cmd = [python, "-m", "paddlike.launch", "--nproc_per_node", str(nproc)]
    cmd += ["--log_dir", str(tmp / "log"), "--kill_timeout", "2", str(WORKERS / script), *args]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    proc = subprocess.Popen(
        cmd, cwd=tmp, env=full_env, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()


def wait_until(
    what: str, ready: Callable[[], bool], proc: subprocess.Popen[str], tmp: Path
) -> None:
    """Until `ready()` (or fail, with the logs, when the launcher ended or time is up)."""
    end = time.monotonic() + DEADLINE
    while not ready():
        if proc.poll() is not None:
            out = proc.communicate()[0]
            pytest.fail(f"launcher exited {proc.returncode} before {what}:\n{out}\n{logs(tmp)}")
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}\n{logs(tmp)}")
        time.sleep(0.02)


def all_blocked(*log_dirs: Path) -> Callable[[], bool]:
    """True once the main thread of every running trainer the summaries list sleeps in the
    kernel (state S): past its marker file, inside the call that blocks it, so that a
    stack taken now shows that call."""

    def check() -> bool:
        pids = []
        for d in log_dirs:
            summary = read_summary(d)
            if summary is None:
                return False
            pids += [p.pid for p in summary.processes if p.status == "running" and p.pid]
        return bool(pids) and all(_state(pid) == "S" for pid in pids)

    return check


def without_py_spy() -> tuple[str, dict[str, str]]:
    """A python and environment under which the launcher finds no py-spy (it looks beside
    its interpreter, then on PATH): this virtualenv's packages on the base interpreter.
    Skips the test where the base interpreter has a py-spy of its own."""
    base = Path(getattr(sys, "_base_executable", sys.executable))
    if (base.parent / "py-spy").exists() or base.parent == Path(sys.executable).parent:
        pytest.skip(f"{base.parent} has py-spy, or this is no virtualenv")
    site = [p for p in sys.path if p.endswith("site-packages")]
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (Path(d) / "py-spy").exists()]  # fmt: skip
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), *site]), "PATH": os.pathsep.join(path)}
    return str(base), env


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return stat[stat.rindex(")") + 2 :].split()[0]


def logs(tmp: Path) -> str:
    parts = []
    for f in sorted((tmp / "log").glob("workerlog.*")):
        parts.append(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}")
    return "\n".join(parts)
