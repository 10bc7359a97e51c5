"""The plan: every process this node starts, decided without I/O.

(the job's `PlanSpec`, node, ports, environ) in, a frozen `LaunchPlan` out. No clock, no
filesystem, no `os.environ`: the caller passes in what the plan depends on, so the
whole thing is tested exhaustively and printed by `--dry_run`. Collective mode here;
parameter servers in `plan.ps_plan`, their heter stages in `plan.heter`; which of them
a node job uses is its planner (`plan.planners`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

from paddlike import contract, netaddr
from paddlike.launch import NamedTuple
from paddlike.logs.worker_probe import probe_env

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.context.devices import DeviceAssignment
    from paddlike.launch.plan.jobspec import PlanSpec


class Role(enum.Enum):
    """What a process is in the job; the value is the name used in logs and summaries."""

    TRAINER = "trainer"
    SERVER = "server"
    HETER = "heter"

    @property
    def log_prefix(self) -> str:
        return {"trainer": "workerlog", "server": "serverlog", "heter": "heterlog"}[self.value]


class ProcessSpec(NamedTuple):
    """The blueprint of one process (the supervisor owns the running instance)."""

    role: Role
    rank: int  # global rank within its role; a trainer's PADDLE_TRAINER_ID
    local_index: int  # index among this node's processes of the same role (the N of the log name)
    device_ids: tuple[str, ...]  # device ids as the worker sees them ("" entries never appear)
    endpoint: str  # host:port of this process
    env: Mapping[str, str]  # variables the launcher adds on top of the inherited environment
    argv: tuple[str, ...]  # the full command line
    log_name: str  # e.g. "workerlog.0"; with --redirect_stdout_and_stderr, the stdout file
    err_log_name: str | None = None  # the stderr file with --redirect_stdout_and_stderr
    physical_devices: tuple[str, ...] = ()  # the same GPUs by physical id (or UUID); () on CPU
    # --numa_binding (plan/binding.py): the CPUs it may run on, their NUMA nodes (its
    # preferred memory: the first) and why, as --dry_run and the banner say; () when unbound
    cpus: tuple[int, ...] = ()
    numa_nodes: tuple[int, ...] = ()
    binding: str = ""
    # the streams the console shows of it when it is shown: 1 stdout, 2 stderr, 3 both
    # (torchrun's -t/-r, `context.options.console.streams`; 1 or 2 only with split files)
    console_streams: int = 3

    @property
    def label(self) -> str:
        return f"{self.role.value} rank {self.rank}"


class LaunchPlan(NamedTuple):
    """Everything one node's launcher will start, plus the job-wide facts it prints."""

    job_id: str
    run_mode: str  # "collective" | "ps" | "ps-heter"
    node_index: int
    nnodes: int
    host: str  # this node's address
    processes: tuple[ProcessSpec, ...]
    trainer_endpoints: tuple[str, ...]  # all nodes', in rank order
    server_endpoints: tuple[str, ...] = ()  # PS mode
    master: str = ""  # host:port of the workers' runtime store (PADDLE_MASTER)
    devices_why: str = ""  # which devices this node's workers got and why (.describe())
    heter_endpoints: tuple[str, ...] = ()  # ps-heter: every heter trainer, stage 2 first
    node_sizes: tuple[int, ...] = ()  # trainers on each node, in node order (when known)


class EndpointLayout(NamedTuple):
    """Where every node's processes listen: the seam the rendezvous fills in.

    Single node: ports reserved locally. Many nodes: for now ports from --start_port;
    the rendezvous replaces that with ports each node reserved and published.
    """

    hosts: tuple[str, ...]  # node addresses, --ips order
    node_index: int
    ports: tuple[tuple[int, ...], ...]  # per node: one port per local trainer
    master_port: int  # the workers' runtime store, on hosts[0]; not a trainer port
    # per node: its workers' devices as PADDLE_WORLD_DEVICE_IDS spells them ("0,1"), from
    # its rendezvous entry; () or "" where unknown (a preview): this node's layout is assumed
    devices: tuple[str, ...] = ()

    def trainer_endpoints(self) -> tuple[str, ...]:
        pairs = zip(self.hosts, self.ports, strict=True)
        return tuple(netaddr.join(h, p) for h, ps in pairs for p in ps)  # [v6]:port

    @property
    def master(self) -> str:
        return netaddr.join(self.hosts[0], self.master_port)


