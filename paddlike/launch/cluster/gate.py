"""The check of every host and the start, in one ssh session per host.

Each host's session runs `remote.gated_script` (read by sh from its stdin): the check, a
READY line, then a wait for GO. `wait_ready` watches every session until each has said
READY, has failed (ssh's message or the check's exit code, as one line naming the host),
the deadline passed or a signal arrived; only when every host is ready does `start` send
GO to all. So nothing starts on any host unless every host can start, and the job costs
each host one ssh session (over its new master connection), not a check and then a
second session.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from paddlike.launch.cluster.remote import GO, READY, check_failure, launcher_refusal
from paddlike.launch.cluster.ssh import SSH_FAILED, ssh_failure
from paddlike.launch.cluster.stream import Session
from paddlike.launch.run.childloop import EXIT, WAKE, ChildLoop


class Verdict:
    """What `wait_ready` found: problems (one line each, host order) or a signal."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.signal: int | None = None
        self.stderr: dict[str, bytes] = {}  # ssh's warnings of hosts that passed


def wait_ready(
    sessions: Sequence[Session],
    wake_fd: int,
    timeout: float,
    cwd: str,
    python: str,
    script: str | None,
) -> Verdict:
    """Until every session is READY or has failed, the deadline, or a signal."""
    verdict = Verdict()
    out: dict[str, bytes] = {s.host: b"" for s in sessions}
    err: dict[str, bytes] = {s.host: b"" for s in sessions}
    failed: dict[str, str] = {}
    pending = {s.host for s in sessions}
    deadline = time.monotonic() + timeout
    with ChildLoop(wake_fd) as loop:
        for s in sessions:
            for pipe, store in ((s.proc.stdout, out), (s.proc.stderr, err)):
                assert pipe is not None
                os.set_blocking(pipe.fileno(), False)
                loop.add(pipe.fileno(), "out", (s, store))
            loop.add_child(s.pidfd, s)
        while pending:
            if time.monotonic() >= deadline:
                for host in pending:
                    failed[host] = f"host {host}: no answer from ssh within {timeout:g} s"
                break
            for kind, what, fd in loop.wait(deadline):
                if kind == WAKE:
                    signals = os.read(wake_fd, 64)
                    if signals:
                        verdict.signal = signals[0]
                        return verdict
                    continue
                if kind == EXIT:  # the session ended before GO: its check failed
                    session = what
                    loop.remove(fd)
                    code = session.proc.wait()
                    _read_rest(session, out, err)
                    if session.host in pending:
                        pending.discard(session.host)
                        failed[session.host] = _problem(
                            session.host, code, err[session.host], cwd, python, script
                        )
                    continue
                session, store = what
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not data:
                    loop.remove(fd)
                    continue
                store[session.host] += data
                if store is out and READY in out[session.host]:
                    pending.discard(session.host)
    order = [s.host for s in sessions]
    verdict.problems = [failed[h] for h in order if h in failed]
    verdict.stderr = {h: err[h] for h in order if h not in failed and err[h]}
    return verdict


def _read_rest(session: Session, out: dict[str, bytes], err: dict[str, bytes]) -> None:
    for pipe, store in ((session.proc.stdout, out), (session.proc.stderr, err)):
        assert pipe is not None
        try:
            while data := os.read(pipe.fileno(), 65536):
                store[session.host] += data
        except BlockingIOError:
            pass


def _problem(host: str, code: int, stderr: bytes, cwd: str, python: str, script: str | None) -> str:
    if code == SSH_FAILED:
        return ssh_failure(host, stderr.decode(errors="replace"))
    if not 201 <= code <= 205:  # the held launcher's own refusal (its error line)
        refused = launcher_refusal(code, stderr.decode(errors="replace"), python)
        if refused:
            return f"host {host}: {refused}"
    failure = check_failure(code, cwd, python, script)
    return f"host {host}: {failure or f'the session ended with {code} before the start'}"


def start(sessions: Sequence[Session]) -> None:
    """GO to every host (each was READY)."""
    for s in sessions:
        assert s.proc.stdin is not None
        s.proc.stdin.write(GO)
        s.proc.stdin.flush()
