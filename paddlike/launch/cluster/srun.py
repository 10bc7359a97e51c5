"""Slurm as the remote starter: `srun`, inside an allocation, one launcher per node.

    NAME=VALUE PADDLIKE_JOB_TOKEN=T srun --nodes N --ntasks-per-node 1 [--nodelist h0,h1] \
         --kill-on-bad-exit=1 --export=ALL --chdir DIR python -m paddlike.launch --job_id J \
         <options> train.py

The carried variables and the token are in srun's own environment, which srun gives every
node's launcher (--export=ALL): in no argv, here or there.

srun gives every node the same command; each node's launcher reads its node rank and the
node list from Slurm's variables (`context.schedulers`). So hosts of a hostfile must agree
on their worker count here; srun's own --label is not used: the launchers name their
nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

from paddlike.launch.context.options.record import UsageError

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.cluster.remote import RemoteJob

SRUN = "srun"


def allocation_nodes(job: RemoteJob, num_nodes: int | None, environ: Mapping[str, str]) -> int:
    """The node count: the hostfile's hosts, --num_nodes, or the allocation's."""
    if job.picks:
        return len(job.picks)
    if num_nodes:
        return num_nodes
    for name in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        if environ.get(name, "").isdigit():
            return int(environ[name])
    raise UsageError(
        "--launcher slurm: not inside a Slurm allocation (no SLURM_JOB_NUM_NODES): run it "
        "under salloc or sbatch, or give --num_nodes",
        "--launcher",
    )


def srun_argv(job: RemoteJob, num_nodes: int | None, environ: Mapping[str, str]) -> list[str]:
    counts = {p.launcher_args() for p in job.picks}
    if len(counts) > 1:
        raise UsageError(
            "--launcher slurm: srun gives every node the same command, and the hostfile's "
            "hosts have different slots or devices; use --launcher ssh or pdsh, or equal slots",
            "--launcher",
        )
    nodes = allocation_nodes(job, num_nodes, environ)
    argv = [SRUN, "--nodes", str(nodes), "--ntasks-per-node", "1"]
    if job.picks:
        argv += ["--nodelist", ",".join(job.hosts)]
    argv += ["--kill-on-bad-exit=1", "--export=ALL", "--chdir", job.cwd]
    script = list(job.script)
    if script and script[0].startswith("-"):
        script.insert(0, "--")
    per_node = counts.pop() if counts else ()
    return [
        *argv,
        job.python,
        "-m",
        "paddlike.launch",
        "--job_id",
        job.job_id,
        *per_node,
        *job.launcher_args,
        *script,
    ]


def srun_environment(environ: Mapping[str, str], job: RemoteJob) -> dict[str, str]:
    """srun's environment: this shell's, the carried variables and the token (a token
    file's name is not passed on: the token itself is)."""
    from paddlike.contract import JOB_TOKEN_FILE

    env = {k: v for k, v in environ.items() if k != JOB_TOKEN_FILE}
    env.update(job.environment)
    return env
