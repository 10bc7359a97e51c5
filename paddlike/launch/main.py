"""The entry point: parse -> cluster -> ports -> plan -> (--dry_run) -> log dir -> supervise.

Everything up to the plan is checked before anything is created or started, so
bad input ends with one line and exit code 2 and leaves no trace. `prepare` is
the pure-ish front half (it reads the environment, /proc and local interfaces,
and reserves ports); `run` owns the side effects.

One node: ports reserved here (`_layout`), then `run`. Many nodes: the same front
half, then `multinode.run_multinode`, which meets the other nodes at the rendezvous
(collective: trading ports; PS lists: checking agreement, as the ports are given) and
supervises job-wide.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from paddlike.launch.context.options import PROG, LaunchOptions, UsageError, parse_options
from paddlike.launch.plan.plan import JobFacts, LaunchPlan


@dataclass(frozen=True)
class Prepared:
    """What `prepare` decided: the options, the plan, and how this node was matched."""

    options: LaunchOptions
    plan: LaunchPlan
    log_dir: str  # absolute
    interface: str
    match_reason: str
    node: Any = None  # cluster.NodeMatch (collective mode)
    devices: Any = None  # devices.DeviceAssignment (collective mode)
    ps_layout: Any = None  # plan.PsLayout (PS mode)

    @property
    def multinode(self) -> bool:
        """Jobs on many nodes go through the rendezvous (`multinode`)."""
        return self.plan.nnodes > 1


def new_job_id() -> str:
    """job-YYYYmmdd-HHMMSS-xxxx: sortable by start time, unique by its random tail."""
    import time

    return time.strftime("job-%Y%m%d-%H%M%S-") + os.urandom(2).hex()


def prepare(
    argv: Sequence[str], environ: Mapping[str, str], *, python: str = sys.executable
) -> Prepared:
    """Options, node, devices, ports and plan; raises `UsageError` on bad input."""
    from paddlike.launch.context import node as cluster
    from paddlike.launch.plan.plan import plan_collective, plan_ps
    from paddlike.launch.run import ports

    options = parse_options(argv, environ)
    _check_command_exists(options, environ)
    log_dir = os.path.abspath(options.log_dir)
    job_id = options.job_id or new_job_id()
    reserve = not options.dry_run  # a dry run creates nothing, not even reservations
    if options.is_ps:
        ps_node = cluster.match_ps_node(options, environ)
        facts = JobFacts(job_id, python, log_dir, environ, ps_node.interface)
        layout = ports.layout_ps(options, ps_node, reserve=reserve)
        plan = plan_ps(options, layout, facts)
        _check_tee(options, plan)
        return Prepared(options, plan, log_dir, ps_node.interface, ps_node.reason, ps_layout=layout)
    from paddlike.launch.context.devices import node_devices

    node = cluster.match_node(options, environ)
    devices = node_devices(options, environ)
    layout = _layout(options, node, devices.nproc, reserve=reserve)
    facts = JobFacts(job_id, python, log_dir, environ, node.interface)
    plan = plan_collective(options, layout, devices, facts)
    _check_tee(options, plan)
    return Prepared(options, plan, log_dir, node.interface, node.reason, node, devices)


def _check_command_exists(options: LaunchOptions, environ: Mapping[str, str]) -> None:
    """A missing script is the user's typo: say so now, not as N worker crashes later."""
    script = options.training_script
    if options.module:
        return  # resolved by the workers' interpreter, on its own sys.path
    if options.no_python:
        import shutil

        if os.sep in script:
            runnable = os.path.isfile(script) and os.access(script, os.X_OK)
        else:
            runnable = shutil.which(script, path=environ.get("PATH")) is not None
        if not runnable:
            raise UsageError(
                f"training_script: {script!r} is not an executable file or a command "
                f"on PATH (--no_python runs it as a command)",
                "training_script",
            )
        return
    if not os.path.isfile(script):
        raise UsageError(
            f"training_script: {script!r} not found (working directory {os.getcwd()})",
            "training_script",
        )