class PsLayout(NamedTuple):
    """Parameter-server placement: every server and trainer of the job, in list order.

    A trainer's id is its position in `trainers`; a server's rank its position in
    `servers`. This node runs the entries whose host is `host`.
    """

    servers: tuple[str, ...]  # host:port
    trainers: tuple[str, ...]  # host:port
    host: str  # this node's address
    node_index: int
    nnodes: int
    node_hosts: tuple[str, ...] = ()  # distinct hosts, first-appearance order
    gloo_endpoint: str = ""  # Paddle fleet's gloo HTTP rendezvous, on server 0's host
    heter_stages: tuple[tuple[str, ...], ...] = ()  # ps-heter: stages 2..N+1, host:port
    heter_devices: tuple[str, ...] = ()  # ps-heter: "cpu" | "gpu" per heter stage


class JobFacts(NamedTuple):
    """Launch-time facts the plan cannot compute without I/O, passed in by the shell."""

    job_id: str
    python: str  # sys.executable
    log_dir: str  # absolute path of the log directory
    environ: Mapping[str, str]  # the launcher's environment (only read)
    interface: str = ""  # interface holding this node's address ("" = unknown)
    restart_count: int = 0
    # the job's secret when the launcher made one (one node, no --job_token): random, so
    # decided by the shell; --job_token always wins
    job_token: str = ""


ERROR_FILE = "TORCHELASTIC_ERROR_FILE"
ERROR_FILE_SUFFIX = ".error.json"


def error_file_name(log_name: str) -> str:
    """Where a worker's `@record` (torch.distributed.elastic) writes its exception:
    workerlog.0 -> workerlog.0.error.json, next to the log, so no directory has to be
    made for it; the failure report shows it (`paddlike.logs.report.read_error_file`)."""
    return log_name + ERROR_FILE_SUFFIX


def error_file_env(facts: JobFacts, log_name: str) -> dict[str, str]:
    """torchrun always sets TORCHELASTIC_ERROR_FILE; scripts and torch's own tests read it.
    A user's own value (for every worker alike) is kept."""
    if ERROR_FILE in facts.environ:
        return {}
    return {ERROR_FILE: facts.log_dir.rstrip("/") + "/" + error_file_name(log_name)}


def log_names(role: Role, local_index: int, split: bool) -> tuple[str, str | None]:
    """workerlog.N holds stdout and stderr; with --redirect_stdout_and_stderr, stderr
    goes to workerlog.N.err (stdout stays in workerlog.N, which the console and
    `paddlike.logs` read)."""
    name = f"{role.log_prefix}.{local_index}"
    return name, (f"{name}.err" if split else None)


def launcher_env(spec: PlanSpec, facts: JobFacts, node_hosts: Sequence[str]) -> dict:
    env = {
        contract.JOB_ID: facts.job_id,
        contract.PADDLE_JOB_ID: facts.job_id,
        contract.PADDLE_LOG_DIR: facts.log_dir,
        contract.RESTART_COUNT: str(facts.restart_count),
        contract.NODE_HOSTS: ",".join(node_hosts),
    }
    token = spec.job_token or facts.job_token
    if token:
        env[contract.JOB_TOKEN] = token
    return env


def ifname_env(facts: JobFacts) -> dict[str, str]:
    if not facts.interface:
        return {}
    return {
        name: facts.interface
        for name in (contract.GLOO_SOCKET_IFNAME, contract.NCCL_SOCKET_IFNAME)
        if name not in facts.environ
    }


