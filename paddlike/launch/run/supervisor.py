"""The supervisor: start this node's processes, watch them, tear the job down on failure.

One event loop (selectors over pidfds, a signal wake-up pipe, inotify for `--tee`,
and the caller's extra fds) — no sleep loop, so a failure is noticed the moment the
kernel reports it. The teardown policy, in one place (`_teardown`):

    first failure (or SIGINT/SIGTERM/SIGHUP, or a remote cause from an extra fd)
      -> SIGTERM to every process group
      -> wait up to kill_timeout, then SIGKILL the groups still there (named first)
      -> reap every child, write summary.json, print the root-cause report
      -> exit code: the failed process's own (128+N for signal N), 130/143/129 for
         a signal to the launcher

Parameter-server lifecycle: servers (and heter workers) serve until the trainers
are done; when every trainer exited 0 they are asked to stop (SIGTERM) and their
exit then (code 0, or death by that SIGTERM) counts as ok. On one node "every
trainer" means this node's; a job on several nodes passes a `ServicesStop`, which
is told when this node's trainers are done and says when the whole job's are.

Process states, per ProcessRecord.status:  running -> ok | failed | killed
("killed" = stopped by the launcher during teardown).
"""

from __future__ import annotations

import contextlib
import enum
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TextIO

from paddlike import contract
from paddlike.launch.console.tee import Console, TeeEcho, TeeSelection, tee_targets
from paddlike.launch.plan.plan import LaunchPlan, ProcessSpec, Role
from paddlike.launch.run import linux
from paddlike.launch.run.guardian import Guardian
from paddlike.launch.run.logdir import LogDir, WorkerLog, format_header, read_tail_since
from paddlike.summary import ProcessRecord, RootCause, RunSummary, write_summary

TAIL_LINES = 20
# After SIGKILL a process can only linger in uninterruptible sleep; don't wait forever.
_REAP_AFTER_KILL = 10.0
# Without inotify, how often the console re-reads the --tee files.
_TEE_POLL = 0.1
_LAUNCHER_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Roles that serve until the trainers finish (PS mode), then are asked to stop.
_SERVICE_ROLES = (Role.SERVER, Role.HETER)


class Phase(enum.Enum):
    """The job on this node. RUNNING -> STOPPING_SERVICES -> DONE (success), or
    RUNNING | STOPPING_SERVICES -> TEARDOWN -> DONE (failure, signal, remote cause)."""

    RUNNING = "running"
    STOPPING_SERVICES = "stopping services"
    TEARDOWN = "teardown"


@dataclass(frozen=True)
class ServicesStop:
    """An outside say in when this node's servers stop (PS on several nodes).

    Without one, the servers are asked to stop once this node's trainers all exited 0.
    With one, the supervisor calls `local_trainers_done()` once at that moment (at once
    when this node runs no trainer) and stops the servers only when `fd` is readable and
    `stop_now()` (which consumes the readiness) returns True: when every trainer of the
    whole job has exited 0, servers elsewhere may still be serving trainers until then.
    """

    fd: int
    local_trainers_done: Callable[[], None]
    stop_now: Callable[[], bool]


@dataclass
class RunOutcome:
    """What one round ended with: the launcher's exit code and what each process did."""

    exit_code: int
    records: list[ProcessRecord]
    root_cause: RootCause | None
    status: str  # "succeeded" | "failed" | "interrupted"


@dataclass
class _Proc:
    """A running instance of a ProcessSpec."""

    spec: ProcessSpec
    record: ProcessRecord
    log: WorkerLog
    popen: subprocess.Popen[bytes] | None = None
    pidfd: int = -1
    started: float = 0.0  # monotonic
    stop_sent: bool = False  # the launcher sent SIGTERM
    kill_sent: bool = False  # the launcher sent SIGKILL
    returncode: int | None = None
    lost: bool = False  # still there long after SIGKILL; given up on

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.returncode is None


@dataclass
class _Round:
    """The mutable state of one `run()`."""

    procs: list[_Proc]
    phase: Phase = Phase.RUNNING
    cause: RootCause | None = None
    exit_code: int = 0
    status: str = "succeeded"
    kill_deadline: float | None = None
    signals_seen: list[int] = field(default_factory=list)
    trainers_reported: bool = False  # ServicesStop.local_trainers_done() was called


