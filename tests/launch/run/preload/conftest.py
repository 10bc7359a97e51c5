"""Scripts and modules for the --preload tests, written into each test's directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# stands in for torch and the model libraries: 2 s at import
HEAVY = "import time\ntime.sleep(float(__import__('os').environ.get('HEAVY_SECONDS', '2')))\n"
THREADED = """import threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True, name="warmup").start()
"""

# What the script sees, as JSON in OUT/probe.<rank>.<restart>.json; then it ends as
# argv[2] says: exit:N, raise, kill:SIGNAL, or steps:N (rank 1 exits 3 during step 5 of
# the first round).
PROBE = r"""
import json, os, signal, sys, ctypes
preloaded = "heavy" in sys.modules
import heavy
libc = ctypes.CDLL(None)
pdeathsig = ctypes.c_int()
libc.prctl(2, ctypes.byref(pdeathsig), 0, 0, 0)  # PR_GET_PDEATHSIG
skip = (signal.SIGKILL, signal.SIGSTOP)
seen = {
    "argv": sys.argv, "orig_argv": sys.orig_argv[1:], "file": __file__, "name": __name__,
    "path0": sys.path[0], "cwd": os.getcwd(), "env": dict(os.environ), "stdin": sys.stdin.read(),
    "signals": {s.name: repr(signal.getsignal(s)) for s in signal.Signals if s not in skip},
    "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "own_group": os.getpgid(0) == os.getpid(), "own_session": os.getsid(0) == os.getpid(),
    "ppid": os.getppid(), "pdeathsig": pdeathsig.value, "globals": sorted(globals()),
    "spec": __spec__ and [__spec__.name, __spec__.origin], "package": __package__,
    "loader": type(__loader__).__name__,
    "main": sys.modules["__main__"].__dict__ is globals(), "preloaded": preloaded,
    "pid": os.getpid(), "sys_path": sys.path,
    "sitecustomize": getattr(sys.modules.get("sitecustomize"), "__file__", None),
}
def zombies_of(parent):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            state, ppid = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if int(ppid) == parent and state == "Z":
            found.append(int(pid))
    return found
seen["launcher_zombies"] = zombies_of(os.getppid())
rank, restart = os.environ["RANK"], os.environ["PADDLIKE_RESTART_COUNT"]
if (sys.argv[2] if len(sys.argv) > 2 else "") == "steps-orphan" and restart == "0":
    import subprocess
    subprocess.Popen(["sleep", "60"])  # in the worker's group: the teardown ends it too
path = os.path.join(sys.argv[1], f"probe.{rank}.{restart}.json")
with open(path + ".tmp", "w") as f:
    json.dump(seen, f)
os.replace(path + ".tmp", path)  # whole, for a test that reads it while this runs
how = sys.argv[2] if len(sys.argv) > 2 else "exit:0"
if how.startswith("exit:"):
    sys.exit(int(how[5:]))
if how == "raise":
    raise ValueError("the probe raises")
if how == "interrupt":
    raise KeyboardInterrupt
if how == "exit-text":
    sys.exit("the probe says why")
if how.startswith("kill:"):
    os.kill(os.getpid(), getattr(signal, how[5:]))
if how == "sleep":
    import time
    time.sleep(120)
if how.startswith("steps"):
    import time
    for step in range(8):
        print("STEP", step, "RESTART", restart, flush=True)
        if rank == "1" and restart == "0" and step == 5:
            # only once rank 0 has written what it saw (else the teardown may come first)
            end = time.monotonic() + 60
            mine = os.path.join(sys.argv[1], "probe.0.0.json")
            while not os.path.exists(mine) and time.monotonic() < end:
                time.sleep(0.01)
            if how == "steps-kill-zygote":  # the launcher's other child: the zygote
                for pid in filter(str.isdigit, os.listdir("/proc")):
                    try:
                        cmd = open(f"/proc/{pid}/cmdline", "rb").read()
                        ppid = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
                    except OSError:
                        continue
                    if b"zygote.py" in cmd and int(ppid) == os.getppid():
                        os.kill(int(pid), signal.SIGKILL)
            sys.exit(3)
        time.sleep(0.05)
"""


def write_scripts(tmp: Path) -> Path:
    (tmp / "heavy.py").write_text(HEAVY)
    (tmp / "threaded.py").write_text(THREADED)
    (tmp / "probe.py").write_text(PROBE)
    (tmp / "out").mkdir()
    return tmp / "probe.py"


def launch(
    tmp: Path,
    *args: str,
    script: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 90,
    ignoring: tuple[signal.Signals, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """`python -m paddlike.launch ARGS script OUT ...` in `tmp`; `args` end with the script's.
    `ignoring`: signals the launcher starts with ignored (as under nohup, in the background)."""
    cmd = [sys.executable, "-m", "paddlike.launch", "--log_dir", str(tmp / "log"), *args]
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environ.update(env or {})

    def ignore() -> None:
        for sig in ignoring:
            signal.signal(sig, signal.SIG_IGN)

    return subprocess.run(
        cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout, env=environ,
        preexec_fn=ignore if ignoring else None,
    )  # fmt: skip


def probes(tmp: Path) -> dict[str, dict]:
    """probe.<rank>.<restart>.json of every worker, by "<rank>.<restart>"."""
    found = {}
    for path in sorted((tmp / "out").glob("probe.*.json")):
        found[path.name[len("probe.") : -len(".json")]] = json.loads(path.read_text())
    return found


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    write_scripts(tmp_path)
    return tmp_path
