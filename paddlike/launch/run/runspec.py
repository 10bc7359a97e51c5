"""What running the job needs of the options, as one narrow record (`RunSpec`): the
pipeline's signatures say what they use, not the whole options record. Built once from
the options by `launch.specs.run_spec`.
"""

from __future__ import annotations

from paddlike.launch import NamedTuple

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.context.options import LaunchOptions, TeeSelection
    from paddlike.launch.context.peers_spec import PeersSpec
    from paddlike.launch.plan.jobspec import GivenPorts, PlanSpec


class GpuLogSpec(NamedTuple):
    """Paddle's --enable_gpu_log / --gpu_log_interval (`run.gpulog`)."""

    interval: float  # seconds between rows
    named: str  # how messages name the option ("--enable_gpu_log", ...: what the user gave)
    cpu_workers: bool  # --devices cpu or torchrun's --nproc_per_node cpu: nothing to log
    gpus: tuple[str, ...] | None = None  # --gpus; None: the visible ones


class RunSpec(NamedTuple):
    """The job as this node's pipeline runs it (`run.job.run_job`)."""

    log_dir: str  # as given; the pipeline makes it absolute
    ports: GivenPorts
    log_overwrite: bool = False
    job_id: str | None = None  # --job_id; None: one made here (node 0's adopted)
    job_token_given: bool = False  # --job_token: else one node makes a secret of its own
    max_restarts: int = 0
    kill_timeout: float = 30.0
    tee: TeeSelection = "all"  # which local trainers' logs the console echoes
    signals_to_handle: tuple[int, ...] | None = None
    heartbeat_timeout: float = 10.0
    rdzv_timeout: float = 300.0
    hang_timeout: float | None = None
    on_hang: str = "dump"
    straggler_check: float = 0.0  # seconds between checks; 0: off
    straggler_threshold: float = 0.1  # a share of the step time
    on_straggler: str = "warn"
    preflight: str | None = None  # --preflight; None: on for more than one node
    preflight_limits: tuple[tuple[str, float], ...] = ()  # --preflight_limits
    preload: tuple[str, ...] = ()  # --preload: modules its zygote imports (launch/run/preload/)
    workers: PlanSpec | None = None  # what the workers run (the zygote's argv)
    etcd_master: str = ""  # --master etcd://...; "": the launchers meet at node 0's store
    gpu_log: GpuLogSpec | None = None
    peers: PeersSpec | None = None  # what the store or etcd link needs (`peers.links`)
    # A start failure told to the others (`peers.startfail`): where the launchers would
    # have met is worked out from this node's options alone (every form of job), so the
    # options record goes there, at that one call: the one place run/ holds it.
    peers_options: LaunchOptions | None = None
