"""In-process restarts on one node (`paddlike.distributed.restartable`): rank 1 exits during
step 5 under --max_restarts 1; with `restartable` rank 0 is kept (same pid, the new round's
environment, one log), only rank 1 starts anew (from the zygote with --preload); cold and
--preload start both again. paddlike's CPU runtime here; torch's gloo in test_warm_torch.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from paddlike.summary import read_summary
from tests.launch.run.preload.conftest import launch
from tests.launch.run.warm.conftest import seen
from tests.support.logwait import wait_exited, wait_until

pytestmark = pytest.mark.timeout(180)

RESTART = ["--nproc_per_node", "2", "--max_restarts", "1"]


def _warm_dirs() -> set[str]:
    tmp = os.environ.get("TMPDIR") or "/tmp"
    return {n for n in os.listdir(tmp) if n.startswith("paddlike-warm-")}


def _headers(log: Path) -> list[str]:
    return [ln for ln in log.read_text().splitlines() if ln.startswith("==== paddlike run")]


def _steps(log: Path) -> list[str]:
    return [ln for ln in log.read_text().splitlines() if ln.startswith("STEP ")]


@pytest.mark.parametrize("how", ["inside", "before"])
def test_rank_0_is_kept_and_only_rank_1_starts_anew(train: Path, how: str) -> None:
    tmp = train.parent
    # the launcher's TMPDIR, its own (other tests' launchers use /tmp meanwhile): a short
    # one, which must be left empty; and one too deep for a socket's path, where the
    # launcher falls back to /tmp and must still keep rank 0
    private = Path(tempfile.mkdtemp(prefix="plk-w-")) if how == "inside" else tmp / ("d" * 60)
    private.mkdir(exist_ok=True)
    try:
        done = launch(
            tmp, *RESTART, "train.py", str(tmp / "out"), how, "paddlike",
            env={"TMPDIR": str(private)},
        )  # fmt: skip
        left = [p.name for p in private.iterdir() if p.name.startswith("paddlike-warm-")]
    finally:
        shutil.rmtree(private, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    s = seen(tmp / "out")
    assert sorted(s) == ["0.0", "0.1", "1.0", "1.1"]
    assert s["0.1"]["pid"] == s["0.0"]["pid"]  # the same process ran both rounds
    assert s["1.1"]["pid"] != s["1.0"]["pid"]
    pid = s["0.0"]["pid"]
    assert f"restart 1/1: 1 process kept (rank 0, pid {pid}), 1 started anew" in done.stderr
    assert "keeping 1 process for an in-process restart" in done.stderr
    # the kept process sees the new round as a fresh one would
    assert s["0.1"]["env"] == {**s["1.1"]["env"], "RANK": "0"}
    assert s["0.1"]["env"]["PADDLIKE_RESTART_COUNT"] == "1"
    assert s["0.1"]["env"]["TORCHELASTIC_RESTART_COUNT"] == "1"
    # one log, the new round's header written into it as for a fresh start
    log0 = tmp / "log" / "workerlog.0"
    headers = _headers(log0)
    assert [h.split(" restart ")[1].split(":")[0] for h in headers] == ["0", "1"]
    assert _steps(log0)[-1] == "STEP 7 RESTART 1"
    assert log0.read_text().rstrip().endswith("fn returned")
    summary = read_summary(tmp / "log")
    assert summary is not None and summary.status == "succeeded" and summary.restarts == 1
    (recovery,) = summary.recoveries
    assert recovery["kept"] == [{"rank": 0, "local_index": 0, "pid": pid}]
    assert [p["rank"] for p in recovery["started"]] == [1]
    assert recovery["started"][0]["pid"] == s["1.1"]["pid"]
    assert 0 <= recovery["recovery_s"] < 60
    assert [(p.rank, p.pid, p.status) for p in summary.processes] == [
        (0, pid, "ok"),
        (1, s["1.1"]["pid"], "ok"),
    ]
    assert left == []  # its directory removed
    read = subprocess.run(
        [sys.executable, "-m", "paddlike.logs", "log"], cwd=tmp, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert "  round 1: 1 process kept (rank 0), 1 started anew, running " in read.stdout


@pytest.mark.parametrize("preload", [False, True], ids=["cold", "preload"])
def test_without_restartable_every_rank_starts_anew(train: Path, preload: bool) -> None:
    tmp = train.parent
    given = ["--preload", "heavy"] if preload else []
    done = launch(tmp, *RESTART, *given, "train.py", str(tmp / "out"), "plain", "paddlike")
    assert done.returncode == 0, done.stderr
    s = seen(tmp / "out")
    assert s["0.1"]["pid"] != s["0.0"]["pid"] and s["1.1"]["pid"] != s["1.0"]["pid"]
    assert all(v["preloaded"] is preload for v in s.values())
    assert "kept" not in done.stderr
    summary = read_summary(tmp / "log")
    assert summary is not None
    (recovery,) = summary.recoveries
    assert recovery["kept"] == [] and [p["rank"] for p in recovery["started"]] == [0, 1]


def test_with_preload_the_replacement_comes_from_the_zygote(train: Path) -> None:
    tmp = train.parent
    done = launch(
        tmp, *RESTART, "--preload", "heavy", "train.py", str(tmp / "out"), "inside", "paddlike"
    )
    assert done.returncode == 0, done.stderr
    assert "--preload:" not in done.stderr  # no warning
    s = seen(tmp / "out")
    assert s["0.1"]["pid"] == s["0.0"]["pid"]
    assert s["1.1"]["pid"] != s["1.0"]["pid"]
    assert s["1.1"]["preloaded"] is True and s["0.0"]["preloaded"] is True
    assert f"1 process kept (rank 0, pid {s['0.0']['pid']})" in done.stderr


def test_a_survivors_own_exception_fails_it_as_without_restartable(train: Path) -> None:
    """Rank 0's fn raises at step 2 of every round: after the grace for a park signal that
    does not come, it fails as a plain script (rank 1 is kept for the restart, then the
    job fails with rank 0's own error)."""
    tmp = train.parent
    done = launch(tmp, *RESTART, "train.py", str(tmp / "out"), "raise", "paddlike")
    assert done.returncode == 1, done.stderr
    assert "restart 1 of 1 after: trainer rank 0 exited with code 1" in done.stderr
    assert "1 process kept (rank 1, pid" in done.stderr
    assert "ValueError: rank 0's own bug" in done.stderr
    summary = read_summary(tmp / "log")
    assert summary is not None and summary.status == "failed"
    assert summary.root_cause is not None and summary.root_cause.rank == 0
    s = seen(tmp / "out")
    assert s["1.1"]["pid"] == s["1.0"]["pid"]


SLEEPER = """
import os, sys, time
import paddlike.distributed as dist
def fn():
    open(os.path.join(sys.argv[1], f"ready.{os.environ['RANK']}"), "w").close()
    time.sleep(120)
dist.restartable(fn)
"""


def test_a_sigkilled_launchers_socket_directory_is_removed_by_its_guardian(tmp_path: Path) -> None:
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    out = tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "paddlike.launch", "--log_dir", str(tmp_path / "log"), *RESTART]
    launcher = subprocess.Popen(
        [*cmd, "sleeper.py", str(out)], cwd=tmp_path, stderr=subprocess.DEVNULL
    )
    try:
        wait_until(
            lambda: len(list(out.glob("ready.*"))) == 2,
            under=out, timeout=60, what="both ranks in fn", writer=launcher,
        )  # fmt: skip
        base = os.environ.get("TMPDIR") or "/tmp"
        (mine,) = [n for n in _warm_dirs() if n.startswith(f"paddlike-warm-{launcher.pid}-")]
        assert {p.name for p in Path(base, mine).iterdir()} >= {"launcher.sock"}
        sid = os.getsid(launcher.pid)  # the guardian is forked: the launcher's session
        guardian = [pid for pid in _children(launcher.pid) if os.getsid(pid) == sid]
        workers = [pid for pid in _children(launcher.pid) if pid not in guardian]
        assert len(guardian) == 1 and len(workers) == 2
        launcher.kill()
        launcher.wait(timeout=30)
        assert wait_exited(guardian + workers, timeout=30) == []
        assert not Path(base, mine).exists()
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def _children(parent: int) -> list[int]:
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(name))
    return found


def test_rank_1_raising_its_own_exception_fails_at_once_and_rank_0_is_kept(train: Path) -> None:
    """The user trial's case: an uncaught exception in fn (not a crash). Rank 1 asks, is
    told it is the round's first failure and exits with its traceback at once; rank 0, whose
    collective then breaks, asks too, gets no such answer and is parked and kept."""
    tmp = train.parent
    done = launch(tmp, *RESTART, "train.py", str(tmp / "out"), "raise1", "paddlike")
    assert done.returncode == 0, done.stderr
    s = seen(tmp / "out")
    assert s["0.1"]["pid"] == s["0.0"]["pid"] and s["1.1"]["pid"] != s["1.0"]["pid"]
    assert "trainer rank 1 exited with code 1: RuntimeError: rank 1 fails at step 5" in done.stderr
    assert f"1 process kept (rank 0, pid {s['0.0']['pid']}), 1 started anew" in done.stderr
    log1 = (tmp / "log" / "workerlog.1").read_text()
    assert "RuntimeError: rank 1 fails at step 5" in log1

