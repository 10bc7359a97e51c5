"""Rules between options: what one option's value says about another's.

Three steps of `parse_options` live here: `elastic_fields` (--nnodes MIN:MAX and
--elastic_level into the record's fields), `infer_run_mode` (a PS option implies
--run_mode ps) and `check_combinations` (every rule between the record's fields, each
error naming the options involved). Values one at a time are `values`' business.
"""

from __future__ import annotations

from collections.abc import Mapping

from paddlike import netaddr
from paddlike.launch.context.options.our_table import OPTIONS
from paddlike.launch.context.options.record import (
    LaunchOptions,
    Source,
    UsageError,
    elastic_text,
)

# the options that imply --run_mode ps, and ps-heter (their rows' `implies`)
PS_OPTIONS = tuple(o.dest for o in OPTIONS if o.implies == "ps")
HETER_OPTIONS = tuple(o.dest for o in OPTIONS if o.implies == "ps-heter")


def elastic_fields(
    raw: dict[str, object], given: set[str], labels: Mapping[str, str] | None = None
) -> None:
    """--nnodes MIN:MAX and --elastic_level into `nnodes` (MAX) and `min_nnodes` (MIN, set
    for an elastic job); --node_rank is dropped there (ranks come from each round).
    `labels`: how messages name an option given other than by our flag
    (`LaunchOptions.labels`)."""
    labels = labels or {}

    def label(dest: str) -> str:
        return labels.get(dest, f"--{dest}")

    nnodes = raw.get("nnodes")
    if isinstance(nnodes, tuple):
        raw["min_nnodes"], raw["nnodes"] = nnodes
    level = raw.get("elastic_level", -1)
    ranged = raw.get("min_nnodes") is not None
    count = raw.get("nnodes")
    fleet = "elastic_server" in given and "elastic_level" not in given
    if fleet and not ranged and isinstance(count, int) and count >= 2:
        # fleet's legacy elastic launcher: one node count with an elastic server is its
        # fault-tolerance level (a lost node is waited for), as --elastic_level 0 here
        raw["elastic_level"] = level = 0
    shown = f"--nnodes {raw['min_nnodes']}:{count}" if ranged else f"--nnodes {count}"
    if ranged and level == -1 and "elastic_level" in given:
        raise UsageError(
            f"{label('elastic_level')}: -1 (off) contradicts {shown}, an elastic range; drop "
            "--elastic_level -1, or give one node count for a fixed job",
            "--elastic_level",
        )
    if level == 1 and not ranged:
        got = shown if count is not None else "no --nnodes"
        raise UsageError(
            f"{label('elastic_level')}: 1 (scale) needs a range of nodes, --nnodes MIN:MAX, got "
            f"{got}; "
            "for a fixed count that waits for replacements use --elastic_level 0",
            "--elastic_level",
        )
    if level == 0 and not ranged:
        if not isinstance(count, int) or count < 2:
            got = shown if count is not None else "no --nnodes"
            raise UsageError(
                f"{label('elastic_level')}: 0 (fault tolerance) needs --nnodes N with N >= 2 (or "
                f"MIN:MAX), got {got}; one node has nothing to be elastic about",
                "--elastic_level",
            )
        raw["min_nnodes"] = count  # the world keeps N nodes; survivors wait for a replacement
    if raw.get("min_nnodes") is None:
        if "elastic_timeout" in given:
            raise UsageError(
                f"{label('elastic_timeout')}: only meaningful for an elastic job (--nnodes "
                "MIN:MAX or "
                f"--elastic_level 0), got {raw['elastic_timeout']:g} for a fixed job, which "
                "starts when all its nodes joined; drop it (or unset PADDLIKE_ELASTIC_TIMEOUT "
                "and PADDLE_ELASTIC_TIMEOUT)",
                "--elastic_timeout",
            )
        return
    raw.pop("node_rank", None)  # torchrun ignores it for c10d/etcd too (Kubeflow sets it)


