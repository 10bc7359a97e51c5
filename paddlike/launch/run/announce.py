"""A round announced on this node: endpoints.log, then the start banner on the job's first
round, or an elastic round's one line (its nodes, this node's ranks)."""

from __future__ import annotations

from paddlike.launch.console.banner import format_banner, rank_span, round_header
from paddlike.launch.console.output import Console
from paddlike.launch.peers.api import Peers
from paddlike.launch.plan.nodejob import NodeJob
from paddlike.launch.plan.plan import LaunchPlan
from paddlike.launch.plan.world import RendezvousResult
from paddlike.launch.run.logdir import LogDir


def announce_round(
    logdir: LogDir,
    console: Console,
    peers: Peers,
    job: NodeJob,
    result: RendezvousResult,
    plan: LaunchPlan,
    first: bool,
) -> None:
    """`first`: the job's first round here (the banner); else an elastic round's line."""
    elastic_round = result.round if job.elastic is not None else None
    logdir.write_endpoints(
        plan.trainer_endpoints,
        plan.server_endpoints,
        plan.heter_endpoints,
        header=round_header(result, elastic_round),
    )
    if first:
        if peers.address:
            n = len(result.nodes)
            console.say(
                f"rendezvous with {n} node{'s' if n != 1 else ''} at {peers.address} "
                f"took {result.elapsed:.2f} s"
            )
        console.block(format_banner(plan, logdir.path, interface=job.interface, why=job.reason))
    elif elastic_round is not None:
        n = len(result.nodes)
        console.say(
            f"round {elastic_round}: {n} node{'s' if n != 1 else ''} ({', '.join(result.hosts)}); "
            f"this node is node {job.index}, ranks {rank_span(plan)}"
        )
