"""`paddlike.logs --stacks` asks a running launcher with SIGRTMIN+4 (never SIGUSR1, which
may be the workers'), and waits for the dump it writes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from paddlike.logs import ask

# A stand-in launcher: on SIGRTMIN+4 (and only on it) it writes a dump as the launcher does
# (stacks.json last); SIGUSR1 is ignored, as by a launcher that passes it on to its workers.
STAND_IN = textwrap.dedent(
    """
    import signal, sys
    from pathlib import Path
    root = Path(sys.argv[1])
    trigger = signal.SIGRTMIN + 4
    signal.pthread_sigmask(signal.SIG_BLOCK, {trigger})
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    print("ready", flush=True)
    if sys.argv[2] == "dump":
        signal.sigwait({trigger})
        dump = root / "stacks" / "t1"
        dump.mkdir(parents=True)
        (dump / "stacks.json").write_text("{}")
    else:
        sys.stdin.read()  # until the test closes it
    """
)


def _stand_in(tmp_path, mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, str(tmp_path), mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"  # its handlers are in place
    return proc


def test_ask_launcher_sends_sigrtmin_4_and_returns_the_dump_it_wrote(tmp_path):
    proc = _stand_in(tmp_path, "dump")
    try:
        assert ask.ask_launcher(tmp_path, proc.pid, wait=20) == tmp_path / "stacks" / "t1"
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_a_launcher_that_writes_nothing_is_one_line_naming_the_signal(tmp_path):
    proc = _stand_in(tmp_path, "silent")
    try:
        got = ask.ask_launcher(tmp_path, proc.pid, wait=0.3)
        assert got == (
            f"launcher pid {proc.pid} wrote no stacks within 0.3 s of SIGRTMIN+4 "
            "(is it between rounds?); taking them directly"
        )
        assert proc.poll() is None  # the signal was blocked, not fatal: it was that one
    finally:
        proc.kill()
        proc.communicate(timeout=10)
