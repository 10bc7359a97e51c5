"""The launcher's side of --preload: start the zygote, learn whether its modules exist and
whether forking after them is safe, and start workers as its forks.

Why the launcher becomes a child subreaper (PR_SET_CHILD_SUBREAPER) rather than the zygote
reporting its children's exits: a worker forked through a middle process that exits at
once is reparented to the launcher, so the launcher waits for it on a pidfd, keeps it a
zombie until the round ends (its process-group id cannot be reused), reaps it and gets the
kernel's own exit status, exactly as for a worker it started itself; its parent-death
signal is tied to the launcher as today. The zygote holds nothing about running workers,
so the zygote dying costs only the later starts (cold from then on, with one warning line).
The price of being a subreaper: a worker's orphaned children (a data loader's processes
after the worker died) become the launcher's, so the launcher reaps those it finds
(`reap_strays`, at each round's start).

    Preload.start(...)     -> Preload, or PreloadMissing (exit 2, nothing started)
    preload.wait_ready()   the imports done: True; unsafe or gone: False, one warning
    preload.spawn(...)     -> ForkedWorker (Popen's pid, returncode, wait, poll) | None (cold)
    preload.close()
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from paddlike.launch.run.linux import parent_death_preexec
from paddlike.launch.run.preload import fresh, wire
from paddlike.launch.run.preload.lookup import missing_module, same_interpreter, search_path

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.plan.plan import ProcessSpec
    from paddlike.launch.run.logdir import WorkerLog

ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")
FOUND_TIMEOUT = 60.0  # the zygote's start and its look-up of the modules (no import)
READY_TIMEOUT = 600.0  # the imports (torch and model libraries: seconds to a minute)
REPLY_TIMEOUT = 30.0  # one fork
STRAY_WAIT = 1.0  # for a worker's SIGKILLed children to end, before a new round
_PR_SET_CHILD_SUBREAPER = 36


class PreloadMissing(Exception):
    """A --preload module that the script's imports would not find."""


