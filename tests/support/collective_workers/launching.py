"""Run a script under the real launcher (python -m paddlike.launch) for the collective tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).resolve().parent
REPO = WORKERS.parents[2]


def launch(
    tmp: Path, script: Path | str, *args: str, nproc: int = 2, env: dict[str, str] | None = None,
    timeout: float = 90.0,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Launch `script` on `nproc` local CPU workers; logs go to tmp/log."""
    cmd = [sys.executable, "-m", "paddlike.launch", "--nproc_per_node", str(nproc),
           "--log_dir", str(tmp / "log"), str(script), *args]  # fmt: skip
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    proc = subprocess.Popen(cmd, cwd=tmp, env=full_env, text=True, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"launch did not finish in {timeout} s:\n{out}\n{logs(tmp)}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def logs(tmp: Path) -> str:
    """Every worker log, for assertion messages."""
    parts = []
    for f in sorted((tmp / "log").glob("workerlog.*")):
        parts.append(f"--- {f.name}\n{f.read_text(errors='replace')[-4000:]}")
    return "\n".join(parts)


def reports(directory: Path) -> dict[int, dict]:
    return {
        int(p.stem.removeprefix("rank")): json.loads(p.read_text())
        for p in sorted(directory.glob("rank*.json"))
    }
