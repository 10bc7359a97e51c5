"""Spares (issue 35): a hostfile with more hosts than --num_nodes N, under the pre-flight
check (on by default for more than one node; ssh starts only).

    every host's launcher, check-only (`health.choose`)  ─►  exit codes
        ─► `choose`: the first N healthy hosts run the job (in the hostfile's order), the
           hosts the check found at fault (exit 69) are left out, the other healthy ones
           stand by (their launchers ended after the check, exit 0; no worker started)
        ─► the ordinary start (`start._run_sessions`) on the N chosen hosts, whose
           launchers say who runs too (`health.choose.CHOSEN_ENV`)

| the check-only launchers ended with          | the job                                    |
| -------------------------------------------- | ------------------------------------------ |
| N or more 0s (the others 69)                 | runs on the first N hosts that exited 0    |
| fewer than N 0s                              | does not start: exit 2 (`TOO_FEW_EXIT_CODE`) |
| another code on a host (2: the figures did    | does not start: that code, naming the host |
| not come; 255: ssh lost; 128+N: a signal)    |                                            |

Pure: the sessions are run by `start`; what is said and who runs is decided here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paddlike.contract import PREFLIGHT_CHOSEN as CHOSEN_ENV
from paddlike.contract import PREFLIGHT_ONLY as CHECK_ONLY_ENV
from paddlike.launch import NamedTuple
from paddlike.launch.plan.exitcode import LEFT_OUT

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.cluster.remote import RemoteJob

TOO_FEW_EXIT_CODE = 2  # fewer healthy hosts than --num_nodes: nothing started


class Choice(NamedTuple):
    """Who runs, who was left out, who stands by (host names, the hostfile's order); or
    the exit code and line of a job that does not start (`refusal`)."""

    run: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()
    standby: tuple[str, ...] = ()
    refusal: tuple[int, str] | None = None


def choose(hosts: Sequence[str], codes: Mapping[str, int | None], nodes: int) -> Choice:
    """The job's hosts from the check-only launchers' exit codes (the module's table)."""
    for host in hosts:
        code = codes.get(host)
        if code not in (0, LEFT_OUT):
            return Choice(
                refusal=(
                    code or 1,
                    f"host {host}: the pre-flight check did not finish there (exit {code}, "
                    "see its lines above); nothing was started",
                )
            )
    healthy = tuple(h for h in hosts if codes[h] == 0)
    left_out = tuple(h for h in hosts if codes[h] == LEFT_OUT)
    if len(healthy) < nodes:
        return Choice(
            left_out=left_out,
            refusal=(
                TOO_FEW_EXIT_CODE,
                f"pre-flight check: {len(healthy)} of the {len(hosts)} hosts are healthy, "
                f"fewer than --num_nodes {nodes}; left out: {', '.join(left_out)}; nothing "
                "was started (--preflight_limits sets the thresholds, --preflight off skips "
                "the check)",
            ),
        )
    return Choice(healthy[:nodes], left_out, healthy[nodes:])


def choice_line(choice: Choice, nodes: int) -> str:
    """The starter's one line on who runs, before the job starts on them."""
    left = ", ".join(choice.left_out) or "none"
    spare = ", ".join(choice.standby) or "none"
    return (
        f"pre-flight check: the job runs on {', '.join(choice.run)} (--num_nodes {nodes}); "
        f"left out by the check: {left} (exit {LEFT_OUT} there, the figure in "
        f"its lines above); standing by: {spare} (passed the check, no worker started)"
    )


def chosen_job(job: RemoteJob, choice: Choice) -> RemoteJob:
    """The job on the chosen hosts only: their picks, the names ssh connects to, in order."""
    keep = [i for i, p in enumerate(job.picks) if p.name in choice.run]
    return job._replace(
        picks=tuple(job.picks[i] for i in keep),
        addresses=tuple(job.addresses[i] for i in keep) if job.addresses else (),
        spares=0,
        environment={**job.environment, CHOSEN_ENV: choice_line(choice, len(choice.run))},
    )


def check_job(job: RemoteJob) -> RemoteJob:
    """Every host's launcher in check-only mode (`health.choose.CHECK_ONLY_ENV`)."""
    return job._replace(environment={**job.environment, CHECK_ONLY_ENV: "1"})


def dry_run_line(job: RemoteJob) -> str:
    """--dry_run's line after the check-only commands."""
    return (
        f"# then the job starts on the first {job.nodes} of these {len(job.picks)} hosts that "
        "pass the pre-flight check (--num_nodes), each with --ips of those hosts and its "
        "--node_rank among them; the others are left out or stand by"
    )
