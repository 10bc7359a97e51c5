"""A hostfile whose one host is this machine: the job runs here, without ssh.

DeepSpeed starts a job of one host without its multi-node runner (no ssh, no pdsh)
unless `--force_multi`; so do we, for a host that names this machine:

    localhost slots=2          -> this machine's launcher with --slots 2, no sshd needed
    $(hostname) slots=2        -> the same
    other-host slots=2         -> over ssh, as every other hostfile (it is not this machine)
    localhost slots=2 + --force_multi, or --launcher slurm -> the cluster starter

The host's workers are what they would be over ssh (`picks.hostfile_picks`: slots,
--include's ids, --num_gpus), and the same options are refused. The cluster options
that only say how to reach hosts (--export, --remote_python, --ssh_args, ...) have no
host to reach and are ignored, as DeepSpeed ignores them on one machine. The line that
says so is printed before the banner.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from paddlike.launch.context.options.record import LaunchOptions

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]", "ip6-localhost")


def is_this_machine(name: str, hostname: str | None = None) -> bool:
    """Does a hostfile name this machine: localhost, a loopback address, or this
    machine's host name (`hostname`, short or full)? Nothing is resolved: a name of this
    machine that only DNS knows goes over ssh, as any other host."""
    if name in LOOPBACK_NAMES or name.startswith("127."):
        return True
    hostname = hostname if hostname is not None else socket.gethostname()
    return bool(hostname) and name in (hostname, hostname.split(".", 1)[0])


def run_here(
    options: LaunchOptions, argv: Sequence[str], hostname: str | None = None
) -> tuple[LaunchOptions, str] | None:
    """The options for this machine's own launcher, and the line that says why; None when
    the hostfile's job goes to its hosts (more than one, another machine, --force_multi,
    --launcher slurm). `UsageError` as the cluster starter would raise it."""
    if not options.hostfile or options.force_multi or options.launcher == "slurm":
        return None
    from paddlike.launch.cluster.picks import hostfile_picks

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
    note = (
        f"--hostfile {options.hostfile}: its one host, {pick.name}, is this machine: the job "
        "runs here, without ssh (--force_multi starts it over ssh)"
    )
    return here, note
