"""Spares (issue 35): a hostfile with more hosts than --num_nodes N. The one-command start
first runs every host's launcher in *check-only* mode (`CHECK_ONLY_ENV`): they meet as one
job of all the hosts, run the pre-flight check together (so that each host's links are
measured against several peers, even where N is 2) and end without starting a worker:
0 where the host is healthy, `LEFT_OUT_EXIT_CODE` (69) where the check found it at fault.
The starter then starts the job on the first N healthy hosts in the hostfile's order
(`cluster.spares`); the other healthy ones stand by.

| the check found this node | its launcher (check-only)                          | exit |
| ------------------------- | -------------------------------------------------- | ---- |
| healthy                   | says so; the starter chooses                       | 0    |
| at fault                  | names its figure; starts nothing                   | 69   |
| (figures did not come)    | as an ordinary check (`gate.check_before_start`)   | 2    |
"""

from __future__ import annotations

from collections.abc import Mapping

from paddlike.launch.plan.exitcode import LEFT_OUT

CHECK_ONLY_ENV = "PADDLIKE_PREFLIGHT_ONLY"  # set by the one-command start, never by users
# the starter's line on who runs (`cluster.spares.choice_line`), for the chosen hosts'
# launchers to say too, so that every node's console names who runs and who was left out
CHOSEN_ENV = "PADDLIKE_PREFLIGHT_CHOSEN"
LEFT_OUT_EXIT_CODE = LEFT_OUT


def check_only(environ: Mapping[str, str]) -> bool:
    """Whether this launcher only checks its node and links for the starter to choose."""
    return environ.get(CHECK_ONLY_ENV, "") == "1"


def end_checked(run, met, plan, restarts: int, verdict, kv):
    """A check-only launcher's end, once every node read every figure: 0 where this node
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
        f"the hostfile has one); its launcher starts no worker and exits {LEFT_OUT_EXIT_CODE}"
    )
    cause = RootCause(
        reason=f"pre-flight check left this node out: {own}", host=run.job.host, node_index=index
    )
    run.record.finished(
        plan, [], restarts, status=RunStatus.FAILED, exit_code=LEFT_OUT_EXIT_CODE, cause=cause
    )
    return RoundEnd(LEFT_OUT_EXIT_CODE, cause, met.round, 0)
