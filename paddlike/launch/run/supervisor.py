"""The supervisor: start this node's processes for one round, watch them, tear down.

One event loop (`run.childloop`: the children's pidfds, a signal wake-up pipe, inotify
for `--tee`, the caller's extra fds, deadlines) — no sleep loop, so a failure is noticed
the moment the kernel reports it. The first failure (or SIGINT/SIGTERM/SIGHUP, or a
remote cause from an extra fd) starts the teardown (`_fail`); what the teardown does (SIGTERM,
kill_timeout, SIGKILL, reap every child) is `run.teardown`'s policy, which the loop
wakes at its deadline. The round's state and outcome are `run.roundstate`'s; `--tee`'s
files are watched as `run.teewatch` sets them up.

Hangs (`--hang_timeout`) and stack dumps (SIGRTMIN+4, or SIGUSR1 while it is not passed
on; many nodes' stack requests) are `run.hangwatch`'s: the loop only wakes it at its
deadline, on those signals or on a request's fd, and tears down for a cause it returns.
The signals of --signals_to_handle that do not end the job are passed on to every running
worker (`_forward`; `run.signals` has the table).

What an exit means and which exit code a cause gives are decided in `plan.policy`;
the summary (`run.record`) and the report (`console.report`) are the job's, once the
job-wide outcome is known.

Parameter-server lifecycle: servers serve until the trainers (and in ps-heter the
heter trainers, which end by themselves and are waited for like trainers) are done;
when every one of those exited 0 the servers are asked to stop (SIGTERM) and their
exit then (code 0, or death by that SIGTERM) counts as ok. On one node "every
trainer" means this node's; a job on several nodes passes a `ServicesStop`, which
is told when this node's trainers are done and says when the whole job's are.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from paddlike import contract
from paddlike.launch.console.output import Console
from paddlike.launch.console.tee import TeeEcho
from paddlike.launch.peers.services import ServicesStop
from paddlike.launch.plan.exitcode import cause_exit_code
from paddlike.launch.plan.plan import LaunchPlan, Role
from paddlike.launch.plan.policy import (
    exit_verdict,
    launcher_signal_cause,
    signal_name,
)
from paddlike.launch.run import linux, spawn
from paddlike.launch.run.cause import process_cause
from paddlike.launch.run.childloop import EXIT, WAKE, ChildLoop
from paddlike.launch.run.consequence import CONSEQUENCE_GRACE, drop_stray_temps, peer_exited
from paddlike.launch.run.guardian import Guardian
from paddlike.launch.run.hangwatch import HangWatch, Watched
from paddlike.launch.run.logdir import (
    LogDir,
    LogDirError,
    WorkerLog,
    format_header,
)
from paddlike.launch.run.roundstate import Phase, Proc, RoundState, RunOutcome
from paddlike.launch.run.signals import (
    FROM_STARTER,
    SignalPolicy,
    ending_again,
    forward_signal,
    read_signals,
    signal_label,
    signals_to_pipe,
)
from paddlike.launch.run.teardown import Teardown
from paddlike.launch.run.teewatch import start_tee
from paddlike.summary import ProcessRecord, ProcessStatus, RootCause, RunStatus

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import TextIO

    from paddlike.launch.context.options import TeeSelection
    from paddlike.launch.run.preload.client import Preload
    from paddlike.launch.run.warm import WarmRound

__all__ = ["Phase", "RunOutcome", "Supervisor"]  # Phase, RunOutcome: run.roundstate's


class Supervisor:
    """Owns this node's live processes for one round.

    `run()` must be called from the main thread: it installs signal handlers, and
    the parent-death signal is tied to the thread that forked each child. The
    `guardian` (forked once per job, before any thread) learns every process group.
    """

    def __init__(
        self,
        plan: LaunchPlan,
        logdir: LogDir,
        *,
        base_env: Mapping[str, str],
        console: Console,
        guardian: Guardian | None = None,
        kill_timeout: float = 30.0,
        tee: TeeSelection = frozenset({0}),
        tee_out: TextIO | None = None,
        signals: SignalPolicy | None = None,
        tee_among_hosts: bool = False,
        preload: Preload | None = None,
        warm: WarmRound | None = None,
    ) -> None:
        self.plan = plan
        self.preload = preload  # --preload: workers forked from its zygote (launch/run/preload/)
        self.warm = warm  # in-process restarts: processes kept across rounds (`run.warm`)
        # which signals end the round, go on to the workers, or take stacks (run.signals)
        self.signals = signals if signals is not None else SignalPolicy()
        self.logdir = logdir
        self.base_env = dict(base_env)
        self.console = console
        self.guardian = guardian
        self.kill_timeout = kill_timeout
        self.tee = tee
        self.tee_out = tee_out if tee_out is not None else sys.stdout
        # started by the one-command cluster start: rank prefixes kept (`console.tee`)
        self.tee_among_hosts = tee_among_hosts
        self._tee_poll: float | None = None  # set when inotify is unavailable
        self._teardown = Teardown(console, guardian, kill_timeout)
        self._leave_reason: str | None = None  # `leave_for`'s, for the SIGTERM it sends

    # ------------------------------------------------------------------ the round
    def run(
        self,
        *,
        restart_count: int = 0,
        round_: int | None = None,
        extra_fds: Mapping[int, Callable[[], RootCause | None]] | None = None,
        on_failure: Callable[[RootCause], None] | None = None,
        services_stop: ServicesStop | None = None,
        on_started: Callable[[Sequence[ProcessRecord]], None] | None = None,
        hangs: HangWatch | None = None,
        hold: float = CONSEQUENCE_GRACE,
        on_notice: Callable[[RootCause], Callable[[], None]] | None = None,
    ) -> RunOutcome:
        """Start every process of the plan, supervise them to the end, return the outcome.

        `extra_fds`: descriptors watched with the children; when one is readable its
        callback runs, and a RootCause it returns tears the round down with that cause.
        `on_failure`: called with this node's root cause (a failed process or a signal
        to the launcher) before the teardown starts.
        `services_stop`: who decides when the servers stop (see `ServicesStop`); None =
        when this node's trainers are all done.
        `on_started`: called once every process was started (the "running" summary).
        `hangs`: the hang rule (its deadline joins the loop's) and SIGUSR1's stack dumps.
        `round_`: an elastic job's round, for the log headers.
        `hold`: how long a failure that only reports a peer's exit waits for the failure it
        reports (`run.consequence`).
        `on_notice`: called at a preemption notice, before the ranks' SIGTERM (`run.preempt`).
        """
        start_mono = time.monotonic()
        rnd = RoundState(on_failure=on_failure, hangs=hangs)
        rnd.hold, rnd.on_notice, rnd.notice_node = hold, on_notice, self.plan.node_index
        with contextlib.ExitStack() as stack:
            wake_fd = stack.enter_context(signals_to_pipe(self.signals))
            loop = stack.enter_context(ChildLoop(wake_fd))
            for fd, callback in (extra_fds or {}).items():
                loop.add(fd, "extra", callback)
            if services_stop is not None:
                loop.add(services_stop.fd, "services", services_stop)
            if self.warm is not None:  # "parked" from a kept process
                loop.add(self.warm.fd, "warm", self.warm)
            stack.callback(self._teardown.close_all, rnd)

            self._spawn_all(rnd, loop, restart_count, round_)
            tee, self._tee_poll = start_tee(
                rnd.procs, self.tee, self.plan.processes, self.tee_out, loop.selector, stack,
                among_hosts=self.tee_among_hosts,
            )
            if on_started is not None:
                on_started([p.record for p in rnd.procs])
            if hangs is not None:
                hangs.start_round(self.plan.job_id, lambda: self._watched(rnd))
                if hangs.fd is not None:
                    loop.add(hangs.fd, "stacks", hangs)
            self._teardown.maybe_stop_services(rnd, services_stop)  # a node without trainers: now

            while any(p.alive for p in rnd.procs) or rnd.held is not None:
                for kind, payload, fd in loop.wait(*self._deadlines(rnd, tee)):
                    if kind == EXIT:  # (every exit of the batch first)
                        loop.remove(fd)
                        self._exited(rnd, payload)
                    elif kind == WAKE:
                        self._launcher_signals(rnd, fd)
                    elif kind == "extra":
                        self._remote_cause(rnd, payload())
                    elif kind == "services" and payload.stop_now():
                        loop.remove(fd)
                        if rnd.phase is Phase.RUNNING:
                            self._teardown.stop_services(rnd, "every trainer of the job finished")
                    elif kind == "stacks":
                        self._stack_request(rnd, payload)
                    elif kind == "warm":
                        payload.read(rnd, loop)
                    elif kind == "tee" and tee is not None:
                        payload.drain()
                        tee.pump()
                if tee is not None and self._tee_poll is not None:
                    tee.pump()
                self._teardown.check_deadline(rnd)
                self._check_held(rnd)
                self._check_hang(rnd)
                self._teardown.maybe_stop_services(rnd, services_stop)

            self._teardown.release_groups(rnd)
            if tee is not None:
                tee.flush()
            for proc in rnd.procs:
                if proc.record.status == ProcessStatus.RUNNING:
                    proc.record.status = ProcessStatus.KILLED
        return RunOutcome(
            rnd.exit_code,
            [p.record for p in rnd.procs],
            rnd.cause,
            rnd.status,
            time.monotonic() - start_mono,
        )

    # ------------------------------------------------------------------ spawning
    def _spawn_all(
        self,
        rnd: RoundState,
        loop: ChildLoop,
        restart_count: int,
        round_: int | None = None,
    ) -> None:
        when = time.time()
        logs: list[WorkerLog] = []
        try:
            for spec in self.plan.processes:
                header = format_header(
                    spec, job_id=self.plan.job_id, restart=restart_count, when=when, round_=round_
                )
                logs.append(self.logdir.open_log(spec, header))
        except LogDirError as exc:  # since the launch's check (a link planted): none starts
            for log in logs:
                log.close()
            where = {"host": self.plan.host, "node_index": self.plan.node_index}
            self._fail(rnd, RootCause(reason=str(exc), time=time.time(), **where))
            return
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
            rnd.procs.append(Proc(spec, record, log))
        preexec = linux.parent_death_preexec()
        restart = str(restart_count)
        for proc in rnd.procs:
            if rnd.phase is not Phase.RUNNING:
                proc.record.status = ProcessStatus.KILLED  # never started: the job ended first
                proc.log.close()
                continue
            env = {**self.base_env, **proc.spec.env}
            env[contract.RESTART_COUNT] = restart
            env[contract.TORCHELASTIC_RESTART_COUNT] = restart
            if self.warm is not None:
                env.update(self.warm.env())
            else:  # an outer job's (a launch inside a worker): not this job's to keep
                env.pop(contract.WARM_DIR, None)
            self._spawn(rnd, proc, loop, env, preexec)
        if self.warm is not None:
            self.warm.end_unadopted()  # kept, but the plan has no slot for them

    def _spawn(
        self,
        rnd: RoundState,
        proc: Proc,
        loop: ChildLoop,
        env: Mapping[str, str],
        preexec: Callable[[], None],
    ) -> None:
        proc.record.start_time = time.time()
        proc.started = time.monotonic()
        try:
            kept = self.warm.adopt(proc, env) if self.warm is not None else None
            preload = self.preload if kept is None else None
            forked = preload.spawn(proc.spec, env, proc.log) if preload is not None else None
            proc.popen = kept or forked or spawn.start(proc.spec, env, proc.log, preexec)  # type: ignore[assignment]
            if self.guardian is not None and not proc.guarded:
                self.guardian.add(proc.popen.pid)  # its own session: pgid == pid
                proc.guarded = True
        except OSError as exc:
            code = spawn.note_start_failure(proc.log, proc.spec, exc)
            proc.record.end_time = time.time()
            proc.record.status = ProcessStatus.FAILED
            proc.record.exit_code = code
            proc.returncode = code
            label = proc.spec.label
            self._fail(rnd, self._cause_for(proc, code, f"could not start {label}: {exc}"))
            return
        finally:
            proc.log.close()  # the child has its own copies
        proc.record.pid = proc.popen.pid
        proc.pidfd = os.pidfd_open(proc.popen.pid)
        loop.add_child(proc.pidfd, proc)

    # ------------------------------------------------------------------ events
    def _exited(self, rnd: RoundState, proc: Proc) -> None:
        """A child ended. It stays a zombie (WNOWAIT) until the round ends: a zombie leader
        keeps its process-group id from being reused, so signalling the group later can
        never hit an unrelated process."""
        code = spawn.exit_status(proc.pidfd)
        proc.returncode = code
        rec = proc.record
        rec.end_time = time.time()
        if code < 0:
            rec.signal = signal_name(-code)
        else:
            rec.exit_code = code
        verdict = exit_verdict(
            proc.spec.label,
            code,
            stop_sent=proc.stop_sent,
            kill_sent=proc.kill_sent,
            stopping_services=rnd.phase is Phase.STOPPING_SERVICES,
            tearing_down=rnd.phase is Phase.TEARDOWN,
        )
        rec.status = verdict.status
        drop_stray_temps(proc.spec.env)  # it writes no more: a half-written error file goes
        self._teardown.exited(rnd, proc)
        if verdict.failure is not None:
            cause = self._cause_for(proc, code, verdict.failure)
            held = peer_exited(proc.spec.env, rec.start_time) is not None
            if rnd.phase is Phase.RUNNING and held:
                if rnd.held is None:  # wait for the failure it reports (the first one held)
                    rnd.held, rnd.held_until = cause, time.monotonic() + rnd.hold
                return
            self._fail(rnd, cause)

    def _check_held(self, rnd: RoundState) -> None:
        """A held-back consequence becomes the cause when nothing else came in time."""
        if rnd.held is None:
            return
        if rnd.phase is not Phase.RUNNING:
            rnd.held = None  # another cause came first
        elif time.monotonic() >= rnd.held_until:
            cause, rnd.held = rnd.held, None
            self._fail(rnd, cause)

    def _launcher_signals(self, rnd: RoundState, fd: int) -> None:
        for signum in read_signals(fd, self.signals):
            name = signal_label(signum)
            if signum in self.signals.stacks:
                self._dump_stacks(rnd, name)
                continue
            if signum in self.signals.forward:
                self._forward(rnd, signum, name)
                continue
            again = ending_again(rnd.own_endings, signum)
            if rnd.phase is Phase.TEARDOWN:
                if not again:  # the job is ending already: the workers keep their grace
                    self.console.say(f"received {name}: the job is ending already")
                    continue
                # A second interrupt: the user does not want to wait for the grace period.
                self.console.warn(f"received {name} again: killing the remaining processes now")
                self._teardown.kill_now(rnd)
                continue
            rnd.status = RunStatus.INTERRUPTED
            cause = launcher_signal_cause(  # one the starter passed on: named as its
                self.plan.host, self.plan.node_index, signum, "", time.time(),
                by_starter=signum in FROM_STARTER,
            )  # fmt: skip
            if signum == signal.SIGTERM and self._leave_reason is not None:
                cause, self._leave_reason = cause.replace(reason=self._leave_reason), None
            # Ctrl-C reaches only the launcher (the workers have sessions of their own):
            # the workers get it as SIGINT first, as in a terminal or under torchrun.
            first = signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM
            self._fail(rnd, cause, first=first)

    def leave_for(self, reason: str) -> None:
        """Another thread (--on_straggler exclude): this launcher leaves the job as on
        SIGTERM (an elastic node leaves, its ranks save at the stop step), the cause
        saying `reason` instead of "received SIGTERM"."""
        self._leave_reason = reason
        os.kill(os.getpid(), signal.SIGTERM)

    def _forward(self, rnd: RoundState, signum: int, name: str) -> None:
        """--signals_to_handle: `signum` to every running worker; the round goes on."""
        if self.signals.slurm_delivers:
            return  # Slurm signalled every process of the step, the workers included
        pids = [p.popen.pid for p in rnd.procs if p.alive and p.popen is not None]
        reached = forward_signal(pids, signum) if rnd.phase is not Phase.TEARDOWN else []
        n = len(reached)
        self.console.say(
            f"received {name}: passed on to {n} worker{'' if n == 1 else 's'}"
            if n
            else f"received {name}: no worker is running to pass it on to"
        )

    def _dump_stacks(self, rnd: RoundState, name: str) -> None:
        if rnd.phase is Phase.TEARDOWN or rnd.hangs is None:
            self.console.say(f"received {name}: no stacks to take now (the round is ending)")
            return
        rnd.hangs.dump(self._watched(rnd), f"received {name}")

    def _stack_request(self, rnd: RoundState, hangs: HangWatch) -> None:
        """Many nodes: another node (or this one) asked for every node's stacks. While
        tearing down the loop must not block on the others: the request is dropped."""
        if rnd.phase is Phase.TEARDOWN:
            hangs.drop_requests()
            return
        cause = hangs.answer()
        if cause is not None:
            self._fail(rnd, cause)

    def _check_hang(self, rnd: RoundState) -> None:
        """The hang rule's deadline passed: let it look; a cause it returns ends the job."""
        if rnd.phase is not Phase.RUNNING or rnd.hangs is None:
            return
        due = rnd.hangs.next_check()
        if due is None or time.monotonic() < due:
            return
        cause = rnd.hangs.check(self._watched(rnd))
        if cause is not None:
            self._fail(rnd, cause)

    @staticmethod
    def _watched(rnd: RoundState) -> list[Watched]:
        """The running trainers, as the hang rule sees them."""
        return [
            Watched(
                p.spec.rank if p.spec.rank is not None else p.spec.local_index,
                p.popen.pid,
                p.spec.log_name,
                p.log.start,
                p.spec.err_log_name,
                p.log.err_start,
            )
            for p in rnd.procs
            if p.alive and p.spec.role is Role.TRAINER and p.popen is not None
        ]

    def _remote_cause(self, rnd: RoundState, cause: RootCause | None) -> None:
        """Another node failed, or a node was lost: tear down for that cause, not publishing
        it again (it came from the job)."""
        if cause is None or rnd.phase is Phase.TEARDOWN:
            return
        self._fail(rnd, cause, publish=False)

    # ------------------------------------------------------------------ teardown
    def _fail(
        self,
        rnd: RoundState,
        cause: RootCause,
        *,
        publish: bool = True,
        first: int = signal.SIGTERM,
    ) -> None:
        """Record the root cause (the first one wins), tell the job, start the teardown
        (`first`: the signal the processes get first, `run.teardown`)."""
        if rnd.phase is Phase.TEARDOWN:
            return
        rnd.cause = cause
        rnd.exit_code = cause_exit_code(cause)
        if rnd.status == RunStatus.SUCCEEDED:
            rnd.status = RunStatus.FAILED
        if publish and rnd.on_failure is not None:
            try:
                rnd.on_failure(cause)
            except Exception as exc:  # the local teardown must happen regardless
                self.console.warn(f"could not publish the failure to the other nodes: {exc}")
        notice = cause if cause.preempted else None
        if self.warm is not None and notice is None and first == signal.SIGTERM:
            self.warm.park(rnd, cause)  # kept processes: the park signal, not SIGTERM
        self._teardown.start(rnd, cause.reason, first, notice)

    def _deadlines(self, rnd: RoundState, tee: TeeEcho | None) -> tuple[float | None, ...]:
        """When the loop wakes though nothing happened: the teardown's next step, --tee's
        next poll, a held-back consequence's end, the hang rule's next look."""
        poll = self._tee_poll if tee is not None else None
        due = rnd.hangs.next_check() if rnd.hangs is not None else None
        return (
            rnd.kill_deadline,
            time.monotonic() + poll if poll is not None else None,
            rnd.held_until if rnd.held is not None else None,
            due if rnd.phase is Phase.RUNNING else None,
        )

    # ------------------------------------------------------------------ results
    def _cause_for(self, proc: Proc, code: int, reason: str) -> RootCause:
        return process_cause(proc, self.plan.host, self.plan.node_index, code, reason)
