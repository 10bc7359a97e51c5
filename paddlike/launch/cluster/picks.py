"""The hostfile's hosts after --include/--exclude/--num_nodes/--num_gpus, each with its
workers, and the refusals of options that say the same thing another way; and which of
the user's options every host's launcher is passed on (`forwarded_args`).

Shared by the cluster starter (`start`) and a hostfile of this machine alone (`here`), so
that the job of one host is refused for what the job of many would be. Messages name
the option as the user typed it (``--devices``, not the ``--gpus`` it stands for).
"""

from __future__ import annotations

from collections.abc import Sequence

from paddlike.launch.cluster.hostfile import read_hostfile
from paddlike.launch.cluster.selection import Pick, select_hosts, spare_count
from paddlike.launch.context.options import our_table
from paddlike.launch.context.options.parser import DEST, split_argv
from paddlike.launch.context.options.record import LaunchOptions, UsageError

# our options that say how to start the cluster (scope CLUSTER in the option table: kept
# here, never passed to the hosts) and the secrets (every host gets the token in its
# environment, `plan_remote_job`, never in argv)
CLUSTER_DESTS, SECRET_DESTS = our_table.CLUSTER_DESTS, our_table.SECRET_DESTS
# what each host's command says itself: the user may not say it for all of them
SET_PER_HOST = ("ips", "node_rank", "nnodes", "host", "slots")


def hostfile_picks(
    options: LaunchOptions, argv: Sequence[str], allowed: Sequence[str] = ()
) -> tuple[Pick, ...]:
    """The hostfile's hosts after the filters, each with its workers; `UsageError` for
    an option of `SET_PER_HOST` (each host is given its own; those `allowed` excepted)
    or one that contradicts the hostfile's workers."""
    ours, _ = split_argv(argv)  # spellings normalized, abbreviations written out
    given = {DEST.get(a.partition("=")[0]) for a in ours}
    for dest in (d for d in SET_PER_HOST if d not in allowed):
        if dest in given:
            raise UsageError(
                f"--{dest}: each host's launcher is given its own with --hostfile; leave "
                f"--{dest} out",
                f"--{dest}",
            )
    picks = select_hosts(
        read_hostfile(options.hostfile or ""),
        include=options.include,
        exclude=options.exclude,
        num_nodes=options.num_nodes,
        num_gpus=options.num_gpus,
        path=options.hostfile or "",
        spares=True,
    )
    if not spare_count(picks, options.num_nodes, options.preflight, options.launcher):
        picks = picks[: options.num_nodes or len(picks)]  # the first N: DeepSpeed's
    counted = any(p.launcher_args() for p in picks)
    if counted and "nproc_per_node" in given:
        raise UsageError(
            f"{options.label('nproc_per_node')}: the hostfile's slots (or --include, "
            "--num_gpus) say each host's workers; give one or the other",
            options.label("nproc_per_node"),
        )
    gpus = options.label("gpus")  # as typed: --devices
    if counted and "gpus" in given and not options.cpu_only:
        raise UsageError(
            f"{gpus}: the hostfile's slots (or --include, --num_gpus) say each host's GPUs; "
            "give one or the other (--devices cpu: CPU workers, as many as the slots)",
            gpus,
        )
    if options.cpu_only and any(p.devices is not None for p in picks):
        raise UsageError(
            f"{gpus} cpu: --include/--exclude name GPU ids of the hosts; for CPU workers "
            "give each host's count as its slots",
            gpus,
        )
    return picks


def picked_gpus_named(options: LaunchOptions) -> str:
    """What the user typed for the GPU ids --include/--exclude picked of the hostfile's
    hosts (``--exclude localhost:1``): the --gpus each such host's launcher is given names
    it in its refusals (`devices.gpus_named`)."""
    return f"--include {options.include}" if options.include else f"--exclude {options.exclude}"


def forwarded_args(
    argv: Sequence[str], keep: frozenset[str] = frozenset(), *, pass_local_rank: bool = False
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The user's launcher options without the cluster ones (and without --job_id, which
    `plan_remote_job` gives every host, and the token, which travels in the hosts'
    environment; those of `keep` stay), and the script with its args. `pass_local_rank`
    (the start is DeepSpeed-style: `LaunchOptions.pass_local_rank`): every host's launcher
    is told so by --pass_local_rank, since the options that made it so stay here."""
    ours, script = split_argv(argv)  # spellings normalized, abbreviations written out
    kept: list[str] = []
    i = 0
    while i < len(ours):
        name, eq, _ = ours[i].partition("=")
        dest = DEST.get(name)
        width = 2 if dest is not None and dest not in our_table.SWITCHES and not eq else 1
        dropped = dest in CLUSTER_DESTS or dest in SECRET_DESTS or dest == "job_id"
        if not dropped or dest in keep:
            kept.extend(ours[i : i + width])
        i += width
    if pass_local_rank and "--pass_local_rank" not in kept:
        kept.append("--pass_local_rank")
    return tuple(kept), tuple(script)
