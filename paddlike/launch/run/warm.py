"""In-process restarts, the launcher's side: processes kept across rounds
(`paddlike.distributed.restartable` is the worker's side).

    the job starts   a private 0700 directory (PADDLIKE_WARM_DIR, every worker's) with
                     launcher.sock, watched by each round's loop; made only where a round
                     can follow a failure (--max_restarts, elastic)
    a worker enters  restartable(fn): it binds <dir>/<pid>.sock ("may be kept")
    the round ends   for a cause that is not that process, and the job may go on
                     (`WarmRound.park`): PARK_SIGNAL to the process only, not its group (a
                     data loader's children keep running); it tears its groups down and
                     says "parked" (`WarmRound.read`); not parked within kill_timeout: the
                     teardown as without it (SIGTERM, SIGKILL)
    the next round   each local slot of the plan adopts its slot's parked process (its whole
                     environment as one datagram, `WarmRound.adopt`), the others start as
                     always (cold, or from --preload's zygote); a parked process the plan
                     has no slot for is ended
    the job ends     parked processes are ended like any worker: SIGTERM to the group,
                     kill_timeout, SIGKILL, reaped (`WarmJob.close`)

A parked process stays a child of the launcher (unreaped, its group id ours) and in the
guardian's list, so a SIGKILLed launcher still takes it down.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping

from paddlike import contract
from paddlike.launch.plan.membership import ElasticSpec, is_membership_change
from paddlike.launch.plan.next_round import may_restart
from paddlike.launch.plan.plan import Role
from paddlike.launch.run import spawn
from paddlike.summary import ProcessStatus, RootCause

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.console.output import Console
    from paddlike.launch.run.childloop import ChildLoop
    from paddlike.launch.run.guardian import Guardian
    from paddlike.launch.run.roundstate import Proc, RoundState
    from paddlike.launch.run.runspec import RunSpec

PARK_SIGNAL = signal.SIGRTMIN + contract.WARM_PARK_SIGNAL_OFFSET
# fn() raised on a node of many: how long it waits for another node's failure to arrive
# (the store's watch: milliseconds, more under load) before its own is the job's cause
REMOTE_GRACE = 1.0
LAUNCHER_SOCKET = "launcher.sock"
REAP_AFTER_KILL = 10.0


class Kept:
    """A parked process, between its round and the next (or the job's end)."""

    __slots__ = ("guarded", "parked_at", "popen", "rank")

    def __init__(self, popen: subprocess.Popen[bytes], guarded: bool, rank: int | None) -> None:
        self.popen = popen
        self.guarded = guarded
        self.rank = rank
        self.parked_at = time.time()


class WarmJob:
    """The job's directory, its socket and the processes kept between rounds, by local slot."""

    def __init__(
        self, directory: str, sock: socket.socket, wait: float, guardian: Guardian | None
    ) -> None:
        self.directory = directory
        self.sock = sock
        self.wait = wait
        self.guardian = guardian
        self.kept: dict[int, Kept] = {}

    @classmethod
    def create(cls, wait: float, guardian: Guardian | None) -> WarmJob | None:
        """The directory (0700, under TMPDIR, else /tmp: a deep TMPDIR makes socket paths
        longer than the kernel's 107 bytes) and launcher.sock; None where neither can hold
        one: restartable scripts then run cold."""
        for base in dict.fromkeys((os.environ.get("TMPDIR") or "/tmp", "/tmp")):
            made = _socket_dir(base)
            if made is not None:
                directory, sock = made
                if guardian is not None:  # removed if this launcher is SIGKILLed
                    guardian.remove_dir(directory)
                return cls(directory, sock, wait, guardian)
        return None

    def env(self) -> dict[str, str]:
        """What every worker is given."""
        return {contract.WARM_DIR: self.directory, contract.WARM_WAIT: f"{self.wait:g}"}

    def round(
        self, elastic: ElasticSpec | None, restarts: int, spec: RunSpec, many_nodes: bool = False
    ) -> WarmRound:
        """A round after `restarts` restarts: its processes may be kept when it ends for a
        cause that a round follows (a restart left, or an elastic job's change of nodes)."""

        def may_keep(cause: RootCause) -> bool:
            change = elastic is not None and is_membership_change(cause)
            return change or may_restart(cause, restarts, spec.max_restarts)

        return WarmRound(self, may_keep, spec.kill_timeout, many_nodes)

    def end_kept(self, kill_timeout: float, console: Console | None = None) -> int:
        """The job does not go on: every parked process ended and reaped (`end`); how many."""
        kept, self.kept = list(self.kept.values()), {}
        if kept and console is not None:
            n = len(kept)
            console.say(
                f"stopping {n} kept process{'es' if n != 1 else ''} (no further round; "
                f"SIGTERM, SIGKILL after {kill_timeout:g} s)"
            )
        self.end(kept, kill_timeout)
        return len(kept)

    def end(self, kept: list[Kept], kill_timeout: float) -> None:
        """Parked processes ended like any worker: SIGTERM to each group, kill_timeout,
        SIGKILL, reaped; the guardian forgets their groups."""
        if not kept:
            return
        for k in kept:
            spawn.signal_group(k.popen.pid, signal.SIGTERM)
        _wait_all(kept, time.monotonic() + kill_timeout)
        for k in kept:
            spawn.signal_group(k.popen.pid, signal.SIGKILL)
        _wait_all(kept, time.monotonic() + REAP_AFTER_KILL)
        for k in kept:
            with contextlib.suppress(subprocess.TimeoutExpired, ChildProcessError):
                k.popen.wait(timeout=0.1)
            if k.guarded and self.guardian is not None and k.popen.returncode is not None:
                self.guardian.remove(k.popen.pid)

    def close(self, kill_timeout: float, console: Console | None = None) -> int:
        """The job's end: parked processes ended, the directory removed; how many ended."""
        try:
            return self.end_kept(kill_timeout, console)
        finally:
            self.sock.close()
            _remove_tree(self.directory)


class WarmRound:
    """One round's use of the job's kept processes (the supervisor's hooks)."""

    def __init__(
        self,
        job: WarmJob,
        may_keep: Callable[[RootCause], bool],
        kill_timeout: float,
        many_nodes: bool = False,
    ) -> None:
        self.job = job
        self.may_keep = may_keep
        self.kill_timeout = kill_timeout
        self.many_nodes = many_nodes  # another node's failure reaches us later: wait for it
        self.failing: set[int] = set()  # told "own": their failure is this round's first
        self.adopted: list[Proc] = []  # this round's processes that were kept from the last

    @property
    def fd(self) -> int:
        return self.job.sock.fileno()

    def env(self) -> dict[str, str]:
        return self.job.env()

    def adopt(self, proc: Proc, env: Mapping[str, str]) -> subprocess.Popen[bytes] | None:
        """The parked process of `proc`'s slot, given the round's environment; None: none,
        or it could not be told (ended; the slot starts anew)."""
        kept = self.job.kept.pop(proc.spec.local_index, None)
        if kept is None or proc.spec.role is not Role.TRAINER:
            if kept is not None:
                self._end(kept)
            return None
        path = os.path.join(self.job.directory, f"{kept.popen.pid}.sock")
        try:
            self.job.sock.sendto(json.dumps({"env": dict(env)}).encode(), path)
        except OSError:
            self._end(kept)
            return None
        proc.guarded = kept.guarded
        self.adopted.append(proc)
        return kept.popen

    def end_unadopted(self) -> None:
        """Parked processes the new plan has no slot for (an elastic round with fewer)."""
        self.job.end_kept(self.kill_timeout)

    def _end(self, kept: Kept) -> None:
        self.job.end([kept], self.kill_timeout)

    def park(self, rnd: RoundState, cause: RootCause) -> int:
        """The round ends for `cause`: where the job may go on, each live trainer that may be
        kept gets PARK_SIGNAL (and not SIGTERM); returns how many did."""
        if not self.may_keep(cause):
            return 0
        parking = 0
        for proc in rnd.procs:
            if not proc.alive or proc.popen is None or proc.spec.role is not Role.TRAINER:
                continue
            if not os.path.exists(os.path.join(self.job.directory, f"{proc.popen.pid}.sock")):
                continue
            try:
                os.kill(proc.popen.pid, PARK_SIGNAL)
            except (ProcessLookupError, PermissionError):
                continue
            proc.parking = True
            parking += 1
        return parking

    def read(self, rnd: RoundState, loop: ChildLoop) -> None:
        """launcher.sock is readable: each "parked" process leaves the round (kept); a
        process whose fn raised asks whether that was its own failure ("raised")."""
        while True:
            try:
                data = self.job.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            try:
                message = json.loads(data)
                pid = int(message.get("parked") or message["raised"])
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            for proc in rnd.procs:
                if not proc.alive or proc.popen is None or proc.popen.pid != pid:
                    continue
                if "parked" in message and proc.parking:
                    self._parked(proc, loop)
                elif "raised" in message:
                    self._answer_raised(rnd, proc)

    def _answer_raised(self, rnd: RoundState, proc: Proc) -> None:
        """fn() raised in `proc`: its own failure unless another process's came first. A
        round that ends already, a local process that has exited (its pidfd not yet read)
        or one told before (its exit closes the collectives of the others, which raise
        then): no answer, the park signal follows. Else one node: "own" (it re-raises at
        once); many nodes: "wait" a moment for another node's failure to reach us."""
        from paddlike.launch.run.roundstate import Phase

        if rnd.phase is not Phase.RUNNING or proc.parking or self.failing:
            return
        others = [p.pidfd for p in rnd.procs if p is not proc and p.alive and p.pidfd >= 0]
        if others and select.select(others, [], [], 0)[0]:
            return
        self.failing.add(pid_of(proc))
        answer = {"wait": REMOTE_GRACE} if self.many_nodes else {"own": True}
        path = os.path.join(self.job.directory, f"{pid_of(proc)}.sock")
        with contextlib.suppress(OSError):
            self.job.sock.sendto(json.dumps(answer).encode(), path)

    def _parked(self, proc: Proc, loop: ChildLoop) -> None:
        proc.parked = True
        if proc.pidfd >= 0:
            if proc.pidfd in loop:
                loop.remove(proc.pidfd)
            os.close(proc.pidfd)
            proc.pidfd = -1
        proc.record.status = ProcessStatus.KEPT
        proc.record.end_time = time.time()
        self.job.kept[proc.spec.local_index] = Kept(
            proc.popen,  # type: ignore[arg-type]
            proc.guarded,
            proc.spec.rank,
        )
        proc.guarded = False  # the guardian keeps it: it is the kept process's now


def pid_of(proc: Proc) -> int:
    assert proc.popen is not None
    return proc.popen.pid


def _wait_all(kept: list[Kept], deadline: float) -> None:
    """Until every one exited (its pidfd readable) or the deadline."""
    fds = []
    try:
        for k in kept:
            with contextlib.suppress(OSError):
                fds.append(os.pidfd_open(k.popen.pid))
        pending = list(fds)
        while pending and (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(pending, [], [], left)
            pending = [fd for fd in pending if fd not in ready]
    finally:
        for fd in fds:
            os.close(fd)


def _socket_dir(base: str) -> tuple[str, socket.socket] | None:
    """A new private directory under `base` with the launcher's socket bound in it."""
    directory = os.path.join(base, f"paddlike-warm-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.mkdir(directory, 0o700)
    except OSError:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:  # a worker's <pid>.sock is never longer than launcher.sock
        sock.bind(os.path.join(directory, LAUNCHER_SOCKET))
    except OSError:
        sock.close()
        _remove_tree(directory)
        return None
    sock.setblocking(False)
    return directory, sock


def _remove_tree(directory: str) -> None:
    """The warm directory: sockets only, one level."""
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))
        os.rmdir(directory)
