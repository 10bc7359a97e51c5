"""What the plan needs of the options, as narrow records: the plan's signatures say what
they use, not the whole options record. Built once from the options by `main` (as
torchelastic hands a `WorkerSpec` to its agent, never the argparse namespace).
"""

from __future__ import annotations

from paddlike.launch import NamedTuple

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.context.numa import NumaTopology


class PlanSpec(NamedTuple):
    """The job as every process of it is planned: what runs, how it is told its place."""

    run_mode: str  # "collective" | "ps" | "ps-heter"
    training_script: str
    training_script_args: tuple[str, ...] = ()
    no_python: bool = False  # the script is a command (--no_python)
    module: bool = False  # python -m (--module)
    job_id: str | None = None  # --job_id; None: node 0's generated one is adopted
    job_token: str = ""  # --job_token (every node's); "" : one made by the launcher, or none
    role: str = "default"  # torchrun's --role: the workers' ROLE_NAME
    max_restarts: int = 0  # TORCHELASTIC_MAX_RESTARTS
    hang_timeout: float | None = None  # set: torch's flight recorder on (the probe's env)
    straggler_check: float = 0.0  # set: the same, for the straggler check
    split_logs: bool = False  # --redirect_stdout_and_stderr: stderr in workerlog.N.err
    virtual_local_rank: bool = False  # torchrun's --virtual_local_rank (`plan.plan`)
    # DeepSpeed's --local_rank=N for each collective worker (`rules.passes_local_rank`)
    pass_local_rank: bool = False

    def argv(self, python: str, local_rank: int | None = None) -> tuple[str, ...]:
        """Each worker's command line; with `local_rank`, DeepSpeed's ``--local_rank=N``
        (one item) right after the script or module, before the script's own args, where
        deepspeed.launcher.launch puts it."""
        args = self.training_script_args
        if local_rank is not None:
            args = (f"--local_rank={local_rank}", *args)
        if self.no_python:
            return (self.training_script, *args)
        if self.module:
            return (python, "-u", "-m", self.training_script, *args)
        return (python, "-u", self.training_script, *args)


class Placement(NamedTuple):
    """Where each worker runs and how the console shows it, on top of the plan
    (`plan.placement.place`): --numa_binding with this node's NUMA facts (read once, in
    context), DeepSpeed's --bind_core_list, torchrun's -t/-r streams."""

    numa_binding: str | None = None  # the mode; None: unbound
    topology: NumaTopology | None = None
    bind_core_list: tuple[int, ...] | None = None
    preview: bool = False  # --dry_run: a NUMA node not readable here is shown, not refused
    console_streams: tuple[tuple[int, int], ...] = ()  # (local rank, 1|2|3); -1: the rest

    @property
    def binds(self) -> bool:
        return self.numa_binding is not None and self.topology is not None


class GivenPorts(NamedTuple):
    """The ports the user (or PaddleCloud) gave, for each round's request
    (`layout.port_request`)."""

    start_port: int
    start_port_from: str | None = None  # how it was given ("--start_port", "PADDLE_PORT")
    ports_num: int | None = None  # PaddleCloud's TRAINER_PORTS_NUM