def _threads_env(facts: JobFacts, nproc: int) -> dict[str, str]:
    """One OpenMP thread per worker when several share a node (torchrun does the same),
    unless the user chose: N workers x all-cores threads each oversubscribe the CPU."""
    if nproc > 1 and contract.OMP_NUM_THREADS not in facts.environ:
        return {contract.OMP_NUM_THREADS: "1"}
    return {}


_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def no_proxy_env(facts: JobFacts, node_hosts: Sequence[str]) -> dict[str, str]:
    """Keep the job's own traffic off the user's proxy.

    With a proxy in the environment, HTTP clients in workers (Paddle's gloo HTTP
    rendezvous, torch/etcd clients, metrics) would send node-to-node requests to a
    proxy that cannot reach the cluster, and the job hangs. The proxy stays for
    everything else; the nodes, loopback and localhost are added to no_proxy.
    """
    if not any(facts.environ.get(name) for name in _PROXY_VARS):
        return {}
    current = facts.environ.get("no_proxy") or facts.environ.get("NO_PROXY") or ""
    entries = [e.strip() for e in current.split(",") if e.strip()]
    for host in ("127.0.0.1", "localhost", *node_hosts):
        if host not in entries:
            entries.append(host)
    value = ",".join(entries)
    return {"no_proxy": value, "NO_PROXY": value}


