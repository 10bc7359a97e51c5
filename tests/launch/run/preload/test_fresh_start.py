"""--preload: a worker forked from the zygote sees what a fresh interpreter started by the
launcher sees (argv, __file__, __name__, sys.path[0], environment, cwd, stdin, signals,
process group and session, parent and its parent-death signal), and ends the same way
(exit code, traceback, a signal death)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from paddlike.summary import read_summary
from tests.launch.run.preload.conftest import launch, probes

pytestmark = pytest.mark.timeout(180)

# differ from one job to the next, cold or preloaded alike
PER_JOB = ("PADDLE_JOB_ID", "PADDLIKE_JOB_ID", "PADDLIKE_JOB_TOKEN", "TORCHELASTIC_RUN_ID")
PER_JOB_WORDS = ("PORT", "ENDPOINT", "MASTER")  # free ports, chosen per job


def _seen(tmp: Path, *args: str, env: dict[str, str] | None = None, **how) -> dict:
    done = launch(tmp, "--nproc_per_node", "2", *args, env=env, **how)
    assert done.returncode == 0, done.stderr
    seen = probes(tmp)
    assert sorted(seen) == ["0.0", "1.0"], seen.keys()
    for path in (tmp / "out").glob("probe.*"):
        path.unlink()
    return seen


def _comparable(seen: dict) -> dict:
    env = {
        k: "<per job>" if k in PER_JOB or any(w in k for w in PER_JOB_WORDS) else v
        for k, v in seen["env"].items()
    }
    timing = {"ppid": None, "pid": None, "preloaded": None, "launcher_zombies": None}
    return {**seen, "env": env, **timing}


@pytest.mark.parametrize("module", [False, True], ids=["script", "dash-m"])
def test_a_preloaded_worker_sees_what_a_cold_one_sees(scripts: Path, module: bool) -> None:
    target = ["-m", "probe"] if module else [str(Path("probe.py"))]
    run_args = [*target, str(scripts / "out"), "exit:0"]
    cold = _seen(scripts, *run_args)
    warm = _seen(scripts, "--preload", "heavy", *run_args)
    for rank in ("0.0", "1.0"):
        assert not cold[rank]["preloaded"] and warm[rank]["preloaded"]
        a, b = _comparable(cold[rank]), _comparable(warm[rank])
        differing = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
        assert differing == {}
        assert warm[rank]["own_group"] and warm[rank]["own_session"]
        assert warm[rank]["pdeathsig"] == 9
        assert warm[rank]["name"] == "__main__"


def test_a_preloaded_worker_gets_the_ranks_pythonpath_and_hang_probe_as_a_cold_one(
    scripts: Path,
) -> None:
    """--hang_timeout puts its probe first on the workers' PYTHONPATH (a sitecustomize a
    fresh interpreter imports at start-up); the zygote started without it."""
    lib = scripts / "lib"
    lib.mkdir()
    run_args = ["--hang_timeout", "60", "probe.py", str(scripts / "out"), "exit:0"]
    cold = _seen(scripts, *run_args, env={"PYTHONPATH": str(lib)})
    warm = _seen(scripts, "--preload", "heavy", *run_args, env={"PYTHONPATH": str(lib)})
    for rank in ("0.0", "1.0"):
        assert warm[rank]["preloaded"]
        assert cold[rank]["sitecustomize"].endswith("worker_probe/sitecustomize.py")
        for key in ("sys_path", "sitecustomize", "signals"):
            assert warm[rank][key] == cold[rank][key], key
        assert warm[rank]["env"]["PYTHONPATH"] == cold[rank]["env"]["PYTHONPATH"] == str(lib)


def test_a_launcher_started_with_signals_ignored_gives_both_kinds_of_worker_the_same(
    scripts: Path,
) -> None:
    """A launcher in the background of a script under nohup starts with SIGINT, SIGQUIT and
    SIGHUP ignored; the zygote inherits that, yet a forked worker gets what an exec'd one
    gets (here it was once SIGINT ignored, deaf to Ctrl-C, against Python's handler)."""
    run_args = ["probe.py", str(scripts / "out"), "exit:0"]
    ignoring = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
    cold = _seen(scripts, *run_args, ignoring=ignoring)
    warm = _seen(scripts, "--preload", "heavy", *run_args, ignoring=ignoring)
    for rank in ("0.0", "1.0"):
        assert warm[rank]["preloaded"]
        assert warm[rank]["signals"] == cold[rank]["signals"]


def test_the_preloaded_worker_is_the_launchers_child(scripts: Path) -> None:
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "paddlike.launch", "--log_dir", str(scripts / "log")]
    cmd += ["--preload", "heavy", "probe.py", str(scripts / "out"), "exit:0"]
    launcher = subprocess.Popen(cmd, cwd=scripts, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _, err = launcher.communicate(timeout=90)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, err
    assert probes(scripts)["0.0"]["ppid"] == launcher.pid


@pytest.mark.parametrize(
    ("how", "code", "signal", "in_log"),
    [
        ("exit:7", 7, None, None),
        ("raise", 1, None, "ValueError: the probe raises"),
        ("kill:SIGSEGV", 139, "SIGSEGV", None),
        ("interrupt", 130, "SIGINT", "KeyboardInterrupt"),
        ("exit-text", 1, None, "the probe says why"),
    ],
)
def test_a_preloaded_worker_ends_as_a_fresh_interpreter_would(
    scripts: Path, how: str, code: int, signal: str | None, in_log: str | None
) -> None:
    done = launch(scripts, "--preload", "heavy", "probe.py", str(scripts / "out"), how)
    assert done.returncode == code, done.stderr
    summary = read_summary(scripts / "log")
    assert summary is not None
    worker = summary.processes[0]
    assert (worker.exit_code, worker.signal) == ((None, signal) if signal else (code, None))
    log = (scripts / "log" / "workerlog.0").read_text()
    if in_log is not None:
        assert in_log in log
    if how == "raise":  # the script's frames only, as a fresh interpreter prints them
        trace = log[log.index("Traceback (most recent call last):") :].splitlines()
        assert trace[1].startswith(f'  File "{scripts / "probe.py"}", line ')
        assert trace[-1] == "ValueError: the probe raises"


def test_killing_the_launcher_takes_preloaded_workers_and_the_zygote_along(scripts: Path) -> None:
    import signal as signals
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "paddlike.launch", "--log_dir", str(scripts / "log")]
    cmd += ["--preload", "heavy", "probe.py", str(scripts / "out"), "sleep"]
    launcher = subprocess.Popen(cmd, cwd=scripts, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not probes(scripts) and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.05)  # nothing to wait on: the worker's file appears
        worker = probes(scripts)["0.0"]["pid"]
        zygotes = [p for p in _children_running(launcher.pid, b"zygote.py") if p != worker]
        assert len(zygotes) == 1
    finally:
        launcher.send_signal(signals.SIGKILL)
        launcher.wait()
    for pid in (worker, *zygotes):
        assert _gone_within(pid, 10.0), f"pid {pid} outlived its launcher"


def _children_running(parent: int, marker: bytes) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if ppid == parent and marker in cmd:
            found.append(int(pid))
    return found


def _gone_within(pid: int, seconds: float) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False
