"""The launcher's many-node path: rendezvous, supervise, abort job-wide, restart.

    main ─► NodeJob (collective_node_job / ps_node_job) ─► run_multinode
              log dir ─► JobSession (store on node 0, or etcd) ─► rounds:
                reserve ports ─► rendezvous ─► plan ─► supervise (JobWatch) ─► finish

Signals: from the start of this path SIGINT, SIGTERM and SIGHUP end the launcher with
130, 143 or 129 and one line saying what it was waiting for. While the workers run the
supervisor handles them (teardown, cause published by its `on_failure`); anywhere else
(connecting to node 0's store, the rendezvous, waiting for the others to finish) the
handler here raises `LauncherSignal`, and `run_multinode` tells the other nodes through
the session (`JobSession.publish_stop`) when it is connected, so that they end too.

A node's own success is reported only once the job-wide outcome is known: "OK" only
when every node succeeded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from paddlike.distributed.store import StoreError
from paddlike.launch.console.progress import ProgressLine
from paddlike.launch.peers.rendezvous import NodeEntry, RendezvousResult
from paddlike.launch.peers.watch import decode_cause
from paddlike.summary import RootCause

if TYPE_CHECKING:
    from paddlike.launch.peers.session import JobSession
    from paddlike.launch.plan.plan import JobFacts, LaunchPlan

LAUNCHER_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class NodeJob:
    """This node's part of a many-node job, as the rounds need it (collective or PS).

    `reserve`: how many ports this node reserves and publishes at each rendezvous
    (collective: one per trainer and the workers' store; PS: none, its ports are given
    or derived from --start_port identically on every node). `plan` builds the round's
    plan from the rendezvous result (every node's ports, the job id in force).
    `servers_wait_for_job`: PS; the servers stop when every trainer of the job is done.
    """

    hosts: tuple[str, ...]  # every node's address, in node order
    index: int
    interface: str
    reason: str  # how this node was matched, for the banner
    master: tuple[str, int]  # the launchers' TCP store (unless --master etcd://...)
    fingerprint: dict[str, str]
    reserve: int
    plan: Callable[[RendezvousResult, JobFacts], LaunchPlan]
    servers_wait_for_job: bool = False


def launchers_master(options, hosts, scheduler_master: str | None) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    """Where the launchers meet: `rendezvous.master_address`, except that a scheduler's
    PADDLE_MASTER (PaddleCloud) is used when neither --master nor --master_addr is given;
    an explicit option that contradicts it is a UsageError naming both.

    PADDLE_MASTER=10.0.0.5:7000                        -> ("10.0.0.5", 7000)
    PADDLE_MASTER=10.0.0.5:7000, --master_port 7000    -> ("10.0.0.5", 7000)
    PADDLE_MASTER=10.0.0.5:7000, --master 10.0.0.6:7000 -> UsageError (--master)
    """
    from paddlike.launch.context.options import DEFAULT_MASTER_PORT, UsageError
    from paddlike.launch.peers.rendezvous import master_address

    given = master_address(options.master, options.master_addr, options.master_port, hosts)
    if not scheduler_master or (options.master and options.master.startswith("etcd://")):
        return given
    host, sep, port_text = scheduler_master.rpartition(":")
    if not sep or not port_text.isdigit() or not host:
        raise UsageError(
            f"PADDLE_MASTER: expected ip:port, got {scheduler_master!r}", "PADDLE_MASTER"
        )
    theirs = (host, int(port_text))
    if options.master and given != theirs:
        raise UsageError(
            f"--master: {options.master!r} contradicts PADDLE_MASTER={scheduler_master} set by "
            "the scheduler; drop one of them",
            "--master",
        )
    if options.master_addr and options.master_addr != host:
        raise UsageError(
            f"--master_addr: {options.master_addr!r} contradicts PADDLE_MASTER="
            f"{scheduler_master} set by the scheduler; drop one of them",
            "--master_addr",
        )
    if options.master_port not in (DEFAULT_MASTER_PORT, theirs[1]):
        raise UsageError(
            f"--master_port: {options.master_port} contradicts PADDLE_MASTER="
            f"{scheduler_master} set by the scheduler; drop one of them",
            "--master_port",
        )
    return theirs


def collective_node_job(options, node, devices) -> NodeJob:  # type: ignore[no-untyped-def]
    """Collective mode: ports reserved here and traded at the rendezvous; raises UsageError
    when --master* contradict the scheduler's PADDLE_MASTER."""
    from paddlike.launch.peers.rendezvous import fingerprint
    from paddlike.launch.plan.plan import EndpointLayout, plan_collective

    hosts, nproc = tuple(node.hosts), devices.nproc

    def plan(result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        layout = EndpointLayout(
            result.hosts,
            node.node_index,
            tuple(n.ports[:nproc] for n in result.nodes),
            master_port=result.nodes[0].ports[nproc],
        )
        return plan_collective(options, layout, devices, facts)

    return NodeJob(
        hosts=hosts,
        index=node.node_index,
        interface=node.interface,
        reason=node.reason,
        master=launchers_master(options, hosts, node.scheduler_master),
        fingerprint=fingerprint(
            # torchrun style: every node knows only the count until the rendezvous
            ips=(f"{len(hosts)} nodes, found at the rendezvous",) if node.discovered else hosts,
            devices_per_node=len(options.gpus or ()),
            nproc_per_node=nproc,
            run_mode=options.run_mode,
            job_id=options.job_id,
            script=options.training_script,
            script_args=options.training_script_args,
        ),
        reserve=nproc + 1,
        plan=plan,
    )


def ps_node_job(options, layout, interface: str, reason: str) -> NodeJob:  # type: ignore[no-untyped-def]
    """Parameter-server lists on several nodes: the node holding the first server hosts the
    launchers' store (unless --master/--master_addr say otherwise); raises UsageError when
    --master_port is a port the lists give to a server or trainer there."""
    from paddlike.launch.peers.rendezvous import master_address, ps_fingerprint, ps_master_port
    from paddlike.launch.plan.plan import plan_ps

    hosts = tuple(layout.node_hosts)
    master = master_address(options.master, options.master_addr, options.master_port, hosts)
    taken = (*layout.servers, *layout.trainers, layout.gloo_endpoint)
    master = (master[0], ps_master_port(master, options.master_port, taken))

    def plan(result: RendezvousResult, facts: JobFacts) -> LaunchPlan:
        return plan_ps(options, layout, facts)

    return NodeJob(
        hosts=hosts,
        index=layout.node_index,
        interface=interface,
        reason=reason,
        master=master,
        fingerprint=ps_fingerprint(
            servers=layout.servers,
            trainers=layout.trainers,
            nodes=hosts,
            run_mode=options.run_mode,
            job_id=options.job_id,
            script=options.training_script,
            script_args=options.training_script_args,
        ),
        reserve=0,
        plan=plan,
        servers_wait_for_job=True,
    )


# --- signals outside the supervised rounds ---------------------------------------------


class LauncherSignal(BaseException):
    """SIGINT/SIGTERM/SIGHUP arrived outside a supervised round. A BaseException, like
    KeyboardInterrupt, so that no `except Exception` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def _raise_signal(signum: int, frame: object) -> None:
    raise LauncherSignal(signum)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Make the launcher signals raise `LauncherSignal` in the main thread (the supervisor
    installs its own handlers for its rounds and puts these back afterwards)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, _raise_signal) for sig in LAUNCHER_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@dataclass
class _Where:
    """What the launcher is doing, for the line a signal prints."""

    waiting: str = "starting"
    session: JobSession | None = None

    @property
    def what(self) -> str:
        return self.session.waiting_for if self.session is not None else self.waiting


def _stopped_by_signal(sig: LauncherSignal, where: _Where, job: NodeJob, say) -> int:  # type: ignore[no-untyped-def]
    """One line, the other nodes told (when connected), exit 128+N."""
    what = where.what
    session = where.session
    told = False
    if session is not None:
        cause = RootCause(
            reason=f"launcher on {job.hosts[job.index]} received {sig.name} while {what}",
            host=job.hosts[job.index],
            node_index=job.index,
            signal=sig.name,
            time=time.time(),
        )
        with contextlib.suppress(LauncherSignal):  # a second signal: stop trying
            told = session.publish_stop(cause)
    tail = "; told the other nodes" if told else ""
    say(f"received {sig.name} while {what}: stopping{tail}")
    if session is not None:
        with contextlib.suppress(LauncherSignal):  # a second signal: do not wait
            if told:
                session.wait_readers()
        with contextlib.suppress(LauncherSignal):
            session.close(linger=False)
    return 128 + sig.signum


# --- the driver ------------------------------------------------------------------------


def run_multinode(options, job: NodeJob, environ, *, python: str | None = None) -> int:  # type: ignore[no-untyped-def]
    """Rendezvous, supervise, abort job-wide, restart; returns the exit code.

    `options` is the LaunchOptions, `job` this node's part (`collective_node_job`,
    `ps_node_job`). Each round: reserve ports here, trade them at rendezvous, plan with
    every node's ports, supervise with the watch's hooks, then agree on the round's
    outcome.
    """
    progress = ProgressLine()
    where = _Where()
    with signals_raise():
        try:
            return _run(options, job, environ, python, progress, where)
        except LauncherSignal as sig:
            return _stopped_by_signal(sig, where, job, progress.say)


def _run(options, job: NodeJob, environ, python, progress: ProgressLine, where: _Where) -> int:  # type: ignore[no-untyped-def]
    import sys

    from paddlike.launch.peers.rendezvous import RendezvousError
    from paddlike.launch.peers.session import JobSession
    from paddlike.launch.run.logdir import LogDir, LogDirBusy, LogDirError

    python = python or sys.executable
    say = progress.say
    hosts, index = list(job.hosts), job.index
    token = options.job_token.encode() if options.job_token else None
    log_dir = os.path.abspath(options.log_dir)
    where.waiting = f"opening the log directory {log_dir}"
    try:
        logdir = LogDir.open(log_dir, overwrite=options.log_overwrite, host=hosts[index])
    except (LogDirBusy, LogDirError) as exc:
        say(f"error: --log_dir: {exc}")
        return 2
    with logdir:
        try:
            if options.master and options.master.startswith("etcd://"):
                session = JobSession.open_etcd(
                    master=options.master,
                    job_id=options.job_id,
                    node_index=index,
                    hosts=hosts,
                    rdzv_timeout=options.rdzv_timeout,
                    heartbeat_timeout=options.heartbeat_timeout,
                    progress=progress.show,
                    waiting=lambda what: setattr(where, "waiting", what),
                )
            else:
                session = JobSession.open_tcp(
                    master=job.master,
                    node_index=index,
                    hosts=hosts,
                    token=token,
                    rdzv_timeout=options.rdzv_timeout,
                    heartbeat_timeout=options.heartbeat_timeout,
                    progress=progress.show,
                    waiting=lambda what: setattr(where, "waiting", what),
                )
        except (RendezvousError, StoreError) as exc:
            say(f"error: {exc}")
            return getattr(exc, "exit_code", 1)
        finally:
            progress.clear()
        where.session = session
        try:
            code = _rounds(session, options, job, environ, python, logdir, progress)
        except LauncherSignal:
            raise  # run_multinode tells the others first, then closes the session
        except BaseException:
            session.close()
            raise
        session.close()
        return code


def _rounds(session, options, job: NodeJob, environ, python, logdir, progress) -> int:  # type: ignore[no-untyped-def]
    """Rounds (`rounds.run_rounds`) until one succeeds on every node, or restarts run out."""
    import socket
    import sys

    from paddlike.launch.console.tee import format_banner
    from paddlike.launch.main import new_job_id
    from paddlike.launch.peers.rendezvous import RendezvousAborted, RendezvousError
    from paddlike.launch.plan.plan import JobFacts
    from paddlike.launch.plan.policy import RoundEnd, run_rounds
    from paddlike.launch.run.ports import PortError, reserve_ports
    from paddlike.launch.run.supervisor import Supervisor

    say = progress.say
    hostname = socket.gethostname()
    hosts, index = list(job.hosts), job.index
    generated_job_id = options.job_id or new_job_id()

    def one_round(round_: int) -> RoundEnd:
        try:
            ports = reserve_ports(job.reserve, hosts[index]) if job.reserve else ()
            entry = NodeEntry(
                index,
                hosts[index],
                hostname,
                os.getpid(),
                tuple(ports),
                job.fingerprint,
                job_id=generated_job_id,
            )
            try:
                result = session.rendezvous(round_, entry)
            finally:
                progress.clear()
        except RendezvousAborted as exc:
            cause = decode_cause(exc.cause)
            say(f"the job stopped during the rendezvous: {cause.reason}")
            return RoundEnd(cause_exit_code(cause), cause)
        except (RendezvousError, PortError) as exc:
            say(f"error: {exc}")
            return RoundEnd(getattr(exc, "exit_code", 1), RootCause(reason=str(exc)))
        facts = JobFacts(
            result.job_id, python, str(logdir.path), environ, job.interface, restart_count=round_
        )
        plan = job.plan(result, facts)
        logdir.write_endpoints(plan.trainer_endpoints, plan.server_endpoints)
        if round_ == 0:
            say(
                f"rendezvous with {len(result.nodes)} nodes at {session.kv.address} took "
                f"{result.elapsed:.2f} s"
            )
            banner = format_banner(plan, logdir.path, interface=job.interface, why=job.reason)
            print(banner, file=sys.stderr, flush=True)
        watch = session.watch(round_, log_dir=str(logdir.path))
        supervisor = Supervisor(
            plan, logdir, base_env=environ, kill_timeout=options.kill_timeout, tee=options.tee
        )
        outcome = supervisor.run(
            extra_fds={watch.fd: watch.poll},
            on_failure=watch.publish,
            restart_count=round_,
            services_stop=watch.services_stop() if job.servers_wait_for_job else None,
            defer_success=True,
        )
        cause = session.finish(watch, outcome.exit_code == 0)
        if cause is None:
            if supervisor.deferred_success:  # every node succeeded: now "OK" is true
                supervisor.console.block(supervisor.deferred_success)
            return RoundEnd(outcome.exit_code, None)
        _record_job_cause(logdir.path, cause)
        if outcome.exit_code == 0:  # else the supervisor already reported the cause
            say(
                f"the job failed on another node: {cause.reason}"
                + (f" (host {cause.host}, log {cause.log_file})" if cause.log_file else "")
            )
            for line in cause.tail[-20:]:
                say(f"  | {line}")
        return RoundEnd(outcome.exit_code or cause_exit_code(cause), cause)

    return run_rounds(options.max_restarts, one_round, say)


def cause_exit_code(cause: RootCause) -> int:
    """What a launcher exits with for a job-wide root cause found elsewhere: the failed
    process's own code (128+N for signal N), as where it failed; 1 when none applies."""
    if cause.exit_code:
        return cause.exit_code
    if cause.signal:
        with contextlib.suppress(KeyError):
            return 128 + int(signal.Signals[cause.signal])
    return 1


def _record_job_cause(log_dir, cause: RootCause) -> None:  # type: ignore[no-untyped-def]
    """The run summary of every node records the job-wide root cause."""
    from paddlike.summary import read_summary, write_summary

    summary = read_summary(log_dir)
    if summary is None:
        return
    summary.root_cause = cause
    if summary.status == "succeeded":
        summary.status = "failed"
        summary.exit_code = cause_exit_code(cause)
    write_summary(log_dir, summary)
