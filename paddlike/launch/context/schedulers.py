"""Node lists from schedulers' environments: Slurm and PaddleCloud / Kubeflow PaddleJob.

A scheduler already knows every node of the job and which one this is; reading
that saves the user from repeating it in ``--ips`` and ``--node_rank``. The result
fills the same fields; `paddlike.launch.context.node` checks it against explicit flags
and reports contradictions (never a silent rank 0).

    variables                                           -> hosts, node index
    SLURM_JOB_NODELIST=gpu[01-02],cpu7 SLURM_NODEID=1   -> gpu01,gpu02,cpu7 ; 1
      (SLURM_NNODES, when set, must equal the list's length)
    inside an srun step: SLURM_STEP_NODELIST=gpu[01-02] SLURM_NODEID=1
      SLURM_JOB_NODELIST=gpu[01-04] SLURM_NNODES=2      -> gpu01,gpu02 ; 1
      (the step's nodes, not the allocation's: `srun -N2` inside `sbatch -N4`)
    SLURM_JOB_ID without SLURM_STEP_ID (an sbatch script's own shell, on the
      allocation's first node only)                     -> no scheduler: the flags say
    SLURM_STEP_NUM_TASKS > the step's nodes (srun -n4 on 2 nodes: two launchers on one
      node)                                             -> an error naming the variable

What a real Slurm sets was read from Slurm 22.05's slurmd in the tests
(tests/e2e/slurm/), not from its manual.
    PADDLE_TRAINERS=10.0.0.1,10.0.0.2 PADDLE_TRAINER_ID=1 (PaddleCloud / Kubeflow)
      POD_IP=10.0.0.2 PADDLE_NNODES=2 PADDLE_MASTER=10.0.0.1:6170
                                                        -> 10.0.0.1,10.0.0.2 ; 1
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from paddlike.launch import NamedTuple
from paddlike.launch.context.options.record import UsageError


class SchedulerInfo(NamedTuple):
    """What a scheduler says about the job's nodes."""

    name: str  # "slurm" | "paddlecloud"
    hosts: tuple[str, ...]
    node_index: int | None
    host: str | None = None  # this node's own address, when the scheduler names it (POD_IP)
    master: str | None = None  # ip:port where the launchers meet (PADDLE_MASTER)
    source: str = ""  # the variable that gave the host list, for messages


# compiled by `re` at its first use (and cached there), not at import: start-up time
_RANGE = r"^(\d+)(?:-(\d+))?$"


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets: 'a[1,3],b' -> ['a[1,3]', 'b']."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced ']'")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("unbalanced '['")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_ranges(body: str) -> list[str]:
    """'01-03,7' -> ['01', '02', '03', '7'], keeping the zero padding of the start."""
    out = []
    for item in body.split(","):
        m = re.match(_RANGE, item.strip())
        if not m:
            raise ValueError(f"bad range {item!r}")
        lo, hi = m.group(1), m.group(2)
        if hi is None:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise ValueError(f"descending range {item!r}")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def _expand_name(name: str) -> list[str]:
    """'r[1-2]-n[1-2]' -> r1-n1, r1-n2, r2-n1, r2-n2 (every bracket group expands)."""
    start = name.find("[")
    if start < 0:
        if "]" in name:
            raise ValueError("unbalanced ']'")
        return [name]
    end = name.find("]", start)
    if end < 0:
        raise ValueError("unbalanced '['")
    head, body, tail = name[:start], name[start + 1 : end], name[end + 1 :]
    return [head + n + rest for n in _expand_ranges(body) for rest in _expand_name(tail)]


def expand_slurm_nodelist(text: str) -> tuple[str, ...]:
    """Expand a Slurm hostlist expression: 'node[01-03,07],login1' -> node01,...,login1.

    Raises ValueError for an expression that is not a hostlist.
    """
    hosts = [h for part in _split_top(text) for h in _expand_name(part)]
    if not hosts:
        raise ValueError("empty node list")
    return tuple(hosts)


