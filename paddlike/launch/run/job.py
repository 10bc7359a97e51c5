"""The job pipeline, one for one node and many (a one-node job's peers are itself):

    guardian (forked before any thread) -> log directory (locked)
      -> peers (LocalPeers; or node 0's store / etcd: StorePeers)
      -> rounds: reserve ports -> rendezvous -> plan -> endpoints.log, banner
                 -> supervise -> job-wide outcome (peers.finish) -> summary, report
      -> the exit code

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
import time
from collections.abc import Mapping, Sequence

from paddlike.launch.console.banner import format_banner
from paddlike.launch.console.output import Console
from paddlike.launch.console.progress import ProgressLine
from paddlike.launch.console.report import (
    report_failure,
    report_remote_failure,
    report_success,
)
from paddlike.launch.context.master import uses_etcd
from paddlike.launch.context.node import resolve_ipv4
from paddlike.launch.context.options.record import LaunchOptions
from paddlike.launch.peers.api import Peers
from paddlike.launch.peers.errors import RendezvousAborted, RendezvousError
from paddlike.launch.peers.local import LocalPeers
from paddlike.launch.peers.protocol import decode_cause
from paddlike.launch.plan.elastic import (
    ElasticRoundEnd,
    ElasticSpec,
    below_min_cause,
    is_membership_change,
    run_elastic,
)
from paddlike.launch.plan.nodejob import NodeJob, new_job_id
from paddlike.launch.plan.plan import JobFacts, LaunchPlan
from paddlike.launch.plan.policy import (
    RoundEnd,
    cause_exit_code,
    launcher_signal_cause,
    run_rounds,
)
from paddlike.launch.plan.world import RendezvousResult
from paddlike.launch.run.guardian import Guardian
from paddlike.launch.run.hangwatch import HangWatch
from paddlike.launch.run.logdir import JobClaim, LogDir, LogDirBusy, LogDirError
from paddlike.launch.run.ports import PortError, claim_ports, reserve_ports
from paddlike.launch.run.record import RunRecord
from paddlike.launch.run.signals import LauncherSignal, signals_raise
from paddlike.launch.run.supervisor import RunOutcome, Supervisor
from paddlike.summary import RootCause


class _Where:
    """What the launcher is doing, for the line a signal prints."""

    def __init__(self) -> None:
        self.waiting = "starting"
        self.peers: Peers | None = None
        self.job: NodeJob | None = None  # once a rendezvous placed it (its rank assigned)

    @property
    def what(self) -> str:
        return self.peers.waiting_for if self.peers is not None else self.waiting


def run_job(
    options: LaunchOptions,
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
    where = _Where()
    # Forked once, before any thread exists (the store's and the watches' come later):
    # a fork copies only the forking thread, and a lock held by another thread then
    # stays locked forever in the child.
    guardian = Guardian.start()
    try:
        with signals_raise():
            try:
                return _run(options, job, environ, python, console, progress, where, guardian, logs)
            except LauncherSignal as sig:
                return _stopped_by_signal(sig, where, job, console)
    finally:
        if guardian is not None:
            guardian.close()


def _run(
    options: LaunchOptions,
    job: NodeJob,
    environ: Mapping[str, str],
    python: str,
    console: Console,
    progress: ProgressLine,
    where: _Where,
    guardian: Guardian | None,
    logs: Sequence[str] = (),
) -> int:
    log_dir = os.path.abspath(options.log_dir)
    where.waiting = f"opening the log directory {log_dir}"
    try:
        logdir = LogDir.open(
            log_dir,
            overwrite=options.log_overwrite,
            host=job.host,
            job=_job_claim(options, job),
            logs=logs,
        )
    except (LogDirBusy, LogDirError) as exc:
        return _cannot_start(f"--log_dir: {exc}", options, job, environ, console, where)
    if logdir.shared_with is not None:
        holder = logdir.shared_with
        console.say(
            f"log directory {log_dir} is held by launcher pid {holder.get('pid')} on host "
            f"{holder.get('host')} of this job: this node writes to {logdir.path}"
        )
    with logdir:
        if job.workers_port is not None and job.nnodes > 1:
            try:  # node 0 claims --master_port before the others wait for it
                _ports(options, job)
            except PortError as exc:
                return _cannot_start(str(exc), options, job, environ, console, where)
        try:
            peers = _open_peers(options, job, progress, where)
        except RendezvousError as exc:
            console.error(str(exc))
            return getattr(exc, "exit_code", 1)
        finally:
            progress.clear()
        where.peers = peers
        try:
            code = _rounds(
                peers, options, job, environ, python, logdir, console, progress, guardian, where
            )
        except LauncherSignal:
            raise  # run_job tells the others first, then closes the peers
        except BaseException:
            peers.close()
            raise
        peers.close()
        return code


def _cannot_start(
    message: str,
    options: LaunchOptions,
    job: NodeJob,
    environ: Mapping[str, str],
    console: Console,
    where: _Where,
) -> int:
    """This node cannot start: one line here, and (many nodes) the others told through the
    store when it can be reached, so that they do not wait for this node. Exit 2."""
    console.error(message)
    if job.nnodes > 1:
        from paddlike.launch.peers.startfail import tell_start_failure

        where.waiting = "telling the other nodes why this launcher cannot start"
        index = job.index if job.rank_known else None  # else a placeholder until then
        tell_start_failure(options, environ, message, node_index=index, address=job.host)
    return 2


def _job_claim(options: LaunchOptions, job: NodeJob) -> JobClaim | None:
    """Which job this is, for the log directory, before the rendezvous (None on one
    node: a one-node job never shares its directory). Every node of one job computes
    the same: the job id, else where the launchers meet and the fingerprint."""
    if job.nnodes == 1:
        return None
    if uses_etcd(options):
        meeting = options.master or ""
    elif job.master is not None:
        host, port = job.master
        with contextlib.suppress(OSError, UnicodeError):
            host = resolve_ipv4(host)  # "nodea" on one node and its address on another
        meeting = f"{host}:{port}"
    else:
        meeting = ""
    return JobClaim.of(job_id=options.job_id, meeting=meeting, fingerprint=job.fingerprint)


def _open_peers(
    options: LaunchOptions, job: NodeJob, progress: ProgressLine, where: _Where
) -> Peers:
    """LocalPeers on one node; else node 0's store or etcd, connected."""
    if job.nnodes == 1:
        return LocalPeers()
    from paddlike.launch.peers.session import StorePeers

    def waiting(what: str) -> None:
        where.waiting = what

    return StorePeers.open(options, job, progress=progress.show, waiting=waiting)


