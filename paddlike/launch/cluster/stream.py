"""Every host's console on this one, a line at a time, each line prefixed ``[host] ``.

`Consoles` owns the started sessions' pipes and process fds and is the starter's one
event loop (`run.childloop`, the supervisor's too): `wait` returns when a session exits,
a signal arrives (the wakeup fd) or the nearest deadline passes; lines are copied out as
they come (stdout to stdout, stderr to stderr), and a partial line waits for its end (or
for its session's end).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Sequence

from paddlike.launch import NamedTuple
from paddlike.launch.run.childloop import EXIT, WAKE, ChildLoop

# pdsh's output carries the host in each line: a session may name the host per line
LineHost = Callable[[bytes], "tuple[str, bytes] | None"]


class Session:
    """One started command (an ssh to one host, or pdsh for all) and its output."""

    def __init__(
        self,
        host: str,
        proc: subprocess.Popen[bytes],
        line_host: LineHost | None = None,
        *,
        ended_by_sigterm: bool = False,
    ) -> None:
        self.host = host
        self.proc = proc
        self.line_host = line_host
        # how the job is ended through this session: its stdin closed (ssh: the remote
        # launcher's stdin reaches EOF), or SIGTERM (pdsh: its sessions' stdins are its own)
        self.ended_by_sigterm = ended_by_sigterm
        self.returncode: int | None = None
        self.pidfd = os.pidfd_open(proc.pid)
        self.partial: dict[int, bytes] = {}

    def end(self) -> None:
        """Ask this session's launchers to end the job (`eofwatch` on their side)."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        if self.ended_by_sigterm and self.proc.poll() is None:
            self.proc.terminate()

    def signal(self, signum: int) -> bool:
        """`signum` to this session's launcher: a line on its stdin (`eofwatch`); False
        when the stdin is closed already or the session is gone."""
        from paddlike.launch.cluster.eofwatch import signal_line

        stdin = self.proc.stdin
        if stdin is None or stdin.closed or self.proc.poll() is not None:
            return False
        try:
            os.set_blocking(stdin.fileno(), False)  # a stuck ssh never blocks the loop
            return os.write(stdin.fileno(), signal_line(signum)) > 0
        except (BlockingIOError, BrokenPipeError):
            return False

    def prefixed(self, line: bytes) -> bytes:
        if self.line_host is not None:
            split = self.line_host(line)
            if split is not None:
                return b"[" + split[0].encode() + b"] " + split[1]
            return line
        return b"[" + self.host.encode() + b"] " + line


# A launcher's report of the job's root cause: the head line, then indented fields.
REPORT_HEADS = (b"FAILED: ", b"STOPPED: ")
REPORT_FIELDS = ("where ", "log ")  # the fields the starter's last line repeats


class Events(NamedTuple):
    exited: list[Session]
    signals: list[int]


class Consoles:
    """The loop over every session's output and exit, and the signal wakeup fd."""

    def __init__(self, sessions: Sequence[Session], wake_fd: int, out: int = 1, err: int = 2):
        self.sessions = list(sessions)
        self.out, self.err = out, err
        self.loop = ChildLoop(wake_fd)
        # the first root-cause report any host printed (every host prints the same one):
        # the starter's last line repeats it once (`root_cause`)
        self.report: list[str] = []
        self._reporting: Session | None = None
        for s in self.sessions:
            self.loop.add_child(s.pidfd, s)
            for pipe, dest in ((s.proc.stdout, out), (s.proc.stderr, err)):
                if pipe is not None:
                    os.set_blocking(pipe.fileno(), False)
                    self.loop.add(pipe.fileno(), "out", (s, dest))

    @property
    def running(self) -> list[Session]:
        return [s for s in self.sessions if s.returncode is None]

    def wait(self, *deadlines: float | None) -> Events:
        """What happened by the nearest of `deadlines` (`time.monotonic()` times, None for
        none): the sessions that exited (their output drained), the signals caught."""
        events = Events([], [])
        for kind, what, fd in self.loop.wait(*deadlines):
            if fd not in self.loop:
                continue  # closed by an earlier event of this batch (a session's exit)
            if kind == WAKE:
                with contextlib.suppress(BlockingIOError):
                    events.signals.extend(os.read(fd, 64))
            elif kind == "out":
                self._copy(fd, *what)
            elif kind == EXIT:
                self.loop.remove(fd)
                what.returncode = what.proc.wait()
                self._drain(what)
                events.exited.append(what)
        return events

    def _copy(self, fd: int, session: Session, dest: int) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not data:
            self._copy_eof(fd, session, dest)
            return
        session.partial[fd] = session.partial.get(fd, b"") + data
        self._flush_lines(fd, session, dest)

    def _drain(self, session: Session) -> None:
        """A session that exited: what is still in its pipes (the pipes' writers are gone
        with ssh, unless an ssh master still holds them: then they close with it)."""
        for pipe, dest in ((session.proc.stdout, self.out), (session.proc.stderr, self.err)):
            if pipe is None:
                continue
            fd = pipe.fileno()
            while fd in self.loop:
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if not data:
                    self._copy_eof(fd, session, dest)
                    break
                session.partial[fd] = session.partial.get(fd, b"") + data
                self._flush_lines(fd, session, dest)

    def _flush_lines(self, fd: int, session: Session, dest: int) -> None:
        lines = session.partial.pop(fd, b"").split(b"\n")
        session.partial[fd] = lines.pop()
        if lines:
            if dest == self.err:
                self._note_report(session, lines)
            _write_all(dest, b"".join(session.prefixed(line + b"\n") for line in lines))

    def _note_report(self, session: Session, lines: list[bytes]) -> None:
        for line in lines:
            if self._reporting is session and line.startswith(b"  ") and line.strip():
                field = " ".join(line.decode(errors="replace").split())
                if field.startswith(REPORT_FIELDS):
                    self.report.append(field)
                continue
            if self._reporting is session:
                self._reporting = None  # the block ended: the first one is kept
            if not self.report and line.startswith(REPORT_HEADS):
                self.report.append(line.decode(errors="replace"))
                self._reporting = session

    @property
    def root_cause(self) -> str | None:
        """The first root-cause report in one line: ``FAILED: ... (where ...; log ...)``."""
        if not self.report:
            return None
        head, *fields = self.report
        return f"{head} ({'; '.join(fields)})" if fields else head

    def _copy_eof(self, fd: int, session: Session, dest: int) -> None:
        """Once per fd: a session's exit drains its pipes, and the same select() batch may
        still hold their end-of-file events (then already done)."""
        if fd not in self.loop:
            return
        self.loop.remove(fd)
        rest = session.partial.pop(fd, b"")
        if rest:
            _write_all(dest, session.prefixed(rest + b"\n"))

    def close(self) -> None:
        """Flush partial lines, close every fd this loop owns."""
        for s in self.sessions:
            for pipe, dest in ((s.proc.stdout, self.out), (s.proc.stderr, self.err)):
                if pipe is not None and pipe.fileno() in self.loop:
                    self._copy_eof(pipe.fileno(), s, dest)
            if s.pidfd in self.loop:
                self.loop.remove(s.pidfd)
            os.close(s.pidfd)
        self.loop.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            continue
        except BrokenPipeError:
            return  # `... | head`: the reader has what it wanted; the job goes on