class Supervisor:
    """Owns this node's live processes for one or more rounds (`run()` per round).

    `run()` must be called from the main thread: it installs signal handlers, and
    the parent-death signal is tied to the thread that forked each child.
    """

    def __init__(
        self,
        plan: LaunchPlan,
        logdir: LogDir,
        *,
        base_env: Mapping[str, str],
        kill_timeout: float = 5.0,
        tee: TeeSelection | str = "0",
        color: bool = False,
        console: Console | None = None,
        tee_out: TextIO | None = None,
    ) -> None:
        self.plan = plan
        self.logdir = logdir
        self.base_env = dict(base_env)
        self.kill_timeout = kill_timeout
        self.tee = tee
        self.color = color
        self.console = console or Console(color=color)
        self.tee_out = tee_out if tee_out is not None else sys.stdout
        self.hostname = os.uname().nodename
        self._job_start: float | None = None
        self._tee_poll: float | None = None  # set when inotify is unavailable
        self._guardian: Guardian | None = None  # kills the worker groups if we are SIGKILLed
        self.deferred_success: str | None = None  # `run(defer_success=True)`'s report

    # ------------------------------------------------------------------ the round
    def run(
        self,
        *,
        extra_fds: Mapping[int, Callable[[], RootCause | None]] | None = None,
        on_failure: Callable[[RootCause], None] | None = None,
        restart_count: int = 0,
        services_stop: ServicesStop | None = None,
        defer_success: bool = False,
    ) -> RunOutcome:
        """Start every process of the plan, supervise them to the end, return the outcome.

        `extra_fds`: descriptors watched with the children; when one is readable its
        callback runs, and a RootCause it returns tears the job down with that cause.
        `on_failure`: called with this node's root cause (a failed process or a signal
        to the launcher) before the teardown starts.
        `services_stop`: who decides when the servers stop (see `ServicesStop`); None =
        when this node's trainers are all done.
        `defer_success`: keep the success report in `deferred_success` instead of printing
        it (many nodes: only the job-wide outcome may say "OK").
        """
        extra_fds = extra_fds or {}
        now = time.time()
        if self._job_start is None:
            self._job_start = now
        start_mono = time.monotonic()
        rnd = _Round(procs=[])
        with contextlib.ExitStack() as stack:
            sel = stack.enter_context(selectors.DefaultSelector())
            wake_fd = stack.enter_context(_signals_to_pipe())
            if wake_fd is not None:
                sel.register(wake_fd, selectors.EVENT_READ, ("signal", None))
            for fd, callback in extra_fds.items():
                sel.register(fd, selectors.EVENT_READ, ("extra", callback))
            if services_stop is not None:
                sel.register(services_stop.fd, selectors.EVENT_READ, ("services", services_stop))
            # Dismissed last (callbacks run in reverse), once every worker is reaped.
            self._guardian = Guardian.start()
            if self._guardian is not None:
                stack.callback(self._guardian.close)
            stack.callback(self._close_all, rnd)

            self._spawn_all(rnd, sel, restart_count, on_failure)
            tee = self._start_tee(rnd, sel, stack)
            self._write_summary(rnd, restart_count)
            self._maybe_stop_services(rnd, services_stop)  # a node without trainers: now

            while any(p.alive for p in rnd.procs):
                timeout = self._timeout(rnd, tee)
                events = sel.select(timeout)
                procs_done = [k.data[1] for k, _ in events if k.data[0] == "proc"]
                for proc in procs_done:
                    sel.unregister(proc.pidfd)
                    self._exited(rnd, proc, on_failure)
                for key, _ in events:
                    kind, payload = key.data
                    if kind == "signal":
                        self._launcher_signals(rnd, key.fd, on_failure)
                    elif kind == "extra":
                        self._extra_fd(rnd, payload)
                    elif kind == "services" and payload.stop_now():
                        sel.unregister(key.fd)
                        if rnd.phase is Phase.RUNNING:
                            self._stop_services(rnd, "every trainer of the job finished")
                    elif kind == "tee" and tee is not None:
                        payload.drain()
                        tee.pump()
                if tee is not None and self._tee_poll is not None:
                    tee.pump()
                self._check_deadline(rnd)
                self._maybe_stop_services(rnd, services_stop)

            self._kill_leftover_groups(rnd)
            self._reap_all(rnd)
            if tee is not None:
                tee.flush()
            self._finish_records(rnd)
            self._write_summary(rnd, restart_count, end=True)
            self.deferred_success = None
            self._report(rnd, time.monotonic() - start_mono, restart_count, defer_success)
        return RunOutcome(rnd.exit_code, [p.record for p in rnd.procs], rnd.cause, rnd.status)

    # ------------------------------------------------------------------ spawning
    def _spawn_all(
        self,
        rnd: _Round,
        sel: selectors.BaseSelector,
        restart_count: int,
        on_failure: Callable[[RootCause], None] | None,
    ) -> None:
        when = time.time()
        logs: list[WorkerLog] = []
        try:
            for spec in self.plan.processes:
                header = format_header(
                    spec, job_id=self.plan.job_id, restart=restart_count, when=when
                )
                logs.append(self.logdir.open_log(spec, header))
        except BaseException:
            for log in logs:
                log.close()
            raise
        for spec, log in zip(self.plan.processes, logs, strict=True):
            record = ProcessRecord(
                role=spec.role.value,
                rank=spec.rank,
                local_index=spec.local_index,
                host=self.plan.host,
                log_file=spec.err_log_name or spec.log_name,
                endpoint=spec.endpoint,
                restarts=restart_count,
            )
            rnd.procs.append(_Proc(spec, record, log))
        preexec = linux.parent_death_preexec()
        for proc in rnd.procs:
            if rnd.phase is not Phase.RUNNING:
                proc.record.status = "killed"  # never started: the job ended first
                proc.log.close()
                continue
            self._spawn(rnd, proc, sel, restart_count, preexec, on_failure)

    def _spawn(
        self,
        rnd: _Round,
        proc: _Proc,
        sel: selectors.BaseSelector,
        restart_count: int,
        preexec: Callable[[], None],
        on_failure: Callable[[RootCause], None] | None,
    ) -> None:
        env = dict(self.base_env)
        env.update(proc.spec.env)
        env[contract.RESTART_COUNT] = str(restart_count)
        env[contract.TORCHELASTIC_RESTART_COUNT] = str(restart_count)
        proc.record.start_time = time.time()
        proc.started = time.monotonic()
        try:
            proc.popen = subprocess.Popen(
                list(proc.spec.argv),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=proc.log.stdout,
                stderr=proc.log.stderr,
                start_new_session=True,  # own process group: teardown reaches grandchildren
                preexec_fn=preexec,
                close_fds=True,
            )
            if self._guardian is not None:
                self._guardian.add(proc.popen.pid)  # its own session: pgid == pid
        except OSError as exc:
            message = f"launch: cannot start {proc.spec.label}: {exc}\n"
            with contextlib.suppress(OSError):
                os.write(proc.log.stderr, message.encode())
            proc.record.end_time = time.time()
            proc.record.status = "failed"
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            proc.record.exit_code = code
            proc.returncode = code
            self._fail(
                rnd,
                self._cause_for(proc, code, f"could not start {proc.spec.label}: {exc}"),
                on_failure,
            )
            return
        finally:
            proc.log.close()  # the child has its own copies
        proc.record.pid = proc.popen.pid
        proc.pidfd = os.pidfd_open(proc.popen.pid)
        sel.register(proc.pidfd, selectors.EVENT_READ, ("proc", proc))

    def _start_tee(
        self, rnd: _Round, sel: selectors.BaseSelector, stack: contextlib.ExitStack
    ) -> TeeEcho | None:
        self._tee_poll = None
        targets = {id(s) for s in tee_targets(self.tee, self.plan.processes)}
        echo = TeeEcho(self.tee_out)
        for proc in rnd.procs:
            if id(proc.spec) in targets and proc.popen is not None:
                echo.follow(proc.spec, proc.log.path, proc.log.start)
                if proc.log.err_path is not None:
                    echo.follow(proc.spec, proc.log.err_path, proc.log.err_start)
        if not echo:
            return None
        echo.finish_setup()
        try:
            inotify = linux.Inotify()
        except OSError:
            self._tee_poll = _TEE_POLL
            return echo
        stack.callback(inotify.close)
        try:
            for path in echo.paths:
                inotify.watch(path)
        except OSError:
            self._tee_poll = _TEE_POLL
            return echo
        sel.register(inotify.fd, selectors.EVENT_READ, ("tee", inotify))
        echo.pump()
        return echo

    # ------------------------------------------------------------------ events
    def _exited(
        self, rnd: _Round, proc: _Proc, on_failure: Callable[[RootCause], None] | None
    ) -> None:
        """A child ended. It stays a zombie (WNOWAIT) until the round ends: a zombie leader
        keeps its process-group id from being reused, so signalling the group later can
        never hit an unrelated process."""
        code = _exit_status(proc.pidfd)
        proc.returncode = code
        rec = proc.record
        rec.end_time = time.time()
        if code < 0:
            rec.signal = _signal_name(-code)
        else:
            rec.exit_code = code
        if proc.stop_sent:
            asked_ok = code in (0, -signal.SIGTERM, 128 + signal.SIGTERM)
            if rnd.phase is Phase.STOPPING_SERVICES and asked_ok and not proc.kill_sent:
                rec.status = "ok"
            elif rnd.phase is Phase.STOPPING_SERVICES and not proc.kill_sent:
                rec.status = "failed"
                reason = f"{proc.spec.label} exited with {_how(code)} after being asked to stop"
                self._fail(rnd, self._cause_for(proc, code, reason), on_failure)
            else:
                rec.status = "killed"
            return
        if code == 0:
            rec.status = "ok"
            return
        rec.status = "failed"
        if rnd.phase is Phase.TEARDOWN:
            return  # failed on its own while the job was already ending: not the root cause
        reason = f"{proc.spec.label} {_how_ended(code)}"
        self._fail(rnd, self._cause_for(proc, code, reason), on_failure)

    def _launcher_signals(
        self, rnd: _Round, fd: int, on_failure: Callable[[RootCause], None] | None
    ) -> None:
        try:
            data = os.read(fd, 512)
        except BlockingIOError:
            return
        for signum in data:
            if signum not in [int(s) for s in _LAUNCHER_SIGNALS]:
                continue
            name = _signal_name(signum)
            if rnd.phase is Phase.TEARDOWN:
                # A second interrupt: the user does not want to wait for the grace period.
                self.console.warn(f"received {name} again: killing the remaining processes now")
                self._kill_now(rnd)
                continue
            cause = RootCause(
                reason=f"launcher on {self.plan.host} received {name}",
                host=self.plan.host,
                node_index=self.plan.node_index,
                signal=name,
                time=time.time(),
            )
            rnd.status = "interrupted"
            self._fail(rnd, cause, on_failure, exit_code=128 + signum)

    def _extra_fd(self, rnd: _Round, callback: Callable[[], RootCause | None]) -> None:
        cause = callback()
        if cause is None or rnd.phase is Phase.TEARDOWN:
            return
        code = cause.exit_code or (_signal_number(cause.signal) + 128 if cause.signal else 1)
        self._fail(rnd, cause, None, exit_code=code)

    def _maybe_stop_services(self, rnd: _Round, services_stop: ServicesStop | None) -> None:
        """Once this node's trainers all exited 0: stop the servers, or (many nodes) say so."""
        if rnd.phase is not Phase.RUNNING:
            return
        trainers = [p for p in rnd.procs if p.spec.role not in _SERVICE_ROLES]
        if any(p.returncode != 0 for p in trainers):
            return
        if services_stop is not None:
            if not rnd.trainers_reported:
                rnd.trainers_reported = True
                services_stop.local_trainers_done()
            return
        if trainers:
            self._stop_services(rnd, "all trainers finished")

    def _stop_services(self, rnd: _Round, why: str) -> None:
        services = [p for p in rnd.procs if p.spec.role in _SERVICE_ROLES and p.alive]
        if not services:
            return
        rnd.phase = Phase.STOPPING_SERVICES
        self.console.say(f"{why}: asking the servers to stop")
        self._signal_groups(services, signal.SIGTERM)
        rnd.kill_deadline = time.monotonic() + self.kill_timeout

    # ------------------------------------------------------------------ teardown
    def _fail(
        self,
        rnd: _Round,
        cause: RootCause,
        on_failure: Callable[[RootCause], None] | None,
        *,
        exit_code: int | None = None,
    ) -> None:
        """Record the root cause (the first one wins), tell the caller, start the teardown."""
        if rnd.phase is Phase.TEARDOWN:
            return
        rnd.cause = cause
        if exit_code is None:
            exit_code = cause.exit_code if cause.exit_code else 1
            if cause.signal:
                exit_code = 128 + _signal_number(cause.signal)
        rnd.exit_code = exit_code
        if rnd.status == "succeeded":
            rnd.status = "failed"
        if on_failure is not None:
            try:
                on_failure(cause)
            except Exception as exc:  # the local teardown must happen regardless
                self.console.warn(f"could not publish the failure to the other nodes: {exc}")
        rnd.phase = Phase.TEARDOWN
        others = sum(1 for p in rnd.procs if p.alive)
        if others:
            other = "other " if any(p.record.status == "failed" for p in rnd.procs) else ""
            self.console.say(
                f"{cause.reason}: stopping {others} {other}process{'es' if others > 1 else ''} "
                f"(SIGTERM, SIGKILL after {self.kill_timeout:g} s)"
            )
        self._signal_groups(rnd.procs, signal.SIGTERM)
        rnd.kill_deadline = time.monotonic() + self.kill_timeout

    def _signal_groups(self, procs: list[_Proc], sig: int) -> None:
        """Signal each process's whole group (its children too); exited leaders' groups
        may still hold grandchildren, so they are signalled as well."""
        for proc in procs:
            if proc.popen is None:
                continue
            if proc.alive:
                if sig == signal.SIGKILL:
                    proc.kill_sent = True
                else:
                    proc.stop_sent = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.popen.pid, sig)

    def _check_deadline(self, rnd: _Round) -> None:
        if rnd.kill_deadline is None or time.monotonic() < rnd.kill_deadline:
            return
        stubborn = [p for p in rnd.procs if p.alive and p.stop_sent and not p.kill_sent]
        if stubborn:
            for proc in stubborn:
                self.console.warn(
                    f"{proc.spec.label} (pid {proc.record.pid}, {proc.spec.log_name}) did not "
                    f"exit within {self.kill_timeout:g} s of SIGTERM; sending SIGKILL "
                    f"(make it exit on SIGTERM, or raise --kill_timeout)"
                )
            self._signal_groups(stubborn, signal.SIGKILL)
            rnd.kill_deadline = time.monotonic() + _REAP_AFTER_KILL
            return
        lost = [p for p in rnd.procs if p.alive]
        for proc in lost:
            self.console.warn(
                f"{proc.spec.label} (pid {proc.record.pid}) is still there "
                f"{_REAP_AFTER_KILL:g} s after SIGKILL (stuck in the kernel?); giving up on it"
            )
            proc.returncode = -signal.SIGKILL
            proc.lost = True
            proc.record.status = "killed"
            proc.record.signal = "SIGKILL"
            proc.record.end_time = time.time()
        rnd.kill_deadline = None

    def _kill_now(self, rnd: _Round) -> None:
        alive = [p for p in rnd.procs if p.alive and not p.kill_sent]
        self._signal_groups(alive, signal.SIGKILL)
        rnd.kill_deadline = time.monotonic() + _REAP_AFTER_KILL

    def _kill_leftover_groups(self, rnd: _Round) -> None:
        """Leaders are reaped; whatever they left in their groups goes too (the job is over)."""
        self._signal_groups(rnd.procs, signal.SIGKILL)

    def _reap_all(self, rnd: _Round) -> None:
        for proc in rnd.procs:
            if proc.popen is not None and proc.popen.returncode is None and not proc.lost:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.popen.wait(timeout=_REAP_AFTER_KILL)
            if proc.pidfd >= 0:
                os.close(proc.pidfd)
                proc.pidfd = -1

    def _timeout(self, rnd: _Round, tee: TeeEcho | None) -> float | None:
        timeout: float | None = None
        if rnd.kill_deadline is not None:
            timeout = max(0.0, rnd.kill_deadline - time.monotonic())
        if tee is not None and self._tee_poll is not None:
            timeout = self._tee_poll if timeout is None else min(timeout, self._tee_poll)
        return timeout

    # ------------------------------------------------------------------ results
    def _cause_for(self, proc: _Proc, code: int, reason: str) -> RootCause:
        log_path, start = proc.log.path, proc.log.start
        if proc.log.err_path is not None and _grew(proc.log.err_path, proc.log.err_start):
            log_path, start = proc.log.err_path, proc.log.err_start
        return RootCause(
            reason=reason,
            host=self.plan.host,
            node_index=self.plan.node_index,
            role=proc.spec.role.value,
            rank=proc.spec.rank,
            local_index=proc.spec.local_index,
            exit_code=code if code >= 0 else None,
            signal=_signal_name(-code) if code < 0 else None,
            log_file=log_path.name,
            tail=read_tail_since(log_path, start, TAIL_LINES),
            time=time.time(),
            duration=time.monotonic() - proc.started if proc.started else None,
        )

    def _finish_records(self, rnd: _Round) -> None:
        for proc in rnd.procs:
            if proc.record.status == "running":
                proc.record.status = "killed"

    def _write_summary(self, rnd: _Round, restart_count: int, *, end: bool = False) -> None:
        summary = RunSummary(
            job_id=self.plan.job_id,
            mode=self.plan.run_mode,
            node_index=self.plan.node_index,
            nnodes=self.plan.nnodes,
            host=self.plan.host,
            hostname=self.hostname,
            log_dir=str(self.logdir.path),
            start_time=self._job_start or time.time(),
            status=rnd.status if end else "running",
            exit_code=rnd.exit_code if end else None,
            end_time=time.time() if end else None,
            restarts=restart_count,
            processes=[p.record for p in rnd.procs],
            root_cause=rnd.cause if end else None,
        )
        try:
            write_summary(self.logdir.path, summary)
        except OSError as exc:
            self.console.warn(f"could not write the run summary in {self.logdir.path}: {exc}")

    def _report(
        self, rnd: _Round, duration: float, restart_count: int, defer_success: bool = False
    ) -> None:
        from paddlike.logs import report  # stdlib-only module shared with `python -m paddlike.logs`

        if rnd.cause is not None:
            self.console.block(
                report.format_root_cause(rnd.cause, color=self.color, log_dir=self.logdir.path)
            )
            return
        trainers = sum(1 for p in rnd.procs if p.spec.role not in _SERVICE_ROLES)
        block = report.format_success(
            trainers,
            duration,
            color=self.color,
            nnodes=self.plan.nnodes,
            log_dir=self.logdir.path,
            restarts=restart_count,
        )
        if defer_success:
            self.deferred_success = block
            return
        self.console.block(block)

    def _close_all(self, rnd: _Round) -> None:
        """Last resort (an exception in the loop): never leave a child running or unreaped."""
        alive = [p for p in rnd.procs if p.alive]
        self._signal_groups(alive, signal.SIGKILL)
        self._reap_all(rnd)


