"""`restartable(fn)`'s side of the launcher's protocol, with a real worker process and the
test as its launcher (a unix datagram socket in a 0700 directory): the park signal
interrupts fn, the worker says "parked", takes the next round's environment whole and runs
fn again; with no next round it exits with one line; outside a launch it is just fn()."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddlike.distributed.restartable import PARK_SIGNAL, restartable

pytestmark = pytest.mark.timeout(60)

WORKER = r"""
import os, sys, time
import paddlike.distributed as dist
calls = []
def fn():
    calls.append(os.environ.get("ROUND"))
    print("fn", os.environ.get("ROUND"), "OLD" in os.environ, flush=True)
    if len(calls) == 1:
        time.sleep(30)  # the park signal interrupts this
    return "returned after " + ",".join(map(str, calls))
print(dist.restartable(fn), flush=True)
"""


@pytest.fixture
def warm_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="warm-test-"))  # short: a socket path's limit
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _start(warm_dir: Path, wait: str = "30") -> subprocess.Popen[str]:
    env = {**os.environ, "PADDLIKE_WARM_DIR": str(warm_dir), "PADDLIKE_WARM_WAIT": wait}
    env.update(ROUND="0", OLD="1")
    return subprocess.Popen(
        [sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _launcher_socket(warm_dir: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(warm_dir / "launcher.sock"))
    sock.settimeout(30)
    return sock


def _registered(proc: subprocess.Popen[str], warm_dir: Path) -> Path:
    assert proc.stdout is not None
    assert proc.stdout.readline() == "fn 0 True\n"  # in fn: registered by now
    path = warm_dir / f"{proc.pid}.sock"
    assert path.exists()
    return path


def test_a_parked_worker_runs_fn_again_with_the_next_rounds_environment(warm_dir: Path) -> None:
    launcher = _launcher_socket(warm_dir)
    proc = _start(warm_dir)
    try:
        path = _registered(proc, warm_dir)
        os.kill(proc.pid, PARK_SIGNAL)
        assert json.loads(launcher.recv(4096)) == {"parked": proc.pid}
        env = {k: v for k, v in os.environ.items() if k != "OLD"}
        env.update(ROUND="1", PADDLIKE_WARM_DIR=str(warm_dir))
        launcher.sendto(json.dumps({"env": env}).encode(), str(path))
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
        launcher.close()
    assert proc.returncode == 0, err
    # the environment replaced whole: OLD, set only in the first round's, is gone
    assert out.splitlines() == ["fn 1 False", "returned after 0,1"]
    assert not path.exists()  # unregistered when restartable returns


def test_a_parked_worker_without_a_next_round_exits_with_one_line(warm_dir: Path) -> None:
    launcher = _launcher_socket(warm_dir)
    proc = _start(warm_dir, wait="1")
    try:
        _registered(proc, warm_dir)
        os.kill(proc.pid, PARK_SIGNAL)
        assert json.loads(launcher.recv(4096)) == {"parked": proc.pid}
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
        launcher.close()
    assert proc.returncode == 1
    assert err.strip().splitlines() == [
        "paddlike.distributed.restartable: kept for a restart, but no next round came "
        "within 1 s (PADDLIKE_WARM_WAIT); exiting"
    ]


def test_outside_a_launch_restartable_is_fn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PADDLIKE_WARM_DIR", raising=False)
    import signal

    before = signal.getsignal(PARK_SIGNAL)
    calls: list[int] = []
    assert restartable(lambda: calls.append(1) or "value") == "value"
    assert calls == [1]
    assert signal.getsignal(PARK_SIGNAL) == before


def test_an_exception_of_fns_own_is_raised_after_the_grace(
    warm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No launcher sends the park signal: the exception is the script's."""
    import paddlike.distributed.restartable as r

    monkeypatch.setenv("PADDLIKE_WARM_DIR", str(warm_dir))
    monkeypatch.setattr(r, "PARK_GRACE", 0.05)

    def fn() -> None:
        raise ValueError("its own")

    with pytest.raises(ValueError, match="its own"):
        restartable(fn)
    assert list(warm_dir.iterdir()) == []  # unregistered


RAISER = r"""
import paddlike.distributed as dist
def fn():
    print("fn", flush=True)
    raise ValueError("rank 1's own bug")
dist.restartable(fn)
"""


@pytest.mark.parametrize("answer", ["own", "park"])
def test_fn_raising_asks_the_launcher_and_fails_or_parks_as_it_answers(
    warm_dir: Path, answer: str
) -> None:
    """Its own exception: the worker asks ("raised"); "own" makes it fail at once with its
    traceback (not after a grace: the trial's 3 s per failure), the park signal keeps it."""
    launcher = _launcher_socket(warm_dir)
    env = {**os.environ, "PADDLIKE_WARM_DIR": str(warm_dir), "PADDLIKE_WARM_WAIT": "30"}
    proc = subprocess.Popen(
        [sys.executable, "-c", RAISER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert json.loads(launcher.recv(4096)) == {"raised": proc.pid}
        if answer == "own":
            launcher.sendto(json.dumps({"own": True}).encode(), str(warm_dir / f"{proc.pid}.sock"))
            _, err = proc.communicate(timeout=30)
            assert proc.returncode == 1, err
            assert err.rstrip().endswith("ValueError: rank 1's own bug"), err
        else:
            os.kill(proc.pid, PARK_SIGNAL)
            assert json.loads(launcher.recv(4096)) == {"parked": proc.pid}
    finally:
        proc.kill()
        proc.communicate()
        launcher.close()


def test_restartable_of_what_is_not_callable_says_so_at_once() -> None:
    with pytest.raises(TypeError, match=r"restartable\(fn\): fn must be callable"):
        restartable(3)  # type: ignore[arg-type]  (restartable(main()) instead of main)
