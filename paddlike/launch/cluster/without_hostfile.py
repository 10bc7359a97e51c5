"""The cluster options without a hostfile: DeepSpeed's one-machine meanings, or a refusal.

`deepspeed --num_gpus 2 train.py` on one machine is common; so without --hostfile:

    --num_gpus N              this machine's first N GPUs (--gpus 0..N-1)
    --include localhost:0,1   --gpus 0,1    (localhost or 127.0.0.1, as DeepSpeed names it)
    --exclude localhost:1     every visible GPU but 1
    --num_nodes 1             this machine: nothing to change

--num_nodes or --num_gpus with --include/--exclude is refused, as DeepSpeed refuses it
(with a hostfile too). Every other cluster option only means something with hosts to
start (--num_nodes > 1, --export, --export_prefixes, --remote_python, --ssh_args,
--ssh_port, --force_multi, --launcher ssh|pdsh):
one line naming it ("needs --hostfile"), exit 2, never silently ignored. `--launcher
slurm` without a hostfile starts srun over the allocation's nodes (`srun`), so outside an
allocation (no SLURM_JOB_ID) it is refused here, before srun is looked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paddlike.launch.context.options.record import LaunchOptions, UsageError

LOCAL_NAMES = ("localhost", "127.0.0.1")  # what DeepSpeed's local filters name
NO_SSH_CHECK = (
    "--no_ssh_check: not skipped here: every host's check runs in the job's own ssh "
    "session (no extra connection, no extra time) and is what keeps one failing host from "
    "starting the others; leave the option out"
)


NO_SSH = (
    "--no_ssh: needs --hostfile FILE and --node_rank I: the same command on each host "
    "starts that host's share (I: its index in the hostfile, after the filters), as in "
    "DeepSpeed; or drop --no_ssh to start every host from here"
)


def without_hostfile(
    options: LaunchOptions, argv: Sequence[str], environ: Mapping[str, str]
) -> LaunchOptions:
    """The options to run with (the local meanings applied), or `UsageError`."""
    if options.no_ssh_check:
        raise UsageError(NO_SSH_CHECK, "--no_ssh_check")
    if options.no_ssh and (not options.hostfile or options.node_rank is None):
        raise UsageError(NO_SSH, "--no_ssh")
    if (options.include or options.exclude) and (
        options.num_nodes is not None or options.num_gpus is not None
    ):  # DeepSpeed refuses these together, with a hostfile or without
        which = "--num_nodes" if options.num_nodes is not None else "--num_gpus"
        raise UsageError(
            f"{which}: cannot be combined with --include/--exclude (they say which hosts and "
            "devices already; as in DeepSpeed)",
            which,
        )
    previewed = options.dry_run and options.hostfile  # a hostfile's preview needs none
    if options.launcher == "slurm" and not previewed and not environ.get("SLURM_JOB_ID"):
        # srun outside an allocation would ask Slurm for a new one (and wait for it)
        raise UsageError(
            "--launcher slurm: not inside a Slurm allocation (no SLURM_JOB_ID): run it "
            "under salloc or sbatch, or give --hostfile with --launcher ssh",
            "--launcher",
        )
    if options.hostfile:
        return options
    if options.launcher == "slurm":
        return options  # srun over the allocation's nodes (`srun.allocation_nodes`)
    for given, option in (
        (options.launcher, "--launcher"),
        (options.num_nodes is not None and options.num_nodes > 1, "--num_nodes"),
        (options.export, "--export"),
        (options.remote_python, "--remote_python"),
        (options.ssh_args, "--ssh_args"),
        (options.ssh_port, "--ssh_port"),
        (options.force_multi, "--force_multi"),
        # typed: a mistake; from PADDLIKE_EXPORT_PREFIXES (a shell's setting for every
        # cluster job): nothing to carry on one machine, not a mistake
        (
            "(from " not in options.label("export_prefixes")
            and options.export_prefixes is not None,
            "--export_prefixes",
        ),
    ):
        if given:
            value = f" {options.launcher}" if option == "--launcher" else ""
            raise UsageError(
                f"{option}{value}: needs --hostfile FILE (the hosts to start); without it "
                "the job runs on this machine only",
                option,
            )
    devices = _local_devices(options, environ)
    if devices is None:
        return options._replace(num_nodes=None)
    if options.gpus is not None or options.nproc_per_node is not None or options.cpu_only:
        which = options.label("num_gpus") if options.num_gpus else "--include/--exclude"
        raise UsageError(
            f"{which}: says this machine's GPUs already; give it or --gpus/--devices/"
            "--nproc_per_node, not both",
            which,
        )
    if options.num_gpus and not options.dry_run:  # a preview may be for a GPU node
        _check_num_gpus(options.num_gpus, environ, options.label("num_gpus"))
    typed = (
        f"--include {options.include}" if options.include
        else f"--exclude {options.exclude}" if options.exclude
        else f"--num_gpus {options.num_gpus}"
    )  # fmt: skip
    return options._replace(
        gpus=tuple(map(str, devices)), num_gpus=None, include=None, exclude=None, num_nodes=None,
        labels=(*options.labels, ("gpus", typed)),  # its refusals name what was typed
    )


def _local_devices(options: LaunchOptions, environ: Mapping[str, str]) -> list[int] | None:
    """The GPU ids the DeepSpeed filters pick on this machine (None: none given)."""
    from paddlike.launch.cluster.selection import parse_filter

    if options.num_gpus:
        return list(range(options.num_gpus))
    text, option = options.include or options.exclude, "--include"
    if not options.include:
        option = "--exclude"
    if not text:
        return None
    if options.include and options.exclude:
        raise UsageError(
            "--include/--exclude: give one of them, not both (as in DeepSpeed)", "--include"
        )
    picked = parse_filter(text, option)
    names = [n for n in picked if n not in LOCAL_NAMES]
    if names:
        raise UsageError(
            f"{option}: host {names[0]!r} needs --hostfile FILE (without it only localhost's "
            "devices can be chosen, e.g. localhost:0,1)",
            option,
        )
    ids = next(iter(picked.values()))
    if option == "--include":
        if ids is None:
            return None  # the whole machine: its default
        return list(ids)
    visible = _visible_gpus(environ)
    if ids is None:
        raise UsageError(f"{option}: nothing is left after excluding this machine", option)
    left = [d for d in range(visible) if d not in ids]
    if not left:
        raise UsageError(
            f"{option}: this machine has {visible} GPU(s); none is left after {text!r}", option
        )
    return left


def _check_num_gpus(n: int, environ: Mapping[str, str], name: str = "--num_gpus") -> None:
    """DeepSpeed's --num_gpus N on this machine: refused by its own name (`name`, as typed)
    where the GPUs are not there (not as the --gpus it becomes, which the user never typed).
    The CPU way keeps what --num_gpus gives a DeepSpeed script: --local_rank=N."""
    from paddlike.launch.context.devices import probe_gpus

    found = probe_gpus(environ)
    if not found.count:
        raise UsageError(
            f"{name} {n}: no NVIDIA GPU found on this machine ({found.tried}); leave it "
            f"out, or run CPU workers with --devices cpu --nproc_per_node {n} "
            "--pass_local_rank (the --local_rank=N a DeepSpeed script reads)",
            name,
        )
    if n > found.count:
        raise UsageError(
            f"{name} {n}: this machine has {found.count} GPU(s) ({found.source})", name
        )


def _visible_gpus(environ: Mapping[str, str]) -> int:
    from paddlike.launch.context.devices import probe_gpus

    found = probe_gpus(environ)
    if not found.count:
        raise UsageError(
            "--exclude: no NVIDIA GPU found on this machine (devices to exclude are GPUs)",
            "--exclude",
        )
    return found.count