def become_subreaper() -> None:
    """Orphans below this process come to it (the zygote's forks: the workers)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


class ForkedWorker:
    """A worker the zygote forked and the launcher now parents: what the supervisor and the
    teardown use of a Popen (pid, returncode, wait, poll)."""

    def __init__(self, pid: int, args: Sequence[str], on_reaped: Callable[[int], None]) -> None:
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        self._on_reaped = on_reaped

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._reaped(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        if timeout is not None:
            pidfd = os.pidfd_open(self.pid)
            try:
                readable, _, _ = select.select([pidfd], [], [], timeout)
            finally:
                os.close(pidfd)
            if not readable:
                raise subprocess.TimeoutExpired(self.args, timeout)
        _, status = os.waitpid(self.pid, 0)
        self._reaped(status)
        return self.returncode  # type: ignore[return-value]

    def _reaped(self, status: int) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)  # negative: that signal
        self._on_reaped(self.pid)


class Preload:
    """One zygote for the job on this node (module docstring)."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        sock: object,
        modules: Sequence[str],
        warn: Callable[[str], None],
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.popen = popen
        self.sock = sock
        self.modules = tuple(modules)
        self.cold: str | None = None  # why workers start cold now (None: preloaded)
        self.ready = False
        self.import_seconds: float | None = None
        self._sessions: set[int] = set()  # every worker forked: its session id is its pid
        self._running: set[int] = set()  # forked and not reaped yet
        self._warn: Callable[[str], None] = warn
        self._say = say
        self._found_read = False  # the zygote's look-up answer read
        self._closed = False  # its end of the socket closed (it exited, or is exiting)

    @classmethod
    def start(
        cls,
        modules: Sequence[str],
        argv: Sequence[str],
        environ: Mapping[str, str],
        *,
        warn: Callable[[str], None],
        say: Callable[[str], None] = lambda line: None,
        cwd: str | None = None,
    ) -> Preload:
        """Start the zygote with the workers' interpreter and environment; it answers at once
        whether every module exists (PreloadMissing: one that does not), then imports."""
        workdir = cwd or os.getcwd()
        looked_up = same_interpreter(argv[0])
        if looked_up:  # at once, here: the zygote's answer would wait for its start-up
            path = search_path(argv, workdir, environ)
            missing = missing_module(modules, path)
            if missing is not None:
                raise PreloadMissing(missing_line(missing, path))
        become_subreaper()  # before the zygote is forked: its forks inherit the search
        ours, theirs = wire.pair()
        try:
            popen = subprocess.Popen(
                [argv[0], "-u", ZYGOTE, str(theirs.fileno())],
                env=dict(environ),
                stdin=subprocess.DEVNULL,
                stdout=2,  # what a module prints at import goes to the launcher's stderr
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # the terminal's Ctrl-C is the launcher's to handle
                preexec_fn=parent_death_preexec(),
            )
        finally:
            theirs.close()
        preload = cls(popen, ours, modules, warn, say)
        wire.send(ours, {"modules": list(modules), "argv": list(argv), "cwd": workdir})
        if not looked_up:
            preload._check_found()
        return preload

    def _check_found(self) -> None:
        """The zygote's look-up: PreloadMissing, or on (cold, when it did not answer)."""
        self._found_read = True
        answer = self._answer(FOUND_TIMEOUT)
        if answer is not None and "missing" in answer:
            self.close()
            raise PreloadMissing(missing_line(answer["missing"], answer.get("path", [])))
        if answer is None or "found" not in answer:
            self._go_cold(self._gone("before it looked up the modules"))

    # -- the zygote's answers --

    def _answer(self, timeout: float) -> dict | None:
        """The zygote's next message; None when it died or did not answer in time."""
        sock = self.sock
        sock.settimeout(timeout)  # type: ignore[attr-defined]
        try:
            message, fds = wire.receive(sock)  # type: ignore[arg-type]
        except (TimeoutError, OSError):
            return None
        for fd in fds:
            os.close(fd)
        if message is None:
            self._closed = True
        return message

    def _gone(self, when: str) -> str:
        if self._closed:  # its end closed as it exited: how it ended comes a moment later
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=2.0)
        code = self.popen.poll()
        if code is None:
            return f"the preload zygote (pid {self.popen.pid}) did not answer {when}"
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        return f"the preload zygote (pid {self.popen.pid}) ended ({how}) {when}"

    def _go_cold(self, why: str) -> None:
        if self.cold is None:
            self.cold = why
            self._warn(f"--preload: {why}; workers start cold")
            self.close()

    def wait_ready(self) -> bool:
        """Before a round's workers start: the imports done and safe (True), or one warning
        and cold starts (False). Also reaps the orphans a previous round left here."""
        self.reap_strays()
        if self.cold is not None or self.ready:
            return self.ready
        if not self._found_read:  # the launcher found them; the zygote agrees, or says why not
            try:
                self._check_found()
            except PreloadMissing as exc:
                self._go_cold(str(exc))
            if self.cold is not None:
                return False
        answer = self._answer(READY_TIMEOUT)
        if answer is not None and "ready" in answer:
            self.ready = True
            self.import_seconds = float(answer["ready"])
            self._say(
                f"preloaded {', '.join(self.modules)} in {self.import_seconds:.2f} s (zygote pid "
                f"{self.popen.pid}): workers start as its forks"
            )
            return True
        if answer is not None and "unsafe" in answer:
            self._go_cold(f"not safe to fork after the imports: {answer['unsafe']}")
        else:
            self._go_cold(self._gone("while it imported the modules"))
        return False

    # -- workers --

    def spawn(
        self, spec: ProcessSpec, env: Mapping[str, str], log: WorkerLog
    ) -> ForkedWorker | None:
        """The worker as a fork of the zygote; None (start it cold) when the zygote is not
        ready or is gone (then one warning, and every later start is cold too)."""
        if not self.ready or self.cold is not None:
            return None
        request = {
            "argv": list(spec.argv),
            "env": dict(env),
            "cwd": os.getcwd(),
            "cpus": list(spec.cpus),
            "memory_node": spec.numa_nodes[0] if spec.numa_nodes else None,
            "launcher": os.getpid(),
            "ignored": _ignored(),  # what a cold start would inherit ignored
        }
        try:
            wire.send(self.sock, request, (log.stdout, log.stderr))  # type: ignore[arg-type]
        except OSError:
            self._closed = True
            self._go_cold(self._gone(f"when {spec.label} was to start"))
            return None
        answer = self._answer(REPLY_TIMEOUT)
        if answer is None or "pid" not in answer:
            why = answer.get("error") if answer else None
            self._go_cold(
                f"the preload zygote could not fork {spec.label}: {why}"
                if why
                else self._gone(f"when {spec.label} was to start")
            )
            return None
        pid = int(answer["pid"])
        self._sessions.add(pid)
        self._running.add(pid)
        return ForkedWorker(pid, spec.argv, self._running.discard)

    def reap_strays(self) -> None:
        """Reap what the workers started and left: processes of their sessions that came
        here as the subreaper's, dead, or in a worker's process group (SIGKILLed with it at
        the round's end: waited for up to STRAY_WAIT in all). A process that left its
        worker's group and still runs is left alone (reaped once it ends, a round later)."""
        deadline = time.monotonic() + STRAY_WAIT
        for pid, state, group, session in _children(os.getpid()):
            if session not in self._sessions or pid in self._running:
                continue
            if state != "Z" and group in self._sessions:
                with contextlib.suppress(OSError):
                    pidfd = os.pidfd_open(pid)
                    try:
                        select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))
                    finally:
                        os.close(pidfd)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)

    def close(self) -> None:
        """The zygote ends when its end of the socket closes; reaped (killed after 5 s).
        One not ready (still importing: a signal came first) reads no socket: killed now,
        not waited for until its imports end."""
        with contextlib.suppress(OSError):
            self.sock.close()  # type: ignore[attr-defined]
        if not self.ready and self.popen.poll() is None:
            self.popen.kill()
        try:
            self.popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def missing_line(name: str, path: Sequence[str]) -> str:
    where = ", ".join(p or "''" for p in list(path)[:3])
    return (
        f"--preload: no module named {name!r} (searched as the script's imports would: "
        f"{where}, ...)"
    )


def _children(parent: int) -> list[tuple[int, str, int, int]]:
    """(pid, state, process group, session) of every child of `parent`, from /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2 :].split()  # state ppid pgrp session ...
            if int(fields[1]) == parent:
                found.append((int(name), fields[0].decode(), int(fields[2]), int(fields[3])))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _ignored() -> list[int]:
    """The signals the launcher ignores now: a worker it execs inherits them ignored (and
    every other one at its default), so a forked one is given the same."""
    return [int(s) for s, handler in fresh.dispositions().items() if handler is signal.SIG_IGN]