def _rounds(
    peers: Peers,
    options: LaunchOptions,
    job: NodeJob,
    environ: Mapping[str, str],
    python: str,
    logdir: LogDir,
    console: Console,
    progress: ProgressLine,
    guardian: Guardian | None,
    where: _Where,
) -> int:
    """Rounds (`policy.run_rounds`) until one succeeds on every node, or restarts run out."""
    hostname = socket.gethostname()
    generated_job_id = options.job_id or new_job_id()
    record = RunRecord(logdir.path, warn=console.warn)
    hangs = HangWatch(
        logdir.path,
        console,
        host=job.host,
        node_index=job.index,
        host_label=hostname if job.nnodes == 1 else job.host,
        timeout=options.hang_timeout,
        on_hang=options.on_hang,
    )
    # One node without --job_token: a secret of its own, so that another local user cannot
    # use this job's stores or parameter servers over loopback. (Many nodes need the same
    # secret everywhere: there it comes only from --job_token / --job_token_file.)
    job_token = "" if options.job_token or job.nnodes > 1 else os.urandom(16).hex()

    leaving = False  # elastic: this node's launcher got a signal and left the job

    def one_round(round_: int, restarts: int) -> ElasticRoundEnd:
        """Round `round_` (an elastic job's rendezvous may place this node in a later one),
        after `restarts` failure restarts."""
        nonlocal job
        try:
            ports = _ports(options, job)
            entry = job.entry(ports, hostname=hostname, pid=os.getpid(), job_id=generated_job_id)
            try:
                result = peers.rendezvous(round_, entry)
            finally:
                progress.clear()
        except RendezvousAborted as exc:
            cause = decode_cause(exc.cause)
            console.say(f"the job stopped during the rendezvous: {cause.reason}")
            return ElasticRoundEnd(cause_exit_code(cause), cause, round_, 0)
        except (RendezvousError, PortError) as exc:
            console.error(str(exc))
            code = getattr(exc, "exit_code", 1)
            return ElasticRoundEnd(code, RootCause(reason=str(exc)), round_, 0)
        round_ = result.round
        job = where.job = job.placed(result)  # a rank assigned at the rendezvous is kept
        hangs.node_index, hangs.host = job.index, job.host
        facts = JobFacts(
            result.job_id,
            python,
            str(logdir.path),
            environ,
            job.interface,
            restart_count=restarts,
            job_token=job_token,
        )
        plan = job.plan(result, facts)
        elastic_round = round_ if job.elastic is not None else None
        logdir.write_endpoints(
            plan.trainer_endpoints,
            plan.server_endpoints,
            plan.heter_endpoints,
            header=_round_header(result, elastic_round),
        )
        if round_ == 0 or (job.elastic is not None and not record.rounds):
            if peers.address:
                n = len(result.nodes)
                console.say(
                    f"rendezvous with {n} node{'s' if n != 1 else ''} at {peers.address} took "
                    f"{result.elapsed:.2f} s"
                )
            console.block(format_banner(plan, logdir.path, interface=job.interface, why=job.reason))
        elif elastic_round is not None:
            console.say(
                f"round {round_}: {len(result.nodes)} nodes ({', '.join(result.hosts)}); this "
                f"node is node {job.index}, ranks {_rank_span(plan)}"
            )
        watch = peers.watch(round_, str(logdir.path), services=job.servers_wait_for_job)
        supervisor = Supervisor(
            plan,
            logdir,
            base_env=environ,
            console=console,
            guardian=guardian,
            kill_timeout=options.kill_timeout,
            tee=options.tee_indices,
        )
        hangs.channel = watch.stacks
        outcome = supervisor.run(
            restart_count=restarts,
            round_=elastic_round,
            extra_fds={watch.fd: watch.poll} if watch.fd is not None else None,
            on_failure=watch.publish,
            services_stop=watch.services,
            on_started=lambda records: record.running(plan, records, restarts),
            hangs=hangs,
        )
        own = outcome.root_cause
        survivors = 0
        if job.elastic is None:
            if own is not None:  # before waiting for the others: that may be long
                report_failure(console, own, logdir.path)
            cause = peers.finish(watch, outcome.exit_code == 0)
        else:
            nonlocal leaving
            leaving = watch.leaving
            if leaving:
                what = own.reason if own is not None else "stopped"
                console.say(f"{what}: this node leaves the elastic job; the others go on")
            cause = peers.finish(watch, outcome.exit_code == 0)
            survivors = len(peers.survivors or ())
            cause = _elastic_round_cause(
                console, job.elastic, own, cause, survivors, leaving, logdir.path
            )
            record.round_ended(round_, restarts, result.hosts, cause)
        end = conclude_round(console, record, plan, outcome, cause, restarts)
        return ElasticRoundEnd(end.exit_code, end.cause, round_, survivors)

    if job.elastic is None:
        return run_rounds(
            options.max_restarts, lambda r: RoundEnd(*one_round(r, r)[:2]), console.say
        )
    code = run_elastic(job.elastic, options.max_restarts, one_round, console.say)
    if record.rounds and not leaving:  # the job ended for all its members: say so
        peers.end_elastic(record.outcome_text())  # (nodes waiting to join stop)
    return code