def any_port_master(raw: dict[str, object], source: Source | None) -> None:
    """torchrun's ``--rdzv_endpoint localhost:0``: port 0 asks for any free port. On one
    node nobody else needs to find the launchers' store (a one-node job meets no one), so
    the endpoint is dropped, as torchrun picks a free port there; on many nodes the others
    could not learn which port node 0 picked, so it is refused. An IPv6 host stays this
    node's address (``[::1]:0``: the job runs on ::1, not on the default 127.0.0.1)."""
    master = raw.get("master")
    if source is None or not isinstance(master, str) or not master.endswith(":0"):
        return
    nnodes, ips = raw.get("nnodes"), raw.get("ips") or ()
    many = isinstance(nnodes, tuple) or (isinstance(nnodes, int) and nnodes > 1)
    if many or len(ips) > 1 or raw.get("servers") or raw.get("workers"):  # type: ignore[arg-type]
        nodes = (
            f"--nnodes {':'.join(map(str, nnodes))}"
            if isinstance(nnodes, tuple)
            else (f"--nnodes {nnodes}" if many else "several nodes")
        )
        raise UsageError(
            f"{source.label('master')}: port 0 (any free port) works for a one-node job "
            f"only, but this job has {nodes}: the other nodes could not learn which port "
            f"node 0 picked; give a port, e.g. {master[:-2]}:29400",
            "--master",
        )
    del raw["master"]
    host = netaddr.split(master)[0] if master.startswith("[") else ""
    if host and netaddr.is_ipv6(host) and "ips" not in raw:
        raw["ips"] = (host,)


# DeepSpeed's own options for choosing hosts and devices: a start with any of them is a
# DeepSpeed-style start, whose workers get `--local_rank=N` as DeepSpeed's do
DEEPSPEED_START = ("hostfile", "include", "exclude", "num_nodes", "num_gpus")


def passes_local_rank(raw: Mapping[str, object]) -> bool:
    """Does each worker get DeepSpeed's ``--local_rank=N`` after the script?

    DeepSpeed's per-node launcher (deepspeed.launcher.launch, which `deepspeed` runs on one
    machine and on every host of a pdsh start) adds it unless --no_local_rank; its slurm
    runner starts the script with srun directly and adds none. So:

        --pass_local_rank                               yes (any start)
        --hostfile/-H, --include, --exclude,
          --num_nodes, --num_gpus                       yes, unless --no_local_rank
        the same with --launcher slurm                  no
        --nproc_per_node, --gpus, --ips, ... only       no (torchrun/Paddle: no extra argument)

    The cluster starter gives every host's launcher --pass_local_rank when this says yes
    (`cluster.picks.forwarded_args`): the hosts' launchers see none of those options."""
    if raw.get("pass_local_rank") and raw.get("no_local_rank"):
        raise UsageError(
            "--no_local_rank: contradicts --pass_local_rank; give one of them", "--no_local_rank"
        )
    if raw.get("pass_local_rank"):
        return True
    deepspeed = any(raw.get(dest) is not None for dest in DEEPSPEED_START)
    return deepspeed and raw.get("launcher") != "slurm" and not raw.get("no_local_rank")


def infer_run_mode(raw: Mapping[str, object], given: set[str]) -> str:
    """ps when a PS option is given (ours only, never the script's); explicit mode must agree."""
    ps_given = [o for o in PS_OPTIONS if o in given]
    heter_given = [o for o in HETER_OPTIONS if o in given]
    mode = raw.get("run_mode")
    if mode == "collective" and (ps_given or heter_given):
        option = (ps_given or heter_given)[0]
        raise UsageError(
            f"--run_mode: 'collective' contradicts --{option} (a parameter-server option); "
            "drop one of them",
            "--run_mode",
        )
    if mode is None:
        mode = "ps-heter" if heter_given else "ps" if ps_given else "collective"
    return str(mode)