def _check_tee(options: LaunchOptions, plan: LaunchPlan) -> None:
    """--tee names local trainers by index; an index this node does not have is a typo."""
    from paddlike.launch.console.tee import parse_tee
    from paddlike.launch.plan.plan import Role

    try:
        chosen = parse_tee(options.tee)
    except ValueError as exc:
        raise UsageError(str(exc), "--tee") from None
    if chosen == "all":
        return
    local = sum(1 for p in plan.processes if p.role is Role.TRAINER)
    missing = sorted(i for i in chosen if i >= max(local, 1))
    if missing:
        raise UsageError(
            f"--tee: this node runs {local} trainer(s) (local indices 0..{local - 1}), "
            f"got {options.tee!r}",
            "--tee",
        )


def _layout(options: LaunchOptions, node, nproc: int, *, reserve: bool):
    """Ports for this node and endpoints of all nodes.

    Many nodes: --start_port ports, shown by --dry_run only; a real many-node launch
    negotiates them at the rendezvous (`multinode.run_multinode`).
    """
    from paddlike.launch.run.ports import layout_endpoints

    # torchrun style: the other nodes' addresses come at the rendezvous; --dry_run shows
    # placeholders for them
    hosts = [h or f"<node {i}>" for i, h in enumerate(node.hosts)]
    return layout_endpoints(
        hosts, node.node_index, nproc, start_port=options.start_port, reserve=reserve
    )


def run(prepared: Prepared, environ: Mapping[str, str]) -> int:
    """Lock the log directory, write endpoints.log, print the banner and supervise."""
    from paddlike.launch.console.tee import format_banner
    from paddlike.launch.run.logdir import LogDir, LogDirBusy, LogDirError
    from paddlike.launch.run.supervisor import Supervisor

    options, plan = prepared.options, prepared.plan
    try:
        logdir = LogDir.open(prepared.log_dir, overwrite=options.log_overwrite, host=plan.host)
    except (LogDirBusy, LogDirError) as exc:
        return _fail(f"--log_dir: {exc}")
    with logdir:
        logdir.write_endpoints(plan.trainer_endpoints, plan.server_endpoints)
        banner = format_banner(
            plan, logdir.path, interface=prepared.interface, why=prepared.match_reason
        )
        print(banner, file=sys.stderr, flush=True)
        supervisor = Supervisor(
            plan,
            logdir,
            base_env=environ,
            kill_timeout=options.kill_timeout,
            tee=options.tee,
            color=sys.stderr.isatty() and "NO_COLOR" not in environ,
        )
        from paddlike.launch.plan.policy import RoundEnd, run_rounds

        def one_round(round_: int) -> RoundEnd:
            outcome = supervisor.run(restart_count=round_)
            return RoundEnd(outcome.exit_code, outcome.root_cause)

        return run_rounds(options.max_restarts, one_round)


def _fail(message: str, code: int = 2) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """python -m paddlike.launch [options] training_script [args...]; returns the exit code."""
    from paddlike.launch.run.ports import PortError

    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ
    try:
        prepared = prepare(argv, environ)
    except UsageError as exc:
        return _fail(str(exc))
    except PortError as exc:
        return _fail(str(exc), 1)
    if prepared.options.dry_run:
        from paddlike.launch.plan.plan import format_plan

        print(format_plan(prepared.plan, prepared.log_dir), flush=True)
        if prepared.multinode and not prepared.options.is_ps:
            print("(many nodes: ports shown from --start_port; a real launch negotiates them)")
        return 0
    if prepared.multinode:
        from paddlike.launch.run import job as multinode

        options = prepared.options
        try:
            if options.is_ps:
                job = multinode.ps_node_job(
                    options, prepared.ps_layout, prepared.interface, prepared.match_reason
                )
            else:
                job = multinode.collective_node_job(options, prepared.node, prepared.devices)
        except UsageError as exc:
            return _fail(str(exc))
        return multinode.run_multinode(options, job, environ)
    return run(prepared, environ)
