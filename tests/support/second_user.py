"""Another local user of a shared machine, for real: uid 4242 (no passwd entry needed)
started through `setpriv`, with a shared temp directory like /tmp (mode 1777) that both
users can reach.

Root's virtual environment is not executable by others, so the second user runs the
system python3 with a readable copy of the package on PYTHONPATH; that python has no
psutil or numpy, so what it runs must need only the standard library (the port registry
does). Tests that need none of this skip where the machine cannot provide it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

SECOND_UID = 4242
# What the second user runs to look for secrets: every process's command line, and its
# environment where it may read one, searched for the secrets given on its stdin; leaves
# `seen` (where one was found) for the lines a test appends.
PROC_SPY = r"""
import json, os, sys
secrets = json.loads(sys.stdin.read())
seen = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    for part in ("cmdline", "environ"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        seen += [f"{part} of {pid}: {text[:300]!r}" for s in secrets if s in text]
"""
PACKAGE = Path(__file__).resolve().parents[2] / "paddlike"
SYSTEM_PYTHON = "/usr/bin/python3"


def as_second_user() -> list[str]:
    """The command prefix that runs as uid/gid 4242 with no supplementary groups."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as a second local user")
    return [
        "setpriv",
        f"--reuid={SECOND_UID}",
        f"--regid={SECOND_UID}",
        "--clear-groups",
    ]


def second_user_python(shared: Path) -> tuple[list[str], dict[str, str]]:
    """The command (prefix + python) and environment that run python as the second user,
    with a copy of the package it can read under `shared`."""
    prefix = as_second_user()
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"no {SYSTEM_PYTHON} for the second user")
    copy = shared / "package"
    if not copy.exists():
        shutil.copytree(PACKAGE, copy / "paddlike", ignore=shutil.ignore_patterns("__pycache__"))
        for path in [copy, *copy.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(copy),
        "PYTHONDONTWRITEBYTECODE": "1",
        "TMPDIR": str(shared),
        "HOME": str(shared),
    }
    return [*prefix, SYSTEM_PYTHON], env


def run_as_second_user(
    argv: Sequence[str], *, timeout: float = 30, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """`argv` (a plain command: ln, mkdir) as the second user; check=True."""
    return subprocess.run(
        [*as_second_user(), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
        **kwargs,  # type: ignore[arg-type]
    )


@contextmanager
def shared_temp_dir() -> Iterator[Path]:
    """A directory like /tmp (mode 1777, reachable by every user), removed afterwards with
    whatever either user left in it. pytest's tmp_path is under a root-only directory."""
    path = Path(tempfile.mkdtemp(prefix="paddlike-shared-", dir="/tmp"))
    try:
        path.chmod(0o1777)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def root_only_file(directory: Path, text: str = "root's secret\n") -> Path:
    """A file only root may read or write: what a planted link would make root overwrite."""
    victim = directory / "root-only"
    victim.write_text(text)
    victim.chmod(0o600)
    return victim
