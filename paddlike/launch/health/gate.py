"""The hook the job pipeline calls once a round's nodes have met and before any worker
starts (`JobRun.round`): run the check, say the verdict on every node, and decide.

| --preflight | job                          | check                                  |
| ----------- | ---------------------------- | -------------------------------------- |
| (default)   | one node                     | none                                   |
| (default)   | more than one node           | on                                     |
| off         | any                          | none                                   |
| on          | any                          | node check; links 0.25 s each          |
| full        | any                          | node check; links 1 s each             |

A fixed job checks its first round; an elastic job every round (its members change).
A failed verdict ends a fixed job with exit 2 on every node before any worker starts;
an elastic job with more members than MIN starts without the nodes at fault, which exit
with `LEFT_OUT` (`plan.membership` rules; the codes are `plan.exitcode`'s).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from paddlike.launch.health.limits import Limits
from paddlike.launch.health.node import node_problems, read_facts
from paddlike.launch.health.nvml import NvmlSource
from paddlike.launch.health.verdict import (
    NodeReport,
    Verdict,
    duration,
    hidden_by_limits,
    judge,
    rate,
)
from paddlike.launch.plan.exitcode import CHECK_FAILED, LEFT_OUT

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.health.nvml import GpuSource
    from paddlike.launch.plan.membership import ElasticSpec
    from paddlike.launch.plan.world import RendezvousResult


def preflight_mode(given: str | None, nnodes: int) -> str:
    """off | on | full: `--preflight` as given, else on for jobs of more than one node."""
    if given is not None:
        return given
    return "on" if nnodes > 1 else "off"


def gpu_source(environ: Mapping[str, str]) -> GpuSource | None:
    """NVML where a driver is (as `context.devices` decides), else None."""
    from paddlike.launch.context.devices import GPU_PROBE, NVIDIA_CTL

    how = environ.get(GPU_PROBE, "auto").strip().lower()
    if how == "nvml" or (how in ("", "auto") and os.path.exists(NVIDIA_CTL)):
        return NvmlSource()
    return None


def summary_entry(round_: int, verdict: Verdict, reports: list[NodeReport], seconds: float) -> dict:
    """summary.json's "preflight": every node's figures and the verdict."""

    def link(f):
        return {
            "to": f.b,
            "up": round(f.up),
            "down": round(f.down),
            "rtt": None if f.rtt == float("inf") else f.rtt,
        }

    return {
        "round": round_,
        "ok": verdict.ok,
        "seconds": round(seconds, 3),
        "bandwidth_median": round(verdict.bandwidth),
        "rtt_median": verdict.rtt if verdict.rtt != float("inf") else None,
        "bad_nodes": list(verdict.bad_nodes),
        "findings": list(verdict.lines),
        "notes": list(verdict.notes),
        "nodes": [
            {
                "index": r.index,
                "host": r.host,
                "gpus": r.gpus,
                "problems": list(r.problems),
                "own": None if r.loop is None else round(r.loop),  # bytes/s to itself
                "matmul": [round(x) for x in r.rates],  # FLOP/s per GPU (full, CuPy)
                "links": [link(f) for f in r.links],
            }
            for r in reports
        ],
    }


def kept_with_earlier(previous: dict | None, latest: dict) -> dict:
    """summary.json's "preflight" after another round's check: the latest, with the
    earlier checks that found something under "earlier" (oldest first), so that the nodes
    that go on keep the check that left a node out (its figures, its verdict)."""
    earlier = list(previous.get("earlier") or ()) if previous else []
    if previous and not previous.get("ok"):
        earlier.append({k: v for k, v in previous.items() if k != "earlier"})
    return {**latest, "earlier": earlier} if earlier else latest


def healthy_line(verdict: Verdict, n: int, seconds: float, hidden: str = "") -> str:
    """The one line of a check that found nothing; `hidden`: the slowest link that only
    --preflight_limits let pass (`verdict.hidden_by_limits`)."""
    if n < 2 or not verdict.bandwidth:
        return f"pre-flight check: {n} node{'s' if n != 1 else ''} healthy ({seconds:.2f} s)"
    hidden = f"; {hidden}" if hidden else ""
    return (
        f"pre-flight check: {n} nodes healthy; links median {rate(verdict.bandwidth)}, "
        f"round trip {duration(verdict.rtt)}{hidden} ({seconds:.2f} s)"
    )


def run_check(
    *,
    kv: object | None,
    result: RendezvousResult,
    index: int,
    mode: str,
    limits: Limits,
    log_dir: str,
    interface: str,
    environ: Mapping[str, str],
    timeout: float,
    source: GpuSource | None = None,
) -> tuple[Verdict, list[NodeReport], float]:
    """This node's check and the job's verdict (the same on every node)."""
    from paddlike.launch.health.preflight import FULL_SECONDS, LINK_SECONDS, exchange

    started = time.monotonic()
    facts = read_facts(log_dir, interface, source if source is not None else gpu_source(environ))
    problems = node_problems(facts, limits, log_dir, interface)
    rates: tuple[float, ...] = ()
    if mode == "full":  # a matrix multiply per GPU, where CuPy imports (a child Python)
        from paddlike.launch.health.matmul import DEADLINE, gpu_rates

        # (within half the figures' wait: the other nodes wait for this node's figures)
        rates = gpu_rates(environ, timeout=min(DEADLINE, timeout / 2)) or ()
    hosts = list(result.hosts)
    if kv is None or len(hosts) < 2:
        host = hosts[index] if hosts else ""
        reports = [NodeReport(index, host, (), tuple(problems), facts.gpus, rates=rates)]
    else:
        seconds = FULL_SECONDS if mode == "full" else LINK_SECONDS
        reports = exchange(
            kv,  # type: ignore[arg-type]
            result.round,
            index,
            hosts,
            problems,
            facts.gpus,
            timeout=timeout,
            limits=limits,
            seconds=seconds,
            rates=rates,
        )
    return judge(reports, limits), reports, time.monotonic() - started


def check_before_start(run, met: RendezvousResult, plan, restarts: int):
    """`JobRun.round`'s hook (issue 35): None when the round may start its workers, else
    how the round ended (`plan.next_round.RoundEnd`) without starting any."""
    from paddlike.launch.health.choose import CHOSEN_ENV, check_only
    from paddlike.launch.health.preflight import PreflightError, mark_read
    from paddlike.launch.plan.next_round import RoundEnd
    from paddlike.summary import RootCause, RunStatus

    spec, job = run.spec, run.job
    mode = preflight_mode(spec.preflight, job.nnodes)
    if mode == "off" and check_only(run.environ):
        mode = "on"  # a check-only launcher (`choose`) never starts workers unchecked
    if mode == "off" or (run.elastic is None and met.round > 0):
        return None  # (a fixed job's restart runs on the nodes the check passed)
    if met.round == 0 and (chosen := run.environ.get(CHOSEN_ENV)):
        run.console.say(chosen)  # the hosts the one-command start chose (`choose`)
    kv = getattr(run.peers, "kv", None)
    index = met.own_index(job.index)
    n = len(met.nodes)
    limits = Limits.of(spec.preflight_limits)
    run.where.waiting = "the pre-flight check of every node and link"
    try:
        verdict, reports, seconds = run_check(
            kv=kv,
            result=met,
            index=index,
            mode=mode,
            limits=limits,
            log_dir=str(run.logdir.path),
            interface=job.interface,
            environ=run.environ,
            timeout=spec.heartbeat_timeout + 10.0,
        )
    except PreflightError as exc:
        cause = RootCause(reason=str(exc), host=job.host, node_index=index)
        run.console.error(str(exc))
        run.record.finished(
            plan, [], restarts, status=RunStatus.FAILED, exit_code=CHECK_FAILED, cause=cause
        )
        return RoundEnd(CHECK_FAILED, cause, met.round, 0)
    verdict = with_quarantine(run, met, verdict, kv, limits)
    run.record.preflight = kept_with_earlier(
        run.record.preflight, summary_entry(met.round, verdict, reports, seconds)
    )
    for note in verdict.notes:
        run.console.warn(f"pre-flight check: {note}")
    if check_only(run.environ):  # the one-command start chooses among its hosts
        for line in verdict.lines:
            run.console.error(f"pre-flight check: {line}")
        if verdict.ok:
            run.console.say(healthy_line(verdict, n, seconds, hidden_by_limits(reports, limits)))
        return end_checked(run, met, plan, restarts, verdict, kv)
    if verdict.ok:
        if kv is not None:
            mark_read(kv, met.round, index, n, wait=False)  # type: ignore[arg-type]
        run.console.say(healthy_line(verdict, n, seconds, hidden_by_limits(reports, limits)))
        return None
    for line in verdict.lines:
        run.console.error(f"pre-flight check: {line}")
    if kv is not None and can_leave_out(run, verdict, n):
        return leave_out(run, met, plan, restarts, verdict, kv)
    first_bad = verdict.bad_nodes[0] if verdict.bad_nodes else None
    cause = RootCause(
        reason=f"pre-flight check: {verdict.lines[0]}",
        host=met.hosts[first_bad] if first_bad is not None else "",
        node_index=first_bad,
    )
    why = why_not_left_out(run.elastic, n, verdict.bad_nodes)
    run.console.error(
        f"pre-flight check failed: the job does not start, {why} "
        f"(exit {CHECK_FAILED} on every node; --preflight_limits sets the thresholds, "
        "--preflight off skips the check)"
    )
    if kv is not None:
        mark_read(kv, met.round, index, n, wait=True)  # type: ignore[arg-type]
    run.record.finished(
        plan, [], restarts, status=RunStatus.FAILED, exit_code=CHECK_FAILED, cause=cause
    )
    return RoundEnd(CHECK_FAILED, cause, met.round, 0)


def can_leave_out(run, verdict: Verdict, n: int) -> bool:
    """An elastic job with more members than MIN goes on without the nodes at fault,
    unless one of them hosts the launchers' store (node 0's own: the job cannot go on
    without it; with etcd every node may leave)."""
    spec = run.elastic
    if spec is None or n - len(verdict.bad_nodes) < spec.min_nodes:
        return False
    return bool(run.spec.etcd_master) or 0 not in verdict.bad_nodes


def why_not_left_out(spec: ElasticSpec | None, n: int, bad: tuple[int, ...]) -> str:
    """Why a job of `n` nodes cannot go on without the nodes at fault (`can_leave_out`
    said no), for the failure's line.

    | job                    | at fault   | why                                         |
    | ---------------------- | ---------- | ------------------------------------------- |
    | fixed                  | any        | no spare node can take its place            |
    | elastic, MIN still met | node 0     | node 0 hosts the launchers' store           |
    | elastic, under MIN     | any        | the nodes left would be under MIN           |
    """
    keep = n - len(bad)
    if spec is not None and keep >= spec.min_nodes:  # (so node 0, hosting the store, is bad)
        return (
            "node 0 hosts the launchers' store (--master) and the job cannot go on without "
            "it (with --master etcd://... any node can be left out)"
        )
    if spec is not None:
        return (
            f"without the nodes at fault {keep} node{'s' if keep != 1 else ''} would be left, "
            f"under --nnodes {spec.range_text}'s minimum"
        )
    return "no spare node can take the place of the node at fault"


def leave_out(run, met: RendezvousResult, plan, restarts: int, verdict: Verdict, kv):
    """The nodes at fault leave (their launchers exit `LEFT_OUT`, no worker
    started); the others end this round unstarted and meet again without them."""
    from paddlike.launch.health.preflight import mark_read
    from paddlike.launch.plan.membership import LEFT
    from paddlike.launch.plan.next_round import RoundEnd
    from paddlike.launch.plan.world import node_label
    from paddlike.summary import RootCause, RunStatus

    index, n, bad = run.job.index, len(met.nodes), verdict.bad_nodes
    keep = n - len(bad)
    names = ", ".join(node_label(i, met.hosts) for i in bad)
    spec = run.elastic
    if index in bad:
        run.console.error(
            f"pre-flight check: this node is left out of the elastic job, which goes on with "
            f"{keep} node{'s' if keep != 1 else ''} (--nnodes {spec.range_text}); its launcher "
            f"starts no worker and exits {LEFT_OUT}"
        )
        mark_read(kv, met.round, index, n, wait=True)  # (etcd: its keys go with its lease)
        own = next(line for line in verdict.lines if line.startswith(f"node {index} "))
        cause = RootCause(
            reason=f"pre-flight check left this node out: {own}",
            host=run.job.host,
            node_index=index,
        )
        run.leaving = True  # (nodes waiting to join are not told that the job ended)
        run.record.finished(
            plan, [], restarts, status=RunStatus.FAILED, exit_code=LEFT_OUT, cause=cause
        )
        return RoundEnd(LEFT_OUT, cause, met.round, 0)
    run.console.warn(
        f"pre-flight check: the job goes on without {names}: a new round of {keep} "
        f"node{'s' if keep != 1 else ''} (--nnodes {spec.range_text})"
    )
    mark_read(kv, met.round, index, n, wait=False)
    first = bad[0]
    cause = RootCause(
        reason=f"the pre-flight check left out {names}",
        host=met.hosts[first],
        node_index=first,
        membership=LEFT,
    )
    survivors = {(e.host, e.pid) for i, e in enumerate(met.nodes) if i not in bad}
    run.peers.rounds.left_out(met.round, survivors, cause.reason)
    return RoundEnd(0, cause, met.round, keep)


def with_quarantine(run, met: RendezvousResult, verdict: Verdict, kv, limits: Limits) -> Verdict:
    """An elastic job's verdict with its quarantined nodes (`quarantine`) at fault, where
    the job can do without them; else they stay, named in a note."""
    if run.elastic is None or kv is None:
        return verdict
    from paddlike.launch.health.quarantine import quarantined, read_rounds

    held = quarantined(read_rounds(kv, met.hosts), met.hosts, int(limits.quarantine_rounds))
    held = [(i, line) for i, line in held if i not in verdict.bad_nodes]
    if not held:
        return verdict
    merged = verdict._replace(
        bad_nodes=tuple(sorted({*verdict.bad_nodes, *(i for i, _ in held)})),
        lines=verdict.lines + tuple(line for _, line in held),
    )
    if can_leave_out(run, merged, len(met.nodes)):
        return merged
    return verdict._replace(
        notes=verdict.notes
        + tuple(f"{line}; the job cannot do without it: it stays" for _, line in held)
    )


def note_round_end(run, round_: int, cause) -> None:
    """`JobRun.round`'s hook after a round's end (elastic): the round is held against the
    node its cause names (`quarantine.note_round_end`)."""
    kv = getattr(run.peers, "kv", None)
    if kv is not None and run.elastic is not None:
        from paddlike.launch.health.quarantine import note_round_end as note

        note(kv, round_, cause)


def end_checked(run, met, plan, restarts: int, verdict, kv):
    """A check-only launcher's end (`choose`), once every node read every figure: 0 where this node
    is healthy, 69 where it is at fault; no worker starts (`plan.next_round.RoundEnd`)."""
    from paddlike.launch.health.preflight import mark_read
    from paddlike.launch.plan.next_round import RoundEnd
    from paddlike.summary import RootCause, RunStatus

    index, n = met.own_index(run.job.index), len(met.nodes)
    if kv is not None:  # node 0's store stays until every node read the figures
        mark_read(kv, met.round, index, n, wait=True)
    if index not in verdict.bad_nodes:
        run.console.say(
            "pre-flight check: this host is healthy; the cluster starter now starts the job "
            "on the first healthy hosts (--num_nodes) and keeps the others as spares"
        )
        run.record.finished(plan, [], restarts, status=RunStatus.SUCCEEDED, exit_code=0, cause=None)
        return RoundEnd(0, None, met.round, 0)
    own = next(line for line in verdict.lines if line.startswith(f"node {index} "))
    run.console.error(
        f"pre-flight check: this host is left out of the job (a spare takes its place if "
        f"the hostfile has one); its launcher starts no worker and exits {LEFT_OUT}"
    )
    cause = RootCause(
        reason=f"pre-flight check left this node out: {own}", host=run.job.host, node_index=index
    )
    run.record.finished(
        plan, [], restarts, status=RunStatus.FAILED, exit_code=LEFT_OUT, cause=cause
    )
    return RoundEnd(LEFT_OUT, cause, met.round, 0)
