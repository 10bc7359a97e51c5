"""Is a process the summary says runs still there (paddlike/logs/alive.py)? Not when it
exited, not when it is a zombie nobody reaped, not when its pid now names a later process."""

from __future__ import annotations

import subprocess
import sys
import time

from paddlike.logformat import owner_record, write_owner
from paddlike.logs.alive import launcher_alive, pid_alive
from tests.support.logwait import wait_exited


def test_a_live_process_is_alive_and_a_zombie_or_a_reused_pid_is_not():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)  # fmt: skip
    try:
        recorded = time.time()  # as the launcher records a worker's start: just before it
        assert pid_alive(child.pid, recorded)
        assert pid_alive(child.pid)
        # a record from an hour before this process began: the pid was reused since
        assert not pid_alive(child.pid, recorded - 3600)
        child.stdin.close()  # it exits; unreaped, it stays a zombie
        assert wait_exited([child.pid], timeout=10) == [], "the child did not exit in 10 s"
        assert not pid_alive(child.pid)
        assert child.poll() is not None  # it was a zombie until now: we reap it here
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    assert not pid_alive(child.pid) and not pid_alive(None) and not pid_alive(0)


def test_the_launcher_is_alive_while_its_owner_file_names_a_live_process(tmp_path):
    assert not launcher_alive(tmp_path)  # no owner file: no launcher holds it
    write_owner(tmp_path, owner_record("127.0.0.1"))  # this process, as the holder
    assert launcher_alive(tmp_path)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    write_owner(tmp_path, {"pid": int(done.stdout), "since": time.time()})
    assert not launcher_alive(tmp_path)