def plan_collective(
    spec: PlanSpec,
    layout: EndpointLayout,
    devices: DeviceAssignment,
    facts: JobFacts,
) -> LaunchPlan:
    """One trainer per device group on this node; ranks node-major in --ips order.

    Nodes may differ in their worker counts (`layout.ports`, from each node's entry) and
    devices (`layout.devices`); a node whose devices are unknown (a preview) is assumed to
    have this node's, for PADDLE_WORLD_DEVICE_IDS.

    On GPUs every worker's device variables agree: FLAGS_selected_gpus ==
    PADDLE_LOCAL_DEVICE_IDS == its entry of PADDLE_WORLD_DEVICE_IDS (":"-joined), numbered
    as the worker's CUDA runtime numbers them, and PADDLE_DISTRI_BACKEND=nccl. With one
    worker per visible GPU (the default) a worker's GPU is also its LOCAL_RANK, so
    torchrun-style scripts that pick ``cuda:LOCAL_RANK`` get the same device.

    --virtual_local_rank, as torchrun's: every worker gets LOCAL_RANK=0 and
    CUDA_VISIBLE_DEVICES naming its own GPUs (their physical ids, or the entries of the
    user's CUDA_VISIBLE_DEVICES), so code written for one GPU per process (``cuda:0``)
    finds its GPU and cannot touch another's; the GPU variables are numbered as the worker
    then sees them (FLAGS_selected_gpus 0, every entry of PADDLE_WORLD_DEVICE_IDS alike).
    PADDLE_LOCAL_RANK and PADDLE_RANK_IN_NODE keep the worker's index on the node: Paddle
    has no virtual rank, and its scripts number log files and ports by it.

    DeepSpeed's ``--local_rank=N`` (`PlanSpec.pass_local_rank`) goes right after the
    script, N being the worker's LOCAL_RANK (0 for every worker with --virtual_local_rank).
    """
    node = layout.node_index
    nproc = devices.nproc
    if len(layout.ports[node]) != nproc:
        raise ValueError(f"layout has {len(layout.ports[node])} ports for {nproc} workers")
    endpoints = layout.trainer_endpoints()
    first_rank = sum(len(p) for p in layout.ports[:node])
    world = len(endpoints)
    gpu = devices.kind == "gpu"
    local_ids = [",".join(d) for d in devices.per_worker]
    world_ids = _world_device_ids(layout, devices) if gpu else []
    master_host, master_port = layout.hosts[0], layout.master_port
    common = {
        contract.TRAINERS_NUM: str(world),
        contract.GLOBAL_SIZE: str(world),
        contract.WORLD_SIZE: str(world),
        contract.PADDLE_LOCAL_SIZE: str(nproc),
        contract.LOCAL_WORLD_SIZE: str(nproc),
        contract.NNODES: str(len(layout.hosts)),
        contract.GROUP_RANK: str(node),
        contract.NODE_RANK: str(node),
        contract.TRAINER_ENDPOINTS: ",".join(endpoints),
        contract.PADDLE_MASTER: netaddr.join(master_host, master_port),
        contract.MASTER_ADDR: master_host,  # bare, IPv6 too: torch resolves it as it is
        contract.MASTER_PORT: str(master_port),
        contract.WORLD_DEVICE_IDS: ",".join(world_ids),
        contract.DISTRI_BACKEND: "nccl" if gpu else "gloo",
        contract.GROUP_WORLD_SIZE: str(len(layout.hosts)),
        contract.ROLE_NAME: spec.role,
        contract.ROLE_WORLD_SIZE: str(world),
        contract.TORCHELASTIC_RUN_ID: facts.job_id,
        contract.TORCHELASTIC_RESTART_COUNT: str(facts.restart_count),
        contract.TORCHELASTIC_MAX_RESTARTS: str(spec.max_restarts),
        contract.TORCHELASTIC_USE_AGENT_STORE: "False",
        **_threads_env(facts, nproc),
        **no_proxy_env(facts, layout.hosts),
        **ifname_env(facts),
        **launcher_env(spec, facts, layout.hosts),
        # --hang_timeout, --straggler_check: torch's flight recorder on, and the probe
        # that reads it out
        **(probe_env(facts.environ) if spec.hang_timeout or spec.straggler_check else {}),
    }
    if spec.virtual_local_rank and world_ids and devices.physical:  # GPUs seen from 0
        common[contract.WORLD_DEVICE_IDS] = ",".join(
            ":".join(str(i) for i in range(len(e.split(":")))) for e in world_ids
        )
    argv = spec.argv(facts.python)
    processes = []
    for local in range(nproc):
        rank = first_rank + local
        seen = devices.per_worker[local]
        physical = devices.physical[local] if devices.physical else ()
        env = {
            **common,
            contract.TRAINER_ID: str(rank),
            contract.GLOBAL_RANK: str(rank),
            contract.RANK: str(rank),
            contract.ROLE_RANK: str(rank),
            contract.RANK_IN_NODE: str(local),
            contract.PADDLE_LOCAL_RANK: str(local),
            contract.LOCAL_RANK: str(local),
            contract.CURRENT_ENDPOINT: endpoints[rank],
            contract.LOCAL_DEVICE_IDS: local_ids[local],
        }
        if gpu:
            env[contract.SELECTED_GPUS] = local_ids[local]
        if spec.virtual_local_rank:
            env[contract.LOCAL_RANK] = "0"
            if physical:  # a GPU worker alone with its GPUs (a CPU one: only LOCAL_RANK)
                seen = tuple(str(i) for i in range(len(physical)))
                env[contract.CUDA_VISIBLE_DEVICES] = ",".join(physical)
                env[contract.SELECTED_GPUS] = env[contract.LOCAL_DEVICE_IDS] = ",".join(seen)
        if spec.pass_local_rank:  # DeepSpeed's --local_rank=N: what LOCAL_RANK says
            argv = spec.argv(facts.python, int(env[contract.LOCAL_RANK]))
        log, err = log_names(Role.TRAINER, local, spec.split_logs)
        env.update(error_file_env(facts, log))
        processes.append(
            ProcessSpec(
                role=Role.TRAINER,
                rank=rank,
                local_index=local,
                device_ids=seen,
                endpoint=endpoints[rank],
                env=dict(sorted(env.items())),
                argv=argv,
                log_name=log,
                err_log_name=err,
                physical_devices=physical,
            )
        )
    return LaunchPlan(
        job_id=facts.job_id,
        run_mode="collective",
        node_index=node,
        nnodes=len(layout.hosts),
        host=layout.hosts[node],
        processes=tuple(processes),
        trainer_endpoints=endpoints,
        master=netaddr.join(master_host, master_port),
        devices_why=devices.describe(),
        node_sizes=tuple(len(p) for p in layout.ports),
    )