def _int(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise UsageError(f"{name}: expected an integer >= 0, got {value!r}", name)
    return number


def _slurm(environ: Mapping[str, str]) -> SchedulerInfo | None:
    if environ.get("SLURM_JOB_ID") and not (
        environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID")
    ):
        # The batch script's shell: it runs once, on the first node of the allocation, so
        # the allocation's node list is not where this job's launchers run (srun starts one
        # on each node, inside a step).
        return None
    step = bool(environ.get("SLURM_STEP_NODELIST"))
    names = ("SLURM_STEP_NODELIST",) if step else ("SLURM_JOB_NODELIST", "SLURM_NODELIST")
    var = next((v for v in names if environ.get(v)), None)
    if var is None or environ.get("SLURM_NODEID") is None:
        return None
    try:
        hosts = expand_slurm_nodelist(environ[var])
    except ValueError as e:
        raise UsageError(f"{var}: not a Slurm node list ({e}), got {environ[var]!r}", var) from None
    node_index = _int(environ, "SLURM_NODEID")
    count_var = (
        "SLURM_STEP_NUM_NODES" if step and environ.get("SLURM_STEP_NUM_NODES") else "SLURM_NNODES"
    )
    nnodes = _int(environ, count_var)
    if nnodes is not None and nnodes != len(hosts):
        raise UsageError(
            f"{count_var}: {nnodes} contradicts {var}={environ[var]!r}, which lists {len(hosts)}",
            count_var,
        )
    if node_index is not None and node_index >= len(hosts):
        raise UsageError(
            f"SLURM_NODEID: {node_index} is out of range for the {len(hosts)} nodes of {var}",
            "SLURM_NODEID",
        )
    tasks_var = "SLURM_STEP_NUM_TASKS" if step else "SLURM_NTASKS"
    tasks = _int(environ, tasks_var) if step else None
    if tasks is not None and tasks > len(hosts):
        raise UsageError(
            f"{tasks_var}: {tasks} tasks on the {len(hosts)} nodes of {var}; the launcher "
            "runs once per node and starts that node's workers itself: srun "
            "--ntasks-per-node=1 (the workers per node: --nproc_per_node)",
            tasks_var,
        )
    return SchedulerInfo("slurm", hosts, node_index, source=var)


def _paddlecloud(environ: Mapping[str, str]) -> SchedulerInfo | None:
    value = environ.get("PADDLE_TRAINERS")
    if not value:
        return None
    hosts = tuple(h.strip() for h in value.split(","))
    if any(not h for h in hosts):
        raise UsageError(
            f"PADDLE_TRAINERS: expected a comma-separated list of node IPs, got {value!r}",
            "PADDLE_TRAINERS",
        )
    node_index = _int(environ, "PADDLE_TRAINER_ID")
    nnodes = _int(environ, "PADDLE_NNODES")
    if nnodes is not None and nnodes != len(hosts):
        raise UsageError(
            f"PADDLE_NNODES: {nnodes} contradicts PADDLE_TRAINERS={value!r}, which lists "
            f"{len(hosts)}",
            "PADDLE_NNODES",
        )
    if node_index is not None and node_index >= len(hosts):
        raise UsageError(
            f"PADDLE_TRAINER_ID: {node_index} is out of range for the {len(hosts)} nodes of "
            "PADDLE_TRAINERS",
            "PADDLE_TRAINER_ID",
        )
    return SchedulerInfo(
        "paddlecloud",
        hosts,
        node_index,
        host=environ.get("POD_IP") or None,
        master=environ.get("PADDLE_MASTER") or None,
        source="PADDLE_TRAINERS",
    )


def detect_scheduler(environ: Mapping[str, str]) -> SchedulerInfo | None:
    """The scheduler this launcher runs under, from its environment; None if none."""
    return _paddlecloud(environ) or _slurm(environ)