@contextlib.contextmanager
def _signals_to_pipe():  # type: ignore[no-untyped-def]
    """Route SIGINT/SIGTERM/SIGHUP to a pipe the event loop watches; restore on exit.

    Yields the read end, or None off the main thread (where Python cannot install
    handlers; the caller then owns signal handling).
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    old_handlers = {}
    old_wakeup = -1
    try:
        old_wakeup = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        for sig in _LAUNCHER_SIGNALS:
            old_handlers[sig] = signal.signal(sig, _note_signal)
        yield rfd
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(old_wakeup)
        os.close(rfd)
        os.close(wfd)


def _note_signal(signum: int, frame: object) -> None:
    """The C-level handler already wrote `signum` to the wake-up pipe; nothing else to do."""


def _exit_status(pidfd: int) -> int:
    """The exited child's status in Popen's form (negative: killed by that signal),
    read without reaping it."""
    info = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOWAIT)
    if info is None:  # not exited after all (cannot happen for a readable pidfd)
        raise ChildProcessError(f"pidfd {pidfd} readable but the child has not exited")
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def _signal_number(name: str) -> int:
    try:
        return int(signal.Signals[name])
    except KeyError:
        return 0


def _how_ended(code: int) -> str:
    return f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"


def _how(code: int) -> str:
    return _signal_name(-code) if code < 0 else f"code {code}"


def _grew(path: os.PathLike[str], start: int) -> bool:
    try:
        return os.stat(path).st_size > start
    except OSError:
        return False