def _elastic_round_cause(
    console: Console,
    spec: ElasticSpec,
    own: RootCause | None,
    cause: RootCause | None,
    survivors: int,
    leaving: bool,
    log_dir: os.PathLike[str],
) -> RootCause | None:
    """How an elastic round ended for this node, and what it prints about it: this node's
    own failure report unless a membership change explains it (a lost node's peers fail
    first); the end of the job when fewer than MIN nodes are left and none may wait."""
    if leaving:
        # this node leaves: the round ends with its own exit code, not in a new round
        return cause.replace(membership=None) if cause is not None else None
    if own is not None:
        if not is_membership_change(cause):
            report_failure(console, own, log_dir)
        elif not is_membership_change(own):
            console.say(f"{own.reason}: put down to the change of nodes, not a restart")
    if cause is not None and is_membership_change(cause) and spec.ends_with(survivors):
        cause = below_min_cause(cause, survivors, spec)
        console.error(f"the elastic job ends: {cause.reason}")
    return cause


def _round_header(result: RendezvousResult, elastic_round: int | None) -> str:
    """endpoints.log's first line in an elastic job (which round the endpoints are for);
    "" keeps Paddle's exact bytes for a fixed job."""
    if elastic_round is None:
        return ""
    n, hosts = len(result.nodes), ",".join(result.hosts)
    return f"# paddlike round {elastic_round}: {n} node{'s' if n != 1 else ''} {hosts}"


