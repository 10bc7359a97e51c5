"""python -m paddlike.launch: parse -> describe the job -> --dry_run | run the job.

Everything up to the description is checked before anything is created or started,
so bad input ends with one line and exit code 2 and leaves no trace. `describe` reads
the environment, /proc and local interfaces (and on one PS node reserves its ports);
`run.job.run_job` owns every other side effect.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence

from paddlike import contract
from paddlike.commands import stdout_closed
from paddlike.launch import NamedTuple
from paddlike.launch.context.options import PROG, LaunchOptions, UsageError, parse_options
from paddlike.launch.plan.nodejob import NodeJob
from paddlike.launch.plan.plan import LaunchPlan
from paddlike.launch.run.runspec import RunSpec

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.context.names import NameWait


def _cluster_only(options: LaunchOptions) -> bool:
    """An option that only the cluster starter reads was given (without --hostfile)."""
    return bool(
        options.include
        or options.exclude
        or options.num_nodes
        or options.num_gpus
        or options.export
        or options.remote_python
        or options.ssh_args
        or options.ssh_port
        or options.force_multi
        or options.no_ssh_check
        or options.no_ssh
        or options.export_prefixes is not None
    )


class Described(NamedTuple):
    """What `describe` decided: the options, this node's share of the job, a preview of
    its plan (the real one is made each round from the rendezvous; the preview shows
    placeholders for ports and addresses it cannot know yet) and what running it needs
    (`run`: `run.job.run_job`'s narrow record)."""

    options: LaunchOptions
    job: NodeJob
    log_dir: str  # absolute
    preview: LaunchPlan
    run: RunSpec


def describe(
    argv: Sequence[str], environ: Mapping[str, str], *, python: str = sys.executable
) -> Described:
    """Options, node, devices, this node's job and a preview plan; raises `UsageError` on
    bad input, `PortError` when one node's PS ports cannot be reserved."""
    return describe_options(parse_options(argv, environ), environ, python=python)


def describe_options(
    options: LaunchOptions,
    environ: Mapping[str, str],
    *,
    python: str = sys.executable,
    started_by_cluster: bool = False,
) -> Described:
    """`describe` from parsed options (so that a failure here can still be told to the
    other nodes: `_fail_before_the_rendezvous`); `started_by_cluster`: this host's launcher
    was started by the one-command cluster start (`NodeJob.started_by_cluster`)."""
    from paddlike.launch.plan.nodejob import new_job_id
    from paddlike.launch.plan.plan import JobFacts
    from paddlike.launch.specs import run_spec

    _check_command_exists(options, environ)
    log_dir = os.path.abspath(options.log_dir)
    job = _node_job(options, environ)
    if started_by_cluster:
        job = job._replace(started_by_cluster=True)
    job_id = options.job_id or new_job_id()
    facts = JobFacts(job_id, python, log_dir, environ, job.interface)
    world = job.preview_world(_preview_ports(options, job), job_id)
    preview = job.planner.plan(world, facts)
    if job.placement is not None:  # as JobRun.plan does
        from paddlike.launch.plan.placement import place

        preview = place(preview, job.placement)
    _check_tee(options, preview)
    return Described(options, job, log_dir, preview, run_spec(options))


def _node_job(options: LaunchOptions, environ: Mapping[str, str]) -> NodeJob:
    """This node's share of the job, its planner and its placement (the NUMA facts read
    here, once), from narrow records of the options (`launch.specs`)."""
    from paddlike.launch import specs
    from paddlike.launch.context import node as cluster
    from paddlike.launch.plan import layout

    topology = None
    if options.numa_binding is not None:
        from paddlike.launch.context.numa import read_topology

        topology = read_topology()
    placed = specs.placement(options, topology)
    if options.is_ps:
        counted = None
        if options.servers is None and options.workers is None:  # counts: every node's roles
            counted = cluster.match_node(options, environ, wait=_name_wait(options, environ))
            if counted.nnodes > 1:
                return specs.ps_counts_job(options, counted)._replace(placement=placed)
        ps_node = cluster.match_ps_node(options, environ, node=counted)
        if ps_node.servers is None or ps_node.trainers is None:
            from paddlike.launch.run.ports import free_ports, reserve_ports

            n_servers, n_trainers = options.server_num or 1, options.worker_num or 1
            heters = options.heter_worker_num or ()
            needed = layout.ps_counts_ports_needed(n_servers, n_trainers, heters)
            # a dry run creates nothing, not even port reservations
            ports = free_ports(needed) if options.dry_run else reserve_ports(needed)
            ps_layout = layout.ps_counts_layout(
                ps_node.host, n_servers, n_trainers, ports, heters, options.heter_devices or ()
            )
        else:
            ps_layout = layout.ps_lists_layout(ps_node, options.start_port, options.heter_devices)
        job = specs.ps_job(options, ps_layout, ps_node.interface, ps_node.reason)
        return job._replace(placement=placed)
    from paddlike.launch.context.devices import node_devices

    node = cluster.match_node(options, environ, wait=_name_wait(options, environ))
    devices = node_devices(options, environ)
    return specs.collective_job(options, node, devices)._replace(placement=placed)


def _typed_token(argv: Sequence[str]) -> bool:
    """Whether the token is on this launcher's command line (every local user's to read),
    not the script's."""
    from paddlike.launch.context.options.parser import split_argv

    ours, _ = split_argv(argv)
    return any(a == "--job_token" or a.startswith("--job_token=") for a in ours)


def _name_wait(options: LaunchOptions, environ: Mapping[str, str]) -> NameWait | None:
    """Names of the node list or the master that do not resolve yet are waited for up to
    --rdzv_timeout, on the progress line (Kubernetes gives pods their names as they come
    up); a dry run does not wait, nor does the check of a host held at the cluster
    starter's gate (the starter reached it by name: a name that does not resolve there now
    is refused before any host starts)."""
    if options.dry_run or environ.get(contract.HELD_AT_GATE) == "1":
        return None
    from paddlike.launch.console.progress import ProgressLine
    from paddlike.launch.context.names import NameWait

    line = ProgressLine()
    return NameWait(options.rdzv_timeout, progress=line.show, done=line.clear)


def _preview_ports(options: LaunchOptions, job: NodeJob) -> Callable[[int], Sequence[int]]:
    """Ports for the preview plan: many nodes show --start_port's (a real launch trades
    reserved ones at the rendezvous); one node's dry run shows free ones (reserved only by
    a real launch, each round); otherwise they are not shown and 0 stands in."""
    from paddlike.launch.plan.layout import start_port_ports

    if not job.reserve:
        return lambda node: ()
    if job.nnodes > 1 or options.start_port_from:  # one node: the ports it will claim
        ports = start_port_ports(options.start_port, job.reserve - 1)
        return lambda node: ports
    if options.dry_run:
        from paddlike.launch.run.ports import free_ports

        ports = free_ports(job.reserve)
        return lambda node: ports
    return lambda node: (0,) * job.reserve


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
    """--console names local trainers by index; an index this node does not have is a typo."""
    from paddlike.launch.plan.plan import Role

    local = sum(1 for p in plan.processes if p.role is Role.TRAINER)
    for given, rank in options.console_ranks:  # torchrun's -t/-r maps: the same check
        if rank >= max(local, 1):
            raise UsageError(
                f"{given}: this node runs {local} trainer(s) (local indices 0..{local - 1}), "
                f"got local rank {rank}",
                given.partition(" ")[0],
            )
    chosen = options.tee_indices
    if chosen == "all":
        return
    missing = sorted(i for i in chosen if i >= max(local, 1))
    if missing:
        raise UsageError(
            f"{options.label('console')}: this node runs {local} trainer(s) (local "
            f"indices 0..{local - 1}), got {options.console!r}",
            "--console",
        )


def _fail(message: str, code: int = 2) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return code


def _fail_before_the_rendezvous(
    options: LaunchOptions, environ: Mapping[str, str], message: str, code: int = 2
) -> int:
    """This node's one line first; then, on many nodes, the others are told why this node
    will not join (`peers.startfail`: a few seconds at most), so that they stop too."""
    code = _fail(message, code)
    many = (options.nnodes or 1) > 1 or len(options.ips) > 1 or options.servers is not None
    if not options.dry_run and many:  # (PS lists: `startfail` counts their nodes)
        from paddlike.launch.peers.startfail import tell_start_failure

        tell_start_failure(options, environ, message, exit_code=code)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """python -m paddlike.launch [options] training_script [args...]; returns the exit code."""
    from paddlike.launch.run.ports import PortError

    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ
    try:
        options = parse_options(argv, environ)
    except UsageError as exc:
        return _fail(str(exc))
    if options.hostfile or options.launcher or _cluster_only(options):
        from paddlike.launch.cluster.here import run_here
        from paddlike.launch.cluster.without_hostfile import without_hostfile

        try:  # DeepSpeed's one-machine spellings, or a refusal naming the option
            options = without_hostfile(options, argv, environ)
            here = run_here(options, argv, environ=environ)  # this machine alone: no ssh
        except UsageError as exc:
            return _fail(str(exc))
        if here is not None:
            options, note = here
            print(f"{PROG}: {note}", file=sys.stderr, flush=True)
        elif options.hostfile or options.launcher:  # one command for the whole cluster
            from paddlike.launch.cluster.start import start_cluster

            return start_cluster(options, argv, environ)
    held = environ.get(contract.HELD_AT_GATE) == "1"  # by the cluster starter: the check
    from_cluster = environ.get(contract.STDIN_EOF_ENDS) == "1"  # started by the one command
    if from_cluster and not held:
        from paddlike.launch.cluster.eofwatch import end_on_stdin_eof

        end_on_stdin_eof(options.signals_to_handle or ())
    try:
        described = describe_options(options, environ, started_by_cluster=from_cluster)
    except UsageError as exc:
        if held:  # no host has started: nobody to tell
            return _fail(str(exc), exc.exit_code)
        return _fail_before_the_rendezvous(options, environ, str(exc), exc.exit_code)
    except PortError as exc:
        return _fail(str(exc), 1)
    if held:
        from paddlike.launch.cluster.hold import wait_for_go

        if not wait_for_go():  # another host failed its check, or the starter ended
            return 0
        if from_cluster:
            from paddlike.launch.cluster.eofwatch import end_on_stdin_eof

            end_on_stdin_eof(options.signals_to_handle or ())
    if described.options.dry_run:
        line, run = "", described.run
        if run.preload:  # checked as the real start would: a missing module is exit 2
            from paddlike.launch.run.preload.start import preview_preload

            line, startable = preview_preload(run.preload, run.workers, sys.executable, environ)
            if not startable:
                return _fail(line, 2)
        try:
            _print_dry_run(described)
            if line:
                print(line, flush=True)
        except BrokenPipeError:  # `--dry_run ... | head`: the reader has what it wanted
            return stdout_closed()
        return 0
    _warn_crowded(len(described.preview.processes))
    if _typed_token(argv) and described.job.nnodes > 1:
        print(
            f"{PROG}: warning: --job_token on the command line can be read by every user of "
            "this machine (ps); give it by --job_token_file FILE or PADDLIKE_JOB_TOKEN",
            file=sys.stderr,
            flush=True,
        )
    from paddlike.launch.run.job import run_job
    from paddlike.launch.run.logdir import log_files

    logs = log_files(described.preview)  # checked before anything starts
    return run_job(described.run, described.job, environ, logs=logs)


def _print_dry_run(described: Described) -> None:
    """--dry_run: every process, command and environment; nothing is started."""
    from paddlike.launch.plan.plan import format_plan

    print(format_plan(described.preview, described.log_dir), flush=True)
    if described.job.nnodes > 1 and not described.options.is_ps:
        print(
            "(many nodes: ports shown from --start_port, and the other nodes with this node's "
            "worker count; a real launch trades both at the rendezvous)",
            flush=True,  # __main__ ends with os._exit: nothing is flushed after this
        )
    elastic = described.job.elastic
    job = described.job
    # not at --master's address: not node 0, whose launcher hosts the store there
    shown = f"shown as node {described.preview.node_index}"
    if job.node0_host:
        shown = (
            f"node 0 is the node at {job.node0_host}, where the launchers meet, so this node "
            f"is {shown}"
        )
    if elastic is not None:
        count = (
            f"{elastic.max_nodes} node{'s' if elastic.max_nodes != 1 else ''}, a lost one "
            "replaced in a new round"
            if elastic.min_nodes == elastic.max_nodes
            else f"{elastic.min_nodes}..{elastic.max_nodes} nodes"
        )
        print(
            f"(elastic: {count}; the ranks and the world are found at each round's "
            f"rendezvous; {shown} of {elastic.max_nodes})",
            flush=True,
        )
    elif not job.rank_known:
        print(
            f"(no --node_rank: the node rank is decided at the rendezvous; {shown})",
            flush=True,
        )


# Workers per CPU core above which the launcher warns: past a few per core, workers mostly
# wait for each other (64 torch workers on 2 cores took 2m46s and 14.5 GB to start).
CROWDED = 4


def _warn_crowded(workers: int, meminfo: str = "/proc/meminfo") -> bool:
    """One line on stderr when this node's workers are far more than its cores (the
    cores this launcher may run on, `os.sched_getaffinity`); True when it warned. Both
    reads are system calls, not a measurement: a normal job pays microseconds."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if workers <= CROWDED * cores:
        return False
    memory = "memory unknown"
    try:
        with open(meminfo, encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        total = int(fields["MemTotal"].split()[0]) / (1 << 20)
        free = int(fields["MemAvailable"].split()[0]) / (1 << 20)
        memory = f"{total:.1f} GiB of memory ({free:.1f} GiB available)"
    except (OSError, KeyError, ValueError):
        pass
    print(
        f"{PROG}: warning: {workers} workers on this node, which has {cores} CPU "
        f"core{'s' if cores != 1 else ''} for them and {memory}: above {CROWDED} workers per "
        "core they mostly wait for each other; lower --nproc_per_node if this is not meant",
        file=sys.stderr,
        flush=True,
    )
    return True
