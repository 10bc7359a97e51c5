"""The narrow records each stage after the options gets, built once from them: the plan's
`PlanSpec` (and `Placement`, `ElasticSpec`, `GivenPorts`), the pipeline's `RunSpec`. Next
to `main`, which calls these: no stage after the options takes the whole options record.
"""

from __future__ import annotations

from paddlike.launch.context.master import uses_etcd
from paddlike.launch.context.peers_spec import peers_spec
from paddlike.launch.plan.jobspec import GivenPorts, Placement, PlanSpec
from paddlike.launch.plan.membership import ElasticSpec
from paddlike.launch.run.runspec import GpuLogSpec, RunSpec

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.context.devices import DeviceAssignment
    from paddlike.launch.context.node import NodeMatch
    from paddlike.launch.context.numa import NumaTopology
    from paddlike.launch.context.options.record import LaunchOptions
    from paddlike.launch.plan.nodejob import NodeJob
    from paddlike.launch.plan.plan import PsLayout


def plan_spec(options: LaunchOptions) -> PlanSpec:
    """What the plan needs of the options."""
    return PlanSpec(
        run_mode=options.run_mode,
        training_script=options.training_script,
        training_script_args=tuple(options.training_script_args),
        no_python=options.no_python,
        module=options.module,
        job_id=options.job_id,
        job_token=options.job_token or "",
        role=options.role,
        max_restarts=options.max_restarts,
        hang_timeout=options.hang_timeout,
        straggler_check=options.straggler_check,
        split_logs=options.redirect_stdout_and_stderr,
        virtual_local_rank=options.virtual_local_rank,
        pass_local_rank=options.pass_local_rank,
    )


def placement(options: LaunchOptions, topology: NumaTopology | None) -> Placement | None:
    """--numa_binding (given this node's NUMA facts) and torchrun's -t/-r; None: neither."""
    if options.numa_binding is None and not options.console_streams:
        return None
    return Placement(
        numa_binding=options.numa_binding,
        topology=topology,
        bind_core_list=options.bind_core_list,
        preview=options.dry_run,
        console_streams=options.console_streams,
    )


def elastic_spec(options: LaunchOptions) -> ElasticSpec | None:
    """The job's elastic settings, None for a fixed job. `options.nnodes` is MAX and
    `options.min_nnodes` MIN (set for a range or an --elastic_level of 0 or 1).

    Paddle's --elastic_timeout is how long a job with MIN..MAX-1 nodes waits before it
    starts: our last call, which it sets when given. Level 0 (fault tolerance) holds
    survivors below MIN for a replacement up to --rdzv_timeout; level 1 ends at once."""
    if options.min_nnodes is None or options.nnodes is None:
        return None
    level = options.elastic_level if options.elastic_level >= 0 else 1
    last_call = options.rdzv_last_call
    if options.elastic_timeout is not None:
        last_call = options.elastic_timeout
    return ElasticSpec(
        min_nodes=options.min_nnodes,
        max_nodes=options.nnodes,
        last_call=last_call,
        hold=options.rdzv_timeout if level == 0 else 0.0,
        level=level,
    )


def given_ports(options: LaunchOptions) -> GivenPorts:
    return GivenPorts(options.start_port, options.start_port_from, options.ports_num)


def run_spec(options: LaunchOptions) -> RunSpec:
    """What this node's pipeline needs of the options (`run.job.run_job`)."""
    gpu_log = None
    if options.gpu_log_interval is not None:
        gpu_log = GpuLogSpec(
            interval=options.gpu_log_interval,
            named=options.gpu_log_from,
            cpu_workers=options.cpu_only or options.nproc_per_node_kind == "cpu",
            gpus=tuple(options.gpus) if options.gpus is not None else None,
        )
    etcd = (options.master or "") if uses_etcd(options) else ""
    return RunSpec(
        log_dir=options.log_dir,
        ports=given_ports(options),
        log_overwrite=options.log_overwrite,
        job_id=options.job_id,
        job_token_given=bool(options.job_token),
        max_restarts=options.max_restarts,
        kill_timeout=options.kill_timeout,
        tee=options.tee_indices,
        signals_to_handle=options.signals_to_handle,
        heartbeat_timeout=options.heartbeat_timeout,
        rdzv_timeout=options.rdzv_timeout,
        hang_timeout=options.hang_timeout,
        on_hang=options.on_hang,
        straggler_check=options.straggler_check,
        straggler_threshold=options.straggler_threshold,
        on_straggler=options.on_straggler,
        preflight=options.preflight,
        preflight_limits=tuple(options.preflight_limits),
        preload=tuple(options.preload),
        workers=plan_spec(options) if options.preload else None,
        etcd_master=etcd,
        gpu_log=gpu_log,
        peers=peers_spec(options),
        peers_options=options,
    )


# --- this node's job, from the options and the node's facts -------------------------------


def collective_job(options: LaunchOptions, node: NodeMatch, devices: DeviceAssignment) -> NodeJob:
    """Collective mode's node job; raises UsageError when --master* contradict the
    scheduler's PADDLE_MASTER or put both stores on one port."""
    from paddlike.launch.context.master import launchers_master, workers_port
    from paddlike.launch.plan.planners import collective_node_job

    many = len(node.hosts) > 1
    job = collective_node_job(
        plan_spec(options),
        node,
        devices,
        master=launchers_master(options, node.hosts, node.scheduler_master) if many else None,
        workers_port=workers_port(options),
        elastic=elastic_spec(options),
    )
    return _with_agreed(job, options)


def _with_agreed(job: NodeJob, options: LaunchOptions) -> NodeJob:
    """Nodes must also agree on the pre-flight check's mode and limits (issue 35), the
    restarts and the straggler check (their round loops act together)."""
    from paddlike.launch.health.limits import agreed_settings
    from paddlike.launch.plan.agreement import agreed_round_settings

    job.fingerprint.update(agreed_settings(options.preflight, tuple(options.preflight_limits)))
    job.fingerprint.update(
        agreed_round_settings(
            options.max_restarts,
            options.straggler_check,
            options.straggler_threshold,
            options.on_straggler,
        )
    )
    return job


def ps_counts_job(options: LaunchOptions, node: NodeMatch) -> NodeJob:
    """Parameter-server counts on several nodes: the node job (`nodejob.ps_counts_node_job`)."""
    from paddlike.launch.context.master import launchers_master
    from paddlike.launch.plan.planners import ps_counts_node_job

    master = launchers_master(options, node.hosts, node.scheduler_master)
    servers, trainers = options.server_num or 1, options.worker_num or 1
    job = ps_counts_node_job(plan_spec(options), node, servers, trainers, master)
    return _with_agreed(job, options)


def ps_job(options: LaunchOptions, layout: PsLayout, interface: str, reason: str) -> NodeJob:
    """Parameter-server mode with its ports in `layout`; raises UsageError when
    --master_port is a port the lists give to a server or trainer there."""
    from paddlike.launch.plan.layout import ps_lists_master
    from paddlike.launch.plan.planners import ps_node_job

    master = ps_lists_master(layout, options.master, options.master_addr, options.master_port)
    job = ps_node_job(plan_spec(options), layout, interface, reason, master)
    return _with_agreed(job, options)