def _rank_span(plan: LaunchPlan) -> str:
    ranks = [p.rank for p in plan.processes]
    return f"{min(ranks)}-{max(ranks)}" if len(ranks) > 1 else str(ranks[0]) if ranks else "none"


def _ports(options: LaunchOptions, job: NodeJob) -> tuple[int, ...]:
    """This round's ports: on one node the consecutive ones from a given start
    (--start_port, PADDLE_START_PORT, PaddleCloud's PADDLE_PORT), else free ones reserved
    here (many nodes trade them at the rendezvous). A --master_port (collective) is the
    workers' store port: node 0 claims it as its last port instead of a free one, and a
    taken one ends the round with exit 2 naming it."""
    if not job.reserve:
        return ()

    def may_host_store() -> bool:  # no rank yet: node 0 is the node the master names
        try:
            return job.master is not None and socket.gethostbyname(job.master[0]) == job.host
        except OSError:
            return False

    claim_workers_port = job.workers_port is not None and (
        job.nnodes == 1 or (job.index == 0 if job.rank_known else may_host_store())
    )
    trainers = job.reserve - 1 if claim_workers_port else job.reserve
    if options.start_port_from and job.nnodes == 1:
        ports = claim_ports(
            options.start_port,
            trainers,
            job.host,
            source=options.start_port_from,
            limit=options.ports_num,
        )
    else:
        ports = reserve_ports(trainers, job.host)
        while job.workers_port in ports:  # free by chance: the workers' port is not theirs
            ports = reserve_ports(trainers, job.host)
    if not claim_workers_port:
        return ports
    assert job.workers_port is not None
    if job.workers_port in ports:
        from paddlike.launch.run.ports import PortTakenError

        raise PortTakenError(
            f"--master_port {job.workers_port}: also a trainer port from "
            f"{options.start_port_from} {options.start_port} (this node needs "
            f"{ports[0]}-{ports[-1]} for its trainers); give ports that do not overlap"
        )
    claimed = claim_ports(job.workers_port, 1, job.host, source="--master_port")
    return (*ports, *claimed)


def conclude_round(
    console: Console,
    record: RunRecord,
    plan: LaunchPlan,
    outcome: RunOutcome,
    cause: RootCause | None,
    round_: int,
) -> RoundEnd:
    """The round's job-wide outcome is known (`cause`, None when every node succeeded):
    write this node's summary once, say "OK" or that another node failed, and return how
    the round ended. (This node's own failure report was printed when its round ended.)"""
    exit_code = outcome.exit_code or (cause_exit_code(cause) if cause is not None else 0)
    status = "failed" if cause is not None and outcome.status == "succeeded" else outcome.status
    record.finished(plan, outcome.records, round_, status=status, exit_code=exit_code, cause=cause)
    if is_membership_change(cause):  # said already, and the next round's line follows
        return RoundEnd(exit_code, cause)
    if cause is None:
        report_success(
            console,
            trainers=outcome.trainers,
            duration=outcome.duration,
            nnodes=plan.nnodes,
            log_dir=record.log_dir,
            restarts=round_,
        )
        return RoundEnd(exit_code, None)
    if outcome.exit_code == 0:  # else the failure report is out already
        report_remote_failure(console, cause)
    return RoundEnd(exit_code, cause)


def _stopped_by_signal(sig: LauncherSignal, where: _Where, job: NodeJob, console: Console) -> int:
    """One line, the other nodes told (when connected), exit 128+N."""
    what = where.what
    peers = where.peers
    job = where.job or job
    told = False
    if peers is not None:
        cause = launcher_signal_cause(job.host, job.index, sig.name, what, time.time())
        with contextlib.suppress(LauncherSignal):  # a second signal: stop trying
            told = peers.publish_stop(cause)
    tail = "; told the other nodes" if told else ""
    console.say(f"received {sig.name} while {what}: stopping{tail}")
    if peers is not None:
        with contextlib.suppress(LauncherSignal):  # a second signal: do not wait
            if told:
                peers.wait_readers()
        with contextlib.suppress(LauncherSignal):
            peers.close(linger=False)
    return 128 + sig.signum