def check_combinations(o: LaunchOptions) -> None:
    """Rules between options; each error names the options involved."""
    if o.module and o.no_python:
        raise UsageError("--module: cannot be combined with --no_python", "--module")
    if o.preload and o.no_python:  # the zygote is a Python interpreter: workers must be too
        raise UsageError(
            "--preload: needs a Python script; --no_python runs a program", "--preload"
        )
    if o.min_nnodes is not None:
        _check_elastic(o)
    elif o.on_straggler == "exclude":  # issue 37
        raise UsageError(
            f"{o.label('on_straggler')}: exclude makes a straggling node leave the job, which "
            "only an elastic job survives: give --nnodes MIN:MAX with MIN below MAX (N:N, like N, "
            "is a fixed job), or use --on_straggler warn",
            "--on_straggler",
        )
    if o.run_mode == "ps-heter":
        _check_heter(o)
    elif o.run_mode == "ps":
        for dest in HETER_OPTIONS:
            if getattr(o, dest) is not None:
                raise UsageError(
                    f"--{dest}: a ps-heter option, but --run_mode is 'ps'; use --run_mode "
                    "ps-heter or drop it",
                    f"--{dest}",
                )
    if o.is_ps:
        if o.gpus is not None:
            raise UsageError(
                f"{o.label('gpus')}: parameter-server mode runs on CPUs, got {','.join(o.gpus)!r}",
                "--gpus",
            )
        if o.nproc_per_node is not None or o.nproc_per_node_kind is not None:
            raise UsageError(
                f"{o.label('nproc_per_node')}: not used in parameter-server mode (use "
                "--worker_num), "
                f"got '{o.nproc_per_node or o.nproc_per_node_kind}'",
                "--nproc_per_node",
            )
        if o.servers is not None and o.server_num is not None and o.server_num != len(o.servers):
            raise UsageError(
                f"{o.label('server_num')}: {o.server_num} contradicts --servers, which lists "
                f"{len(o.servers)}",
                "--server_num",
            )
        if o.workers is not None and o.worker_num is not None and o.worker_num != len(o.workers):
            raise UsageError(
                f"{o.label('worker_num')}: {o.worker_num} contradicts --workers, which lists "
                f"{len(o.workers)}",
                "--worker_num",
            )
        if (o.servers is None) != (o.workers is None):
            missing = "--workers" if o.workers is None else "--servers"
            raise UsageError(
                f"{missing}: needed too when the other list is given "
                "(each node starts the roles whose address is its own)",
                missing,
            )
    if o.is_ps:
        _check_ps_counts(o)
    if o.standalone:
        _check_standalone(o)
    if o.role != "default" and o.is_ps:
        raise UsageError(
            f"{o.label('role')}: torchrun's worker role ({o.role!r}) is for collective jobs; "
            "parameter-"
            "server jobs name their roles themselves (TRAINING_ROLE)",
            "--role",
        )
    if o.ips_given and o.nnodes is not None and o.nnodes != len(o.ips) and not o.min_nnodes:
        raise UsageError(
            f"{o.label('nnodes')}: {o.nnodes} contradicts --ips, which lists {len(o.ips)} "
            f"({','.join(o.ips)})",
            "--nnodes",
        )
    if o.node_rank is not None and not o.hostfile:  # with one: the hostfile's hosts (here.py)
        nnodes = o.nnodes if o.nnodes is not None else len(o.ips)
        if o.node_rank >= nnodes:
            raise UsageError(
                f"{o.label('node_rank')}: {o.node_rank} is out of range for {nnodes} node(s)",
                "--node_rank",
            )
    _check_device_words(o)
    if o.gpus is not None and o.nproc_per_node is not None and len(o.gpus) % o.nproc_per_node:
        raise UsageError(
            f"{o.label('nproc_per_node')}: {o.nproc_per_node} does not divide the {len(o.gpus)} "
            "GPUs of "
            f"--gpus {','.join(o.gpus)}",
            "--nproc_per_node",
        )


def _check_elastic(o: LaunchOptions) -> None:
    """An elastic job finds its nodes at each round's rendezvous: what that rules out."""
    what = f"an elastic job (--nnodes {elastic_text(o)}"
    what += ")" if o.elastic_level < 0 else f", --elastic_level {o.elastic_level})"
    if o.is_ps:
        raise UsageError(
            f"{o.label('nnodes')}: {what} is collective, but --run_mode is {o.run_mode!r}; "
            "parameter-server jobs run a fixed set of nodes: give one node count",
            "--nnodes",
        )
    if o.ips_given and len(o.ips) > 1:
        raise UsageError(
            f"{o.label('ips')}: {what} finds its nodes at each round's rendezvous, but --ips lists "
            f"{','.join(o.ips)}; drop --ips and give every node the same --master ip:port "
            "(or etcd://host:port)",
            "--ips",
        )
    if not o.master and not o.master_addr:
        raise UsageError(
            f"{o.label('master')}: {what} needs a place where the nodes meet: --master ip:port "
            "(node "
            "0's store), --master etcd://host:port (recommended: losing node 0 is then an "
            "ordinary node loss), --master_addr, or torchrun's --rdzv_endpoint",
            "--master",
        )
    if o.master_port_given and o.master and o.master.startswith("etcd://"):
        raise UsageError(
            f"{o.label('master_port')}: {o.master_port} fixes the workers' port on rank 0's node, "
            "but "
            f"rank 0 may move to another node between the rounds of {what} with --master "
            f"{o.master}; drop --master_port (a free port is picked each round)",
            "--master_port",
        )