def node_sizes_text(sizes: Sequence[int]) -> str:
    """How --dry_run and the banner name each node's trainer count: "" when all are equal
    (nothing to say), else "node 0: 1, node 1: 2, node 2: 3"."""
    if len(set(sizes)) <= 1:
        return ""
    return ", ".join(f"node {i}: {n}" for i, n in enumerate(sizes))


def world_devices_text(devices: DeviceAssignment) -> str:
    """This node's entry of PADDLE_WORLD_DEVICE_IDS: each worker's devices ':'-joined,
    workers ','-joined ("0,1"; "0:1,2:3"); "" on CPUs. Published at the rendezvous."""
    if devices.kind != "gpu":
        return ""
    return ",".join(":".join(d) for d in devices.per_worker)


def _world_device_ids(layout: EndpointLayout, devices: DeviceAssignment) -> list[str]:
    """Every trainer's devices in rank order, from each node's published devices; a node
    that published none (a preview, an older launcher) is taken to be laid out like this one."""
    ids: list[str] = []
    for node, ports in enumerate(layout.ports):
        text = layout.devices[node] if node < len(layout.devices) else ""
        if text and len(text.split(",")) == len(ports):
            ids += text.split(",")
        else:
            ids += [":".join(devices.per_worker[i % devices.nproc]) for i in range(len(ports))]
    return ids


def _shown(name: str, value: str) -> str:
    """--dry_run output is pasted into tickets and chats: never print the job token."""
    return "<hidden>" if name == contract.JOB_TOKEN else value


def _device_text(p: ProcessSpec) -> str:
    """``gpu 1 (physical 3)``: the id the worker uses, and the GPU it is, when they differ."""
    if not p.device_ids:
        return "cpu"
    seen = ",".join(p.device_ids)
    physical = ",".join(p.physical_devices)
    if physical and physical != seen:
        return f"gpu {seen} (physical {physical})"
    return f"gpu {seen}"


def format_plan(plan: LaunchPlan, log_dir: str) -> str:
    """The --dry_run text: every process, its command and environment, in a fixed order."""
    import shlex

    lines = [
        f"paddlike.launch dry run: job {plan.job_id}, mode {plan.run_mode}, "
        f"node {plan.node_index} of {plan.nnodes} ({plan.host}), "
        f"{len(plan.processes)} process(es); nothing is started",
        "trainer endpoints: " + ",".join(plan.trainer_endpoints),
    ]
    if plan.server_endpoints:
        lines.append("server endpoints: " + ",".join(plan.server_endpoints))
    if plan.heter_endpoints:
        lines.append("heter endpoints: " + ",".join(plan.heter_endpoints))
    if plan.master:
        lines.append(f"master (PADDLE_MASTER): {plan.master}")
    if plan.devices_why:
        lines.append(f"devices: {plan.devices_why}")
    if node_sizes_text(plan.node_sizes):
        lines.append(f"trainers per node: {node_sizes_text(plan.node_sizes)}")
    for p in plan.processes:
        logs = f"{log_dir}/{p.log_name}" + (
            f", {log_dir}/{p.err_log_name}" if p.err_log_name else ""
        )
        lines += [
            "",
            f"[{p.label}] local index {p.local_index}, "
            f"device {_device_text(p)}, endpoint {p.endpoint}, log {logs}",
            *([f"  numa binding: {p.binding}"] if p.binding else []),
            f"  command: {shlex.join(p.argv)}",
            "  env:",
            *(f"    {k}={_shown(k, v)}" for k, v in sorted(p.env.items())),
        ]
    return "\n".join(lines)
