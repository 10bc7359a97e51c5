"""A hostfile whose one host is this machine: the job runs here, without ssh.

DeepSpeed starts a job of one host without its multi-node runner (no ssh, no pdsh)
unless `--force_multi`; so do we, for a host that names this machine:

    localhost slots=2          -> this machine's launcher with --slots 2, no sshd needed
    $(hostname) slots=2        -> the same
    other-host slots=2         -> over ssh, as every other hostfile (it is not this machine)
    localhost slots=2 + --force_multi, or --launcher slurm -> the cluster starter

DeepSpeed's `--no_ssh --node_rank I` (the same command typed on every host) is the
other way to run here: this host's share only, as node I of the hostfile's hosts (after
the filters) -- the command the cluster starter would have sent it over ssh, parsed as
such (`--ips` with every host, `--node_rank I`, its slots).

The host's workers are what they would be over ssh (`picks.hostfile_picks`: slots,
--include's ids, --num_gpus), and the same options are refused. The cluster options
that only say how to reach hosts (--export, --remote_python, --ssh_args, ...) have no
host to reach and are ignored, as DeepSpeed ignores them on one machine. The line that
says so is printed before the banner.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence

from paddlike.launch.cluster.hostfile import is_loopback
from paddlike.launch.context.options.record import LaunchOptions


def is_this_machine(name: str, hostname: str | None = None) -> bool:
    """Does a hostfile name this machine: localhost, a loopback address, or this
    machine's host name (`hostname`, short or full)? Nothing is resolved: a name of this
    machine that only DNS knows goes over ssh, as any other host."""
    if is_loopback(name):
        return True
    hostname = hostname if hostname is not None else socket.gethostname()
    return bool(hostname) and name in (hostname, hostname.split(".", 1)[0])


def run_here(
    options: LaunchOptions,
    argv: Sequence[str],
    hostname: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[LaunchOptions, str] | None:
    """The options for this machine's own launcher, and the line that says why; None when
    the hostfile's job goes to its hosts (more than one, another machine, --force_multi,
    --launcher slurm). `UsageError` as the cluster starter would raise it."""
    if options.hostfile and options.no_ssh:
        return _node_of_many(options, argv, environ)
    if not options.hostfile or options.force_multi or options.launcher == "slurm":
        return None
    from paddlike.launch.cluster.picks import hostfile_picks, picked_gpus_named

    picks = hostfile_picks(options, argv)
    if len(picks) != 1 or not is_this_machine(picks[0].name, hostname):
        return None
    pick = picks[0]
    here = options._replace(
        hostfile=None,
        include=None,
        exclude=None,
        num_nodes=None,
        num_gpus=None,
        launcher=None,
        slots=pick.workers if pick.devices is None else None,
        # the pick's GPUs, or its slots (which a --gpus from a variable would contradict:
        # over ssh it would not be carried either)
        gpus=(
            tuple(map(str, pick.devices))
            if pick.devices is not None
            else None
            if pick.workers is not None
            else options.gpus
        ),
    )
    if pick.devices is not None:  # its refusals name what was typed
        here = here._replace(labels=(*here.labels, ("gpus", picked_gpus_named(options))))
    note = (
        f"--hostfile {options.hostfile}: its one host, {pick.name}, is this machine: the job "
        "runs here, without ssh (--force_multi starts it over ssh)"
    )
    return here, note


def _node_of_many(
    options: LaunchOptions, argv: Sequence[str], environ: Mapping[str, str] | None
) -> tuple[LaunchOptions, str]:
    """--no_ssh --node_rank I: node I's own launcher, as the starter would command it."""
    from paddlike.launch.cluster.picks import forwarded_args, hostfile_picks
    from paddlike.launch.context.options.parse import parse_options
    from paddlike.launch.context.options.record import UsageError

    index = options.node_rank
    assert index is not None  # `local.without_hostfile` refused --no_ssh without it
    picks = hostfile_picks(options, argv, allowed=("node_rank",))
    if index >= len(picks):
        raise UsageError(
            f"{options.label('node_rank')}: {index} is out of range for the {len(picks)} "
            f"host(s) of the hostfile {options.hostfile} (after the filters)",
            "--node_rank",
        )
    # parsed here, never a command line of another process: the token may stay
    kept, script = forwarded_args(
        argv,
        keep=frozenset({"job_id", "dry_run", "job_token", "job_token_file"}),
        pass_local_rank=options.pass_local_rank,
    )
    launcher = _without_value(kept, "--node_rank")
    command = [
        "--ips",
        ",".join(p.name for p in picks),
        "--node_rank",
        str(index),
        *picks[index].launcher_args(),
        *launcher,
        *(["--"] if script and script[0].startswith("-") else []),
        *script,
    ]
    here = parse_options(command, environ if environ is not None else {})
    note = (
        f"--hostfile {options.hostfile} --no_ssh: this host runs node {index} "
        f"({picks[index].name}) of {len(picks)}; every other host runs its own, started "
        "there with the same command"
    )
    return here, note


def _without_value(args: Sequence[str], option: str) -> list[str]:
    """`args` without `option` and its value (``--x v`` or ``--x=v``)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out
