"""The job pipeline, one for one node and many (a one-node job's peers are itself):

    guardian (forked before any thread) -> log directory (locked)
      -> peers (LocalPeers; or node 0's store / etcd: StorePeers)
      -> rounds (`JobRun`, one method per step of a round):
           meet (ports, rendezvous) -> place (this node's rank) -> plan -> announce
           (endpoints.log, banner) -> supervise -> settle (the job-wide outcome,
           `Peers.finish`) -> conclude (summary.json, report: `run.roundend`)
      -> the exit code

Where a round is carried out: here (`JobRun.round`). What the next round is (restart,
new members, give up) is decided by the pure rules of `plan.next_round`, one loop for fixed
and elastic jobs; the exit code by `plan.exitcode`.

Signals: from the start SIGINT, SIGTERM and SIGHUP end the launcher with 130, 143 or
129 and one line saying what it was waiting for. While the workers run the supervisor
handles them (teardown, cause published through the round's watch); anywhere else
(connecting to node 0's store, the rendezvous, waiting for the others to finish) they
raise `LauncherSignal`, and the other nodes are told (`Peers.publish_stop`).

A node's own success is reported only once the job-wide outcome is known: "OK" only
when every node succeeded.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Mapping, Sequence

from paddlike.launch.console.output import Console
from paddlike.launch.console.progress import ProgressLine
from paddlike.launch.context.node import resolve_ipv4
from paddlike.launch.peers.api import Peers, RoundWatch
from paddlike.launch.peers.notice import deliver_notice
from paddlike.launch.peers.one_node import LocalPeers
from paddlike.launch.peers.protocol import decode_cause
from paddlike.launch.peers.rendezvous_errors import RendezvousAborted, RendezvousError
from paddlike.launch.plan.exitcode import CANNOT_START, cause_exit_code, error_exit_code
from paddlike.launch.plan.layout import ports_given_everywhere
from paddlike.launch.plan.membership import ElasticSpec
from paddlike.launch.plan.next_round import RoundEnd, run_rounds
from paddlike.launch.plan.nodejob import NodeJob, new_job_id
from paddlike.launch.plan.placement import place
from paddlike.launch.plan.plan import JobFacts, LaunchPlan
from paddlike.launch.plan.world import RendezvousResult
from paddlike.launch.run.announce import announce_round
from paddlike.launch.run.consequence import consequence_hold
from paddlike.launch.run.guardian import Guardian
from paddlike.launch.run.hangwatch import HangWatch
from paddlike.launch.run.interrupt import Unsettled, Where, before_start, stopped_by_signal
from paddlike.launch.run.logdir import JobClaim, LogDir, LogDirBusy, LogDirError
from paddlike.launch.run.ports import PortError, round_ports
from paddlike.launch.run.preempt import Preemption
from paddlike.launch.run.preload.start import Preload, start_preload
from paddlike.launch.run.record import RunRecord, recovery_line
from paddlike.launch.run.roundend import (
    conclude_round,
    settle_round,
    write_failure_cause,
)
from paddlike.launch.run.runspec import RunSpec
from paddlike.launch.run.signals import LauncherSignal, signal_policy, signals_raise
from paddlike.launch.run.stragglerwatch import straggler_watch
from paddlike.launch.run.supervisor import RunOutcome, Supervisor
from paddlike.summary import ProcessRecord, RootCause, RunStatus

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.run.warm import WarmJob

__all__ = ["JobRun", "conclude_round", "run_job"]  # conclude_round: also run.roundend's


def run_job(
    spec: RunSpec,
    job: NodeJob,
    environ: Mapping[str, str],
    *,
    python: str = sys.executable,
    logs: Sequence[str] = (),
) -> int:
    """Run the job on this node to its end; returns the launcher's exit code. `logs`: the
    log files this node will write, checked before anything starts (`LogDir.open`)."""
    console = Console(color=sys.stderr.isatty() and "NO_COLOR" not in environ)
    progress = ProgressLine()
    progress.attach(console)
    where = Where()
    # Forked once, before any thread exists (the store's and the watches' come later):
    # a fork copies only the forking thread, and a lock held by another thread then
    # stays locked forever in the child.
    preload = start_preload(spec.preload, spec.workers, python, environ, console)
    if isinstance(preload, int):
        return preload  # a module that does not exist: exit 2, nothing started
    guardian = Guardian.start(deliver=deliver_notice if job.nnodes > 1 else None)
    try:
        with signals_raise(signal_policy(spec.signals_to_handle, environ)):
            try:
                return _run(
                    spec, job, environ, python, console, progress, where, guardian, logs, preload
                )
            except LauncherSignal as sig:
                return stopped_by_signal(sig, where, job, console)
    finally:
        if guardian is not None:
            guardian.close()
        if preload is not None:
            preload.close()


def _run(
    spec: RunSpec,
    job: NodeJob,
    environ: Mapping[str, str],
    python: str,
    console: Console,
    progress: ProgressLine,
    where: Where,
    guardian: Guardian | None,
    logs: Sequence[str] = (),
    preload: Preload | None = None,
) -> int:
    log_dir = os.path.abspath(spec.log_dir)
    where.waiting = f"opening the log directory {log_dir}"
    try:
        logdir = LogDir.open(
            log_dir,
            overwrite=spec.log_overwrite,
            host=job.host,
            job=_job_claim(spec, job),
            logs=logs,
        )
    except (LogDirBusy, LogDirError) as exc:
        return _cannot_start(f"--log_dir: {exc}", spec, job, environ, console, where)
    if logdir.shared_with is not None:
        holder = logdir.shared_with
        console.say(
            f"log directory {log_dir} is held by launcher pid {holder.get('pid')} on host "
            f"{holder.get('host')} of this job: this node writes to {logdir.path}"
        )
    with logdir:
        if (
            job.workers_port is not None or ports_given_everywhere(spec.ports.start_port_from)
        ) and (job.nnodes > 1):
            try:  # node 0 claims --master_port (each node PaddleCloud's) before the rendezvous
                round_ports(spec.ports, job)
            except PortError as exc:
                return _cannot_start(str(exc), spec, job, environ, console, where)
        try:
            peers = _open_peers(spec, job, progress, where)
        except RendezvousError as exc:
            if exc.start_refusal:  # node 0's store port taken: nothing started, others told
                from paddlike.launch.peers.startfail import cannot_host
                line = cannot_host(spec.peers_options, environ, exc)
                return _cannot_start(line, spec, job, environ, console, where)
            console.error(str(exc))
            return error_exit_code(exc)
        finally:
            progress.clear()
        where.peers = peers
        run = JobRun(spec, job, environ, python=python, logdir=logdir, console=console,
                     progress=progress, guardian=guardian, peers=peers, where=where)  # fmt: skip
        run.preload = preload
        try:
            gpus: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
            if spec.gpu_log is not None:  # Paddle's --enable_gpu_log: <job id>.gpu.log
                from paddlike.launch.run.gpulog import job_gpu_log

                gpus = job_gpu_log(spec.gpu_log, environ, logdir.path, run.job_id, console)
            with gpus:
                code = run.run()
        except LauncherSignal:
            raise  # run_job tells the others first, then closes the peers
        except BaseException:
            peers.close()
            raise
        peers.close()
        return code


def _cannot_start(
    message: str,
    spec: RunSpec,
    job: NodeJob,
    environ: Mapping[str, str],
    console: Console,
    where: Where,
) -> int:
    """This node cannot start: one line here, and (many nodes) the others told through the
    store when it can be reached, so that they do not wait for this node. Exit 2."""
    console.error(message)
    if job.nnodes > 1:
        from paddlike.launch.peers.startfail import tell_start_failure

        where.waiting = "telling the other nodes why this launcher cannot start"
        index = job.index if job.rank_known else None  # else a placeholder until then
        tell_start_failure(  # where they meet, from the options alone (`RunSpec.peers_options`)
            spec.peers_options, environ, message, node_index=index, address=job.host
        )
    return CANNOT_START


def _job_claim(spec: RunSpec, job: NodeJob) -> JobClaim | None:
    """The job's claim on its log directory before the rendezvous, the same on every node
    (its id, else where the launchers meet and the fingerprint); None on one node."""
    if job.nnodes == 1:
        return None
    if spec.etcd_master:
        meeting = spec.etcd_master
    elif job.master is not None:
        host, port = job.master
        with contextlib.suppress(OSError, UnicodeError):
            host = resolve_ipv4(host)  # "nodea" on one node and its address on another
        meeting = f"{host}:{port}"
    else:
        meeting = ""
    return JobClaim.of(job_id=spec.job_id, meeting=meeting, fingerprint=job.fingerprint)


def _open_peers(spec: RunSpec, job: NodeJob, progress: ProgressLine, where: Where) -> Peers:
    """LocalPeers on one node; else node 0's store or etcd, connected, with the job's
    rounds (fixed or elastic)."""
    if job.nnodes == 1:
        return LocalPeers()
    from paddlike.launch.peers.links import open_link
    from paddlike.launch.peers.rounds import rounds_for
    from paddlike.launch.peers.session import StorePeers

    def waiting(what: str) -> None:
        where.waiting = what

    assert spec.peers is not None  # (`launch.specs.run_spec` made it)
    link = open_link(spec.peers, job, progress=progress.show, waiting=waiting)
    rounds = rounds_for(
        link,
        job.elastic,
        timeout=spec.rdzv_timeout,
        progress=progress.show,
        assign=job.assign_ranks,
    )
    return StorePeers(
        link,
        rounds,
        node_index=job.index,
        hosts=job.hosts,
        heartbeat_timeout=spec.heartbeat_timeout,
    )


class JobRun:
    """The job's run of rounds on this node: rounds until one succeeds on every node, or
    the rules say stop. It owns what lasts across rounds (its spec, log directory,
    console, guardian, peers, summary record, hang watch); each round's things (its
    plan, watch, supervisor) are made by the step that needs them."""

    def __init__(
        self,
        spec: RunSpec,
        job: NodeJob,
        environ: Mapping[str, str],
        *,
        python: str,
        logdir: LogDir,
        console: Console,
        progress: ProgressLine,
        guardian: Guardian | None,
        peers: Peers,
        where: Where,
    ) -> None:
        self.spec = spec
        self.job = job
        self.environ = environ
        self.python = python
        self.logdir = logdir
        self.console = console
        self.progress = progress
        self.guardian = guardian
        self.peers = peers
        self.where = where
        self.hostname = socket.gethostname()
        self.job_id = spec.job_id or new_job_id()
        self.record = RunRecord(logdir.path, warn=console.warn)
        self.hangs = HangWatch(
            logdir.path,
            console,
            host=job.host,
            node_index=job.index,
            host_label=self.hostname if job.nnodes == 1 else job.host,
            timeout=spec.hang_timeout,
            on_hang=spec.on_hang,
            on_diagnosis=self.record.hang_diagnosed,
        )
        # One node without --job_token: a secret of its own, so that another local user
        # cannot use this job's stores or parameter servers over loopback. (Many nodes need
        # the same secret everywhere: there it comes only from --job_token / --job_token_file.)
        self.job_token = "" if spec.job_token_given or job.nnodes > 1 else os.urandom(16).hex()
        self.leaving = False  # elastic: this node's launcher got a signal and left the job
        self.last_cause: RootCause | None = None  # the cause of the round before
        self.preload: Preload | None = None  # --preload's zygote (launch/run/preload/)
        self.warm: WarmJob | None = None  # in-process restarts (`run.warm`): where a round
        if spec.max_restarts or job.elastic is not None:  # can follow a failure
            from paddlike.launch.run.warm import WarmJob

            wait = spec.rdzv_timeout + spec.kill_timeout + 60.0  # the next round's start
            self.warm = WarmJob.create(wait, guardian)

    @property
    def elastic(self) -> ElasticSpec | None:
        return self.job.elastic

    def run(self) -> int:
        """The rounds (`next_round.run_rounds`, fixed and elastic jobs alike); the exit code."""
        try:
            code = run_rounds(self.elastic, self.spec.max_restarts, self.round, self.console.say)
        finally:
            if self.warm is not None and self.warm.close(self.spec.kill_timeout, self.console):
                self.record.kept_ended()  # kept for a round that did not come: killed
        if self.elastic is not None and self.record.rounds and not self.leaving:
            # an elastic job ended for all its members: nodes waiting to join stop
            self.peers.end_elastic(self.record.outcome_text())
        return code

    def round(self, round_: int, restarts: int) -> RoundEnd:
        """Round `round_` (elastic: the rendezvous may place us later), after `restarts`."""
        if self.elastic is None and restarts and self.last_cause is not None:
            self.record.restarted(restarts, self.last_cause)  # a restart: why, in the summary
        end = self._round(round_, restarts)
        self.last_cause = end.cause
        return end

    def _round(self, round_: int, restarts: int) -> RoundEnd:
        met = self.meet(round_)
        if isinstance(met, RoundEnd):
            return met
        round_ = met.round
        self.place(met)
        plan = self.plan(met, restarts)
        if self.job.nnodes > 1 or self.spec.preflight not in (None, "off"):  # issue 35
            from paddlike.launch.health.gate import check_before_start

            if (unstarted := check_before_start(self, met, plan, restarts)) is not None:
                return unstarted
        # a signal from here until the workers start: summary.json says so (`before_start`)
        with before_start(self.record, plan, restarts, self.where):
            try:
                self.announce(met, plan)
            except OSError as exc:  # a full disk, above all: the job ends, saying which
                return self.cannot_write(exc, met, plan, restarts)
            watch = self.peers.watch(
                round_, str(self.logdir.path), services=self.job.servers_wait_for_job
            )
            notify = self.guardian is not None and watch.death_notice is not None
            if notify:  # if this launcher dies now, the others learn it first
                self.guardian.note(watch.death_notice)  # type: ignore[union-attr]
            if self.preload is not None:  # its imports done (or one warning: cold starts)
                self.preload.wait_ready()
        outcome = self.supervise(plan, watch, restarts, round_)
        self.where.unsettled = Unsettled(self.record, plan, outcome, restarts, watch)
        if outcome.status == RunStatus.INTERRUPTED:  # this launcher's signal (scancel): its
            self.record.preemption = outcome.preemption  # word now; the scheduler's SIGKILL
            self.record.finished(  # may come while the nodes settle (Slurm's KillWait)
                plan, outcome.records, restarts, status=outcome.status,
                exit_code=outcome.exit_code, cause=outcome.root_cause,
            )  # fmt: skip
        cause, survivors = self.settle(watch, outcome, restarts)
        if self.elastic is not None and cause is not None:  # quarantine (`launch.health`)
            from paddlike.launch.health.gate import note_round_end

            note_round_end(self, round_, cause)
        if notify:
            self.guardian.note(None)  # type: ignore[union-attr]  (a death now is the next round's)
        if self.elastic is not None:
            self.record.round_ended(round_, restarts, met.hosts, cause)
        end = conclude_round(self.console, self.record, plan, outcome, cause, restarts)
        self.where.unsettled = None
        return end._replace(round=round_, survivors=survivors)

    # -- the steps of a round --

    def meet(self, round_: int) -> RendezvousResult | RoundEnd:
        """This round's ports, then the rendezvous; how the round ended when it failed."""
        try:
            ports = round_ports(self.spec.ports, self.job)
            entry = self.job.entry(
                ports, hostname=self.hostname, pid=os.getpid(), job_id=self.job_id
            )
            try:
                return self.peers.rendezvous(round_, entry)
            finally:
                self.progress.clear()
        except RendezvousAborted as exc:
            cause = decode_cause(exc.cause)
            self.console.say(f"the job stopped during the rendezvous: {cause.reason}")
            return RoundEnd(cause_exit_code(cause), cause, round_, 0)
        except (RendezvousError, PortError) as exc:
            self.console.error(str(exc))
            code = error_exit_code(exc)
            return RoundEnd(code, RootCause(reason=str(exc)), round_, 0)

    def place(self, result: RendezvousResult) -> None:
        """A rank assigned at the rendezvous is kept from then on."""
        job = self.where.job = self.job = self.job.placed(result)
        self.hangs.node_index, self.hangs.host = job.index, job.host

    def plan(self, result: RendezvousResult, restarts: int) -> LaunchPlan:
        """The round's plan: the planner of the job's mode (`plan.planners`) from the world
        the rendezvous agreed, then placed (--numa_binding, -t/-r: `plan.placement`)."""
        facts = JobFacts(
            result.job_id,
            self.python,
            str(self.logdir.path),
            self.environ,
            self.job.interface,
            restart_count=restarts,
            job_token=self.job_token,
        )
        plan = self.job.planner.plan(result, facts)  # every process's rank, env, argv
        return place(plan, self.job.placement)  # where each runs, what the console shows

    def announce(self, result: RendezvousResult, plan: LaunchPlan) -> None:
        """endpoints.log; the banner on a job's first round, else an elastic round's line."""
        first = result.round == 0 or (self.elastic is not None and not self.record.rounds)
        announce_round(self.logdir, self.console, self.peers, self.job, result, plan, first)

    def supervise(
        self, plan: LaunchPlan, watch: RoundWatch, restarts: int, round_: int
    ) -> RunOutcome:
        """This node's processes, from start to end, under the round's watch."""
        warm = self.warm and self.warm.round(self.elastic, restarts, self.spec, plan.nnodes > 1)
        supervisor = Supervisor(
            plan,
            self.logdir,
            base_env=self.environ,
            console=self.console,
            guardian=self.guardian,
            kill_timeout=self.spec.kill_timeout,
            tee=self.spec.tee,
            tee_among_hosts=self.job.started_by_cluster,
            signals=signal_policy(self.spec.signals_to_handle, self.environ),
            preload=self.preload,
            warm=warm,
        )
        self.hangs.channel = watch.stacks
        notice = Preemption.of(plan, str(self.logdir.path), watch, self.console)
        stragglers = straggler_watch(
            self.spec, plan, self.logdir.path, self.console, self.record, watch.stacks,
            self.elastic, leave_for=supervisor.leave_for,
            echo_relayed=not self.job.started_by_cluster,  # else node 0's line is on this console
        )

        def started(records: Sequence[ProcessRecord]) -> None:
            if self.last_cause is not None:  # a restart or a new round: who was kept
                kept = [p.record for p in warm.adopted] if warm is not None else []
                self.record.recovered(round_, restarts, records, kept, self.last_cause)
                if kept:
                    self.console.say(recovery_line(restarts, self.spec.max_restarts, records, kept))
            self.record.running(plan, records, restarts)
            stragglers.start(plan.job_id, records)  # --straggler_check (issue 37)

        try:
            outcome = supervisor.run(
                restart_count=restarts,
                round_=round_ if self.elastic is not None else None,
                extra_fds={watch.fd: watch.poll} if watch.fd is not None else None,
                on_failure=watch.publish,
                services_stop=watch.services,
                on_started=started,
                hangs=self.hangs,
                hold=consequence_hold(plan.nnodes, self.spec.heartbeat_timeout),
                on_notice=notice.start,
            )
        finally:
            stragglers.stop()
        return outcome._replace(preemption=notice.outcome(outcome.records))

    def cannot_write(
        self, exc: OSError, result: RendezvousResult, plan: LaunchPlan, restarts: int
    ) -> RoundEnd:
        """This node cannot write its log directory: nothing starts here; the others are
        told through the round's watch (they stop), and the round ends everywhere with it."""
        cause = write_failure_cause(exc, self.job.host, self.job.index)
        watch = self.peers.watch(result.round, str(self.logdir.path), services=False)
        watch.publish(cause)
        outcome = RunOutcome(1, [], cause, RunStatus.FAILED, 0.0)
        cause, survivors = self.settle(watch, outcome, restarts)
        end = conclude_round(self.console, self.record, plan, outcome, cause, restarts)
        return end._replace(round=result.round, survivors=survivors)

    def settle(
        self, watch: RoundWatch, outcome: RunOutcome, restarts: int = 0
    ) -> tuple[RootCause | None, int]:
        """The round's job-wide cause and (elastic) its survivors (`run.roundend`)."""
        cause, survivors, self.leaving = settle_round(
            self.peers, watch, outcome, self.console, self.elastic, self.logdir.path,
            restarts=restarts, max_restarts=self.spec.max_restarts,
        )  # fmt: skip
        return cause, survivors
