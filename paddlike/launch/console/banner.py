"""The start banner: which job, which node and why, what runs here, where the logs are."""

from __future__ import annotations

import os

from paddlike.contract import JOB_TOKEN
from paddlike.launch.console.output import PREFIX
from paddlike.launch.plan.plan import LaunchPlan, Role, node_sizes_text
from paddlike.launch.plan.world import RendezvousResult


def format_banner(
    plan: LaunchPlan,
    log_dir: str | os.PathLike[str],
    *,
    interface: str | None = None,
    why: str | None = None,
) -> str:
    """A few lines:

    paddlike.launch: job job-x, collective mode, node 0 of 1 (127.0.0.1 on lo: one node ...)
    paddlike.launch: 2 workers on this node, devices cpu, logs in /abs/log
    paddlike.launch: devices: no NVIDIA GPU found (...): CPU workers

    and on node 0 of a job of several nodes without a token, `tokenless_warning`'s line.
    Trainers are "workers", as in the last line ("OK: 2 workers finished"), Paddle's
    --worker_num and workerlog.N, and torchrun.
    """
    where = plan.host
    if interface:
        where += f" on {interface}"
    if why:
        where += f": {why}"
    counts: dict[Role, int] = {}
    for spec in plan.processes:
        counts[spec.role] = counts.get(spec.role, 0) + 1
    names = {Role.TRAINER: "worker", Role.SERVER: "server", Role.HETER: "heter worker"}
    parts = [f"{n} {names[r]}{'s' if n != 1 else ''}" for r, n in counts.items()]
    # the GPUs by their physical ids: under --virtual_local_rank every worker sees its
    # own as 0, which says nothing about which GPUs the job holds
    devices = sorted(
        {d for s in plan.processes for d in (s.physical_devices or s.device_ids)},
        key=lambda d: (not d.isdigit(), int(d) if d.isdigit() else 0, d),
    )
    device_text = "gpus " + ",".join(devices) if devices else "cpu"
    sizes = node_sizes_text(plan.node_sizes)  # only when the nodes' counts differ
    return (
        f"{PREFIX} job {plan.job_id}, {plan.run_mode} mode, node {plan.node_index} of "
        f"{plan.nnodes} ({where})\n"
        f"{PREFIX} {', '.join(parts) or 'no processes'} on this node, devices {device_text}, "
        f"logs in {os.fspath(log_dir)}"
        + (f"\n{PREFIX} devices: {plan.devices_why}" if plan.devices_why else "")
        + (f"\n{PREFIX} workers per node: {sizes}" if sizes else "")
        + "".join(  # --numa_binding: where each process runs
            f"\n{PREFIX} numa binding: {s.role.value} {s.local_index}: {s.binding}"
            for s in plan.processes
            if s.binding
        )
        + "".join(f"\n{PREFIX} warning: {line}" for line in [tokenless_warning(plan)] if line)
    )


def tokenless_warning(plan: LaunchPlan) -> str | None:
    """Node 0's word that a job of several nodes runs without a job token (its workers
    get none: every node of such a job was started without one, typed on each node).
    Said once, on node 0 only: it is the same on every node. A warning, not a refusal:
    without a token the stores still admit only the job's hosts, but any user of them.

        2 nodes, node 0, no token     -> "this job of 2 nodes has no job token, ..."
        node 1; a token; one node     -> None (one node makes a token of its own)
    """
    if plan.nnodes < 2 or plan.node_index != 0 or not plan.processes:
        return None
    if any(JOB_TOKEN in spec.env for spec in plan.processes):
        return None
    return (
        f"this job of {plan.nnodes} nodes has no job token, so its stores accept any user "
        "of its machines; give every node the same --job_token_file FILE (or "
        "PADDLIKE_JOB_TOKEN_FILE, PADDLIKE_JOB_TOKEN)"
    )


def round_header(result: RendezvousResult, elastic_round: int | None) -> str:
    """endpoints.log's first line in an elastic job (which round the endpoints are for);
    "" keeps Paddle's exact bytes for a fixed job."""
    if elastic_round is None:
        return ""
    n, hosts = len(result.nodes), ",".join(result.hosts)
    return f"# paddlike round {elastic_round}: {n} node{'s' if n != 1 else ''} {hosts}"


def rank_span(plan: LaunchPlan) -> str:
    """This node's ranks, for the round's line: "2-3", "2" or "none"."""
    ranks = [p.rank for p in plan.processes]
    return f"{min(ranks)}-{max(ranks)}" if len(ranks) > 1 else str(ranks[0]) if ranks else "none"
