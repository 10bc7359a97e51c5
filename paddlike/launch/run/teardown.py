"""The teardown policy: SIGTERM, a grace period, SIGKILL, reap every child.

    a cause (a failed process, a signal, a remote cause) or the servers' stop
      -> SIGTERM to every process group (and SIGCONT to a stopped process after it)
      -> wait up to kill_timeout, then SIGKILL the groups still there (named first)
      -> reap every child; one still there long after SIGKILL is given up on, named

    the launcher's own SIGINT (Ctrl-C in its terminal, which reaches only the launcher:
    the workers run in sessions of their own)
      -> SIGINT to every process group first, so that a script's
         `except KeyboardInterrupt:` runs as it would under torchrun or in a terminal
      -> wait up to 5 s (kill_timeout if shorter), then SIGTERM to the groups still there
      -> wait up to kill_timeout, then SIGKILL, as above

    a preemption notice (`RootCause.preempted`: SIGTERM to any node's launcher)
      -> this node's ranks told to wait for the job's stop step (`rnd.on_notice`)
      -> SIGTERM to each main process only: its children (DataLoader workers) keep running
         while it saves, and get SIGTERM when it has exited; then the stop step is agreed
      -> at kill_timeout after the notice, SIGKILL to the groups still there, each rank
         named ("still running ... after the notice: its checkpoint may be partial")

Apart from the event loop (`run.supervisor`), which decides when a round tears down
and wakes this policy at its deadline: what the policy does to the processes, what it
says and how long it waits reads here whole. A round never ends with a child
unreaped: `close_all` is the loop's last resort.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from paddlike.launch.run import linux, spawn
from paddlike.launch.run.roundstate import Phase, Proc, RoundState
from paddlike.summary import ProcessStatus, RootCause, by_signal, notice_source

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.console.output import Console
    from paddlike.launch.peers.services import ServicesStop
    from paddlike.launch.run.guardian import Guardian

# After Ctrl-C's SIGINT, SIGTERM follows within this (or kill_timeout, if shorter): a user
# at a terminal waits, where a scheduler's notice gives the full kill_timeout to save.
INTERRUPT_GRACE = 5.0
# A notice from another node carries that node's wall time: a delay beyond this is taken
# for the two clocks' disagreement (the grace then counts from its arrival here).
NOTICE_CLOCK_SLACK = 5.0
# After SIGKILL a process can only linger in uninterruptible sleep; don't wait forever.
REAP_AFTER_KILL = 10.0


class Teardown:
    """Stops this node's process groups: SIGTERM, `kill_timeout`, SIGKILL, reap.

    The `guardian` forgets each group once its leader is reaped (the id may be reused).
    """

    def __init__(self, console: Console, guardian: Guardian | None, kill_timeout: float) -> None:
        self.console = console
        self.guardian = guardian
        self.kill_timeout = kill_timeout

    def start(
        self,
        rnd: RoundState,
        reason: str,
        first: int = signal.SIGTERM,
        notice: RootCause | None = None,
    ) -> None:
        """Tear the round down for a cause's `reason`: say what is stopped, and how.
        `first`: SIGTERM, or SIGINT for the launcher's own SIGINT (SIGTERM follows it).
        `notice`: a preemption notice, which gives the ranks its grace to save."""
        if notice is not None and first == signal.SIGTERM:
            self._start_notice(rnd, notice)
            return
        rnd.phase = Phase.TEARDOWN
        others = sum(1 for p in rnd.procs if p.alive and not p.parking)
        kept = sum(1 for p in rnd.procs if p.parking)
        if kept:  # `run.warm`: they tear their groups down and wait for the next round
            self.console.say(
                f"{reason}: keeping {kept} process{'es' if kept > 1 else ''} for an in-process "
                f"restart (its groups torn down; SIGTERM if not parked within "
                f"{self.kill_timeout:g} s)"
            )
        if others:
            failed = any(p.record.status == ProcessStatus.FAILED for p in rnd.procs)
            other = "other " if failed else ""
            grace = f"{self.kill_timeout:g} s"
            how = (
                f"SIGINT, SIGTERM after {self.interrupt_grace:g} s, SIGKILL {grace} later; "
                "Ctrl-C again kills them at once"
                if first == signal.SIGINT
                else f"SIGTERM, SIGKILL after {grace}"
            )
            self.console.say(
                f"{reason}: stopping {others} {other}process{'es' if others > 1 else ''} ({how})"
            )
        self.stop_groups(rnd.procs, first)
        first_grace = self.interrupt_grace if first == signal.SIGINT else self.kill_timeout
        rnd.kill_deadline = time.monotonic() + first_grace

    @property
    def interrupt_grace(self) -> float:
        return min(self.kill_timeout, INTERRUPT_GRACE)

    def _start_notice(self, rnd: RoundState, notice: RootCause) -> None:
        """SIGTERM to each main process only; SIGKILL `kill_timeout` after the notice."""
        rnd.phase = Phase.TEARDOWN
        rnd.notice = notice
        sent = time.time()
        at = time.strftime("%H:%M:%S", time.localtime(notice.time or sent))
        alive = [p for p in rnd.procs if p.alive and p.popen is not None]
        elapsed = sent - (notice.time or sent)  # another node's clock: trusted if it is sane
        if not 0.0 <= elapsed <= NOTICE_CLOCK_SLACK:
            elapsed = 0.0
        grace = max(0.0, self.kill_timeout - elapsed)
        source = notice_source(notice.signal, notice.node_index, notice.host, notice.reason)
        what = "preemption notice" if by_signal(notice.reason) else "stop notice"
        self.console.say(
            f"{what}: {source} at {at}: "
            f"SIGTERM to {len(alive)} process{'es' if len(alive) != 1 else ''} "
            f"(their children once they exit), SIGKILL {self.kill_timeout:g} s after the notice"
        )
        # the ranks marked (a rank's SIGTERM is a notice only then), SIGTERM, and only then
        # the stop step agreed: a rank that saved and exited before its SIGTERM came could
        # die of it in its interpreter's finalization
        agree = None
        if rnd.on_notice is not None:
            try:
                agree = rnd.on_notice(notice)
            except Exception as exc:  # the grace and the teardown must happen regardless
                self.console.warn(f"could not tell the ranks about the notice: {exc}")
        self.stop_groups(alive, signal.SIGTERM, group=False)
        if agree is not None:
            agree()
        rnd.kill_deadline = time.monotonic() + grace

    def exited(self, rnd: RoundState, proc: Proc) -> None:
        """After a notice, a main process that exited: its children (DataLoader workers)
        may stop now; exit 0 is a rank that saved and stopped as asked (ok, not killed)."""
        if rnd.notice is not None and proc.popen is not None:
            spawn.signal_group(proc.popen.pid, signal.SIGTERM)
            if proc.returncode == 0 and not proc.kill_sent:
                proc.record.status = ProcessStatus.OK

    def maybe_stop_services(self, rnd: RoundState, services_stop: ServicesStop | None) -> None:
        """Once this node's trainers all exited 0: stop the servers, or (many nodes) say so
        (`services_stop` decides when the whole job's are done)."""
        if rnd.phase is not Phase.RUNNING:
            return
        trainers = [p for p in rnd.procs if not p.is_service]
        if any(p.returncode != 0 for p in trainers):
            return
        if services_stop is not None:
            if not rnd.trainers_reported:
                rnd.trainers_reported = True
                services_stop.local_trainers_done()
            return
        if trainers:
            self.stop_services(rnd, "all trainers finished")

    def stop_services(self, rnd: RoundState, why: str) -> None:
        """The servers' stop (PS mode): the same SIGTERM and grace; the round goes on."""
        services = [p for p in rnd.procs if p.is_service and p.alive]
        if not services:
            return
        rnd.phase = Phase.STOPPING_SERVICES
        self.console.say(f"{why}: asking the servers to stop")
        self.stop_groups(services)
        rnd.kill_deadline = time.monotonic() + self.kill_timeout

    def stop_groups(self, procs: list[Proc], sig: int = signal.SIGTERM, group: bool = True) -> None:
        """SIGTERM (or SIGINT); a stopped process (SIGSTOP) cannot act on it until
        continued, so it gets SIGCONT after it (said once, since it explains the wait that
        may follow). `group=False`: the main processes only (a preemption notice)."""
        name = signal.Signals(sig).name
        procs = [p for p in procs if not p.parking]  # given the park signal instead
        for proc in procs:
            if proc.stopped or not proc.alive or proc.popen is None:
                continue
            if linux.is_stopped(proc.popen.pid):
                proc.stopped = True
                self.console.say(
                    f"{proc.spec.label} (pid {proc.record.pid}) is stopped (SIGSTOP, or held by "
                    f"a debugger): sending SIGCONT after {name} so that it can exit"
                )
        self.signal_groups(procs, sig, group)
        self.signal_groups([p for p in procs if p.stopped], signal.SIGCONT)

    def signal_groups(self, procs: list[Proc], sig: int, group: bool = True) -> None:
        """Signal each process's whole group (its children too); exited leaders' groups
        may still hold grandchildren, so they are signalled as well. `group=False`: each
        live main process only."""
        for proc in procs:
            if proc.popen is None:
                continue
            if proc.alive:
                if sig == signal.SIGKILL:
                    proc.kill_sent = True
                elif sig in (signal.SIGTERM, signal.SIGINT):
                    proc.stop_sent = True
                    proc.stop_signal = sig
            if group:
                spawn.signal_group(proc.popen.pid, sig)
            elif proc.alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(proc.popen.pid, sig)

    def check_deadline(self, rnd: RoundState) -> None:
        """At the deadline: SIGTERM whoever outlived the grace after SIGINT, SIGKILL whoever
        outlived it after SIGTERM (named, with the fix), or, once SIGKILL had its time too,
        give up on what is still there."""
        if rnd.kill_deadline is None or time.monotonic() < rnd.kill_deadline:
            return
        late = [p for p in rnd.procs if p.alive and p.parking]
        if late:  # not parked in time: the teardown as without `restartable`
            for proc in late:
                proc.parking = False
                self.console.say(
                    f"{proc.spec.label} (pid {proc.record.pid}) did not park within "
                    f"{self.kill_timeout:g} s; sending SIGTERM"
                )
            self.stop_groups(late)
            rnd.kill_deadline = time.monotonic() + self.kill_timeout
            return
        stubborn = [p for p in rnd.procs if p.alive and p.stop_sent and not p.kill_sent]
        interrupted = [p for p in stubborn if p.stop_signal == signal.SIGINT]
        if interrupted:
            for proc in interrupted:
                self.console.say(
                    f"{proc.spec.label} (pid {proc.record.pid}, {proc.spec.log_name}) did not "
                    f"exit within {self.interrupt_grace:g} s of SIGINT; sending SIGTERM "
                    f"(SIGKILL {self.kill_timeout:g} s later)"
                )
            self.stop_groups(interrupted, signal.SIGTERM)
            rnd.kill_deadline = time.monotonic() + self.kill_timeout
            return
        saving = [p for p in stubborn if not p.stopped] if rnd.notice is not None else []
        if saving:  # after a notice: a rank still saving (a stopped one is said below)
            for proc in saving:
                self.console.warn(
                    f"{proc.spec.label} (node {rnd.notice_node}, {proc.record.host}) was still "
                    f"running {self.kill_timeout:g} s after the notice: killed, its checkpoint "
                    f"may be partial ({proc.spec.log_name})"
                )
            self.signal_groups(saving, signal.SIGKILL)
            stubborn = [p for p in stubborn if p.stopped]
            rnd.kill_deadline = time.monotonic() + REAP_AFTER_KILL
            if not stubborn:
                return
        if stubborn:
            for proc in stubborn:
                if proc.stopped:  # not the script's fault: no advice about SIGTERM
                    self.console.warn(
                        f"{proc.spec.label} (pid {proc.record.pid}, {proc.spec.log_name}) was "
                        f"stopped and did not exit within {self.kill_timeout:g} s of SIGTERM "
                        "and SIGCONT; sending SIGKILL"
                    )
                    continue
                self.console.warn(
                    f"{proc.spec.label} (pid {proc.record.pid}, {proc.spec.log_name}) did not "
                    f"exit within {self.kill_timeout:g} s of SIGTERM; sending SIGKILL "
                    f"(make it exit on SIGTERM, or raise --kill_timeout)"
                )
            self.signal_groups(stubborn, signal.SIGKILL)
            rnd.kill_deadline = time.monotonic() + REAP_AFTER_KILL
            return
        lost = [p for p in rnd.procs if p.alive]
        for proc in lost:
            self.console.warn(
                f"{proc.spec.label} (pid {proc.record.pid}) is still there "
                f"{REAP_AFTER_KILL:g} s after SIGKILL (stuck in the kernel?); giving up on it"
            )
            proc.returncode = -signal.SIGKILL
            proc.lost = True
            proc.record.status = ProcessStatus.KILLED
            proc.record.signal = "SIGKILL"
            proc.record.end_time = time.time()
        rnd.kill_deadline = None

    def kill_now(self, rnd: RoundState) -> None:
        """A second interrupt: the user does not want to wait for the grace period."""
        alive = [p for p in rnd.procs if p.alive and not p.kill_sent]
        self.signal_groups(alive, signal.SIGKILL)
        rnd.kill_deadline = time.monotonic() + REAP_AFTER_KILL

    def release_groups(self, rnd: RoundState) -> None:
        """The round is over: whatever the leaders left in their groups goes too, every
        child is reaped, and the guardian forgets the groups (their ids may be reused)."""
        self.signal_groups([p for p in rnd.procs if not p.parked], signal.SIGKILL)
        self._reap_all(rnd)

    def _reap_all(self, rnd: RoundState) -> None:
        """Wait for every child (a lost one aside) and close its pidfd."""
        for proc in rnd.procs:
            if proc.parked:
                continue  # kept for the next round (`run.warm`)
            if proc.popen is not None and proc.popen.returncode is None and not proc.lost:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.popen.wait(timeout=REAP_AFTER_KILL)
            if proc.pidfd >= 0:
                os.close(proc.pidfd)
                proc.pidfd = -1
            reaped = proc.popen is not None and proc.popen.returncode is not None
            if reaped and proc.guarded and self.guardian is not None:
                # its group id may be reused now: the guardian must not kill it later
                self.guardian.remove(proc.popen.pid)
                proc.guarded = False

    def close_all(self, rnd: RoundState) -> None:
        """Last resort (an exception in the loop): never leave a child running or unreaped."""
        alive = [p for p in rnd.procs if p.alive]
        self.signal_groups(alive, signal.SIGKILL)
        self._reap_all(rnd)