def _check_ps_counts(o: LaunchOptions) -> None:
    """Counts (--server_num/--worker_num) on several nodes are Paddle's multi-node PS: each
    node runs that many servers and trainers, and the lists are every node's, node-major
    (`plan.nodejob.ps_counts_node_job`). ps-heter's --heter_worker_num is one node's only:
    its stages' order across nodes is not defined by counts, so it is refused there.
    """
    if o.servers is not None or o.workers is not None or not o.heter_worker_num:
        return
    many = (
        f"--ips lists {len(o.ips)} nodes"
        if len(o.ips) > 1
        else f"--nnodes is {o.nnodes}"
        if o.nnodes is not None and o.nnodes > 1
        else ""
    )
    if many:
        raise UsageError(
            f"{o.label('heter_worker_num')}: counts describe a one-node ps-heter job, but {many}; "
            "on several nodes list every process with --servers ip:port,..., --workers "
            "ip,... and --heter_workers (the same lists on every node; see docs/ps.md)",
            "--heter_worker_num",
        )


def _check_standalone(o: LaunchOptions) -> None:
    """torchrun's --standalone: one node on 127.0.0.1 with its own rendezvous (a free port);
    what a one-node paddlike job does anyway. Options naming other nodes contradict it."""
    for dest, bad in (
        ("master", o.master is not None),
        ("nnodes", o.nnodes is not None and o.nnodes > 1),
        ("ips", len(o.ips) > 1),
        ("node_rank", bool(o.node_rank)),
    ):
        if bad:
            raise UsageError(
                f"{o.standalone_from}: a one-node job with its own rendezvous, but --{dest} "
                f"{getattr(o, dest) if dest != 'ips' else ','.join(o.ips)} names another node "
                "or a shared rendezvous; drop one of them",
                "--standalone",
            )


def _check_heter(o: LaunchOptions) -> None:
    """ps-heter: the heter stages (by list or by count), their devices, and that the
    options agree on how many stages there are."""
    lists = o.servers is not None or o.workers is not None
    if o.heter_workers is None and o.heter_worker_num is None:
        raise UsageError(
            f"{o.label('heter_workers')}: needed with --run_mode ps-heter (or --heter_worker_num "
            "on one "
            "node): the heter trainers of each stage",
            "--heter_workers",
        )
    if o.heter_workers is not None and not lists:
        raise UsageError(
            f"{o.label('heter_workers')}: needs --servers and --workers too (each node starts the "
            "roles "
            "whose address is its own); on one node use --heter_worker_num",
            "--heter_workers",
        )
    if o.heter_workers is None and lists:
        raise UsageError(
            f"{o.label('heter_worker_num')}: counts are for one-node jobs (with "
            "--server_num/--worker_num); "
            "with --servers/--workers list the heter trainers by --heter_workers",
            "--heter_worker_num",
        )
    if o.heter_workers is not None and o.heter_worker_num is not None:
        listed = tuple(len(s) for s in o.heter_workers)
        if listed != o.heter_worker_num:
            raise UsageError(
                f"{o.label('heter_worker_num')}: {';'.join(map(str, o.heter_worker_num))} "
                "contradicts "
                f"--heter_workers, which lists {';'.join(map(str, listed))} per stage",
                "--heter_worker_num",
            )
    source = "--heter_workers" if o.heter_workers is not None else "--heter_worker_num"
    stages = len(o.heter_stage_sizes)
    if o.heter_devices is None:
        raise UsageError(
            f"{o.label('heter_devices')}: needed in ps-heter mode, one device kind per heter stage "
            f"(cpu or gpu; {source} gives {stages} stage(s)), e.g. --heter_devices "
            + ";".join(["gpu"] * stages),
            "--heter_devices",
        )
    if len(o.heter_devices) != stages:
        raise UsageError(
            f"{o.label('heter_devices')}: {';'.join(o.heter_devices)!r} names "
            f"{len(o.heter_devices)} "
            f"stage(s) but {source} gives {stages}; give one device kind per heter stage",
            "--heter_devices",
        )


def _check_device_words(o: LaunchOptions) -> None:
    """--devices cpu and --nproc_per_node gpu|cpu|auto against the other device options."""
    kind = o.nproc_per_node_kind
    if kind == "cpu" and o.gpus is not None:
        raise UsageError(
            f"{o.label('nproc_per_node')}: 'cpu' contradicts --gpus {','.join(o.gpus)}; drop one "
            "of them",
            "--nproc_per_node",
        )
    if kind == "gpu" and o.cpu_only:
        raise UsageError(
            f"{o.label('nproc_per_node')}: 'gpu' contradicts --devices cpu; drop one of them",
            "--nproc_per_node",
        )
