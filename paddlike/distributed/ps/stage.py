"""Where this process sits in a heterogeneous PS job's pipeline of stages, from the environment.

Stage 1 is the CPU trainers; heter stages are 2..STAGE_NUM. The launcher (issue 16's
table) gives every process STAGE_NUM and PADDLE_STAGE_TRAINERS_NUM (per-stage counts as a
Python list, `[2, 1]`), trainers STAGE_ID=1 and PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST
(stage 2's endpoints), heter trainers TRAINING_ROLE=HETER_TRAINER, STAGE_ID=s and the
previous / next stage's endpoints (stage 2's previous stage is the CPU trainers).

Fan-in rule: member i of a stage sends its batches to member `i % len(next)` of the next
stage, so one heter trainer serves every i with `i % k == j` (k members, j its index).
A plain PS job (no STAGE_NUM) is one stage: `stage_num() == 1`, `stage_id() == 1`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from paddlike import contract, netaddr
from paddlike.distributed.ps import endpoints

STAGE_TRAINERS_NUM = contract.STAGE_TRAINERS_NUM
DEFAULT_TIMEOUT = 300.0


class StageRoleError(ValueError):
    """The environment does not describe a valid stage; the text names the variable."""


@dataclass(frozen=True)
class StageRole:
    """This process's stage, its index in it, and its neighbours' endpoints."""

    is_heter: bool
    stage_id: int
    stage_num: int
    index: int  # position in its own stage (the trainer id in stage 1)
    endpoint: str  # a heter trainer binds it; on a trainer only a label ("" when unknown)
    previous: tuple[str, ...]  # the previous stage's members (stage 2: the CPU trainers)
    next: tuple[str, ...]  # the next stage's members; () for the last stage
    timeout: float  # default deadline of every channel wait (PADDLIKE_TIMEOUT, else 300 s)

    @property
    def next_peer(self) -> str:
        """The member of the next stage this process sends its forward batches to."""
        return self.next[self.index % len(self.next)]

    def senders(self) -> dict[int, str]:
        """Previous-stage members that send to this one (fan-in), by index: their endpoint."""
        return {i: ep for i, ep in enumerate(self.previous) if i % self.stage_size == self.index}

    stage_size: int = 1  # members of this process's own stage


def stage_label(stage: int, index: int) -> str:
    """How errors name a stage member: 'trainer 1' in stage 1, 'heter trainer 0 of stage 2'."""
    return f"trainer {index}" if stage == 1 else f"heter trainer {index} of stage {stage}"


def _int(environ: Mapping[str, str], name: str, default: int | None) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        if default is None:
            raise StageRoleError(f"{name} is not set: a heter trainer needs it (see docs/ps.md)")
        return default
    try:
        return int(raw)
    except ValueError:
        raise StageRoleError(f"{name}={raw!r} is not an integer") from None


def _endpoints(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    raw = environ.get(name, "")
    eps = tuple(e.strip() for e in raw.replace(";", ",").split(",") if e.strip())
    for ep in eps:
        if not endpoints.well_formed(ep):
            raise StageRoleError(
                f"{name}: entry {ep!r} is not host:port, an IPv6 host in brackets "
                f"([fd00::1]:6170) (value {raw!r})"
            )
    return eps


def _stage_counts(environ: Mapping[str, str]) -> list[int] | None:
    raw = environ.get(STAGE_TRAINERS_NUM, "").strip()
    if not raw:
        return None
    try:
        counts = json.loads(raw)
        if not isinstance(counts, list) or not all(isinstance(c, int) and c > 0 for c in counts):
            raise ValueError
    except ValueError:
        raise StageRoleError(
            f"{STAGE_TRAINERS_NUM}={raw!r}: expected a list of per-stage trainer counts "
            "such as [2, 1]"
        ) from None
    return counts


def _timeout(environ: Mapping[str, str]) -> float:
    raw = environ.get(contract.TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise StageRoleError(f"{contract.TIMEOUT}={raw!r} is not seconds") from None
    if not value > 0:
        raise StageRoleError(f"{contract.TIMEOUT}={raw!r} must be positive seconds")
    return value


def is_heter(environ: Mapping[str, str]) -> bool:
    role = environ.get(contract.TRAINING_ROLE) or environ.get(contract.PADDLE_ROLE) or ""
    return role.upper() == contract.ROLE_HETER_TRAINER


def stage_num(environ: Mapping[str, str]) -> int:
    n = _int(environ, contract.STAGE_NUM, 1)
    if n < 1:
        raise StageRoleError(f"{contract.STAGE_NUM}={n}: a job has at least one stage")
    return n


def stage_id(environ: Mapping[str, str]) -> int:
    heter = is_heter(environ)
    sid = _int(environ, contract.STAGE_ID, None if heter else 1)
    n = stage_num(environ)
    lowest = 2 if heter else 1
    if not lowest <= sid <= n:
        what = "a heter trainer's stage is 2.." if heter else "stage ids are 1.."
        raise StageRoleError(f"{contract.STAGE_ID}={sid} with {contract.STAGE_NUM}={n}: {what}{n}")
    return sid


def _heter_endpoint(environ: Mapping[str, str]) -> str:
    own = environ.get(contract.CURRENT_ENDPOINT, "").strip()
    if own:
        return own
    ip = environ.get(contract.POD_IP, "").strip()
    port = environ.get(contract.PADDLE_PORT, "").strip()
    if not ip or not port:
        raise StageRoleError(
            f"a heter trainer needs its own endpoint: set {contract.CURRENT_ENDPOINT} or "
            f"{contract.POD_IP} and {contract.PADDLE_PORT} (got {ip!r}:{port!r})"
        )
    return netaddr.join(ip, port)


def _stage_members(environ: Mapping[str, str], sid: int, n: int) -> tuple[str, ...]:
    """The endpoints of heter stage `sid`, cut out of the list of every heter trainer."""
    everyone = _endpoints(environ, contract.ALL_HETER_TRAINER_IP_PORT_LIST)
    counts = _stage_counts(environ)
    if counts is None:
        if n == 2:
            return everyone
        raise StageRoleError(
            f"{STAGE_TRAINERS_NUM} is not set: with {contract.STAGE_NUM}={n} it says which "
            f"entries of {contract.ALL_HETER_TRAINER_IP_PORT_LIST} belong to stage {sid}"
        )
    if len(counts) != n or sum(counts[1:]) != len(everyone):
        raise StageRoleError(
            f"{STAGE_TRAINERS_NUM}={counts} does not match {contract.STAGE_NUM}={n} and the "
            f"{len(everyone)} entries of {contract.ALL_HETER_TRAINER_IP_PORT_LIST}"
        )
    start = sum(counts[1 : sid - 1])
    return everyone[start : start + counts[sid - 1]]


def stage_role_from_env(environ: Mapping[str, str]) -> StageRole:
    """The stage described by `environ`; a missing or contradictory value is a StageRoleError."""
    heter, n, sid = is_heter(environ), stage_num(environ), stage_id(environ)
    nxt = _endpoints(environ, contract.NEXT_HETER_TRAINER_IP_PORT_LIST)
    previous = _endpoints(environ, contract.PREVIOUS_HETER_TRAINER_IP_PORT_LIST)
    if sid < n and not nxt:
        raise StageRoleError(
            f"{contract.NEXT_HETER_TRAINER_IP_PORT_LIST} is empty but this is stage {sid} of "
            f"{n}: the next stage's endpoints are needed to send it batches"
        )
    if not heter:
        index = _int(environ, contract.TRAINER_ID, 0)
        trainers = _endpoints(environ, contract.TRAINER_ENDPOINTS)
        own = environ.get(contract.CURRENT_ENDPOINT, "").strip()
        if not own and 0 <= index < len(trainers):
            own = trainers[index]
        return StageRole(False, sid, n, index, own, (), nxt, _timeout(environ))
    own = _heter_endpoint(environ)
    members = _stage_members(environ, sid, n)
    mine = [i for i, member in enumerate(members) if endpoints.same(member, own)]
    if not mine:
        raise StageRoleError(
            f"this heter trainer's endpoint {own!r} is not among stage {sid}'s endpoints "
            f"{','.join(members)!r} (from {contract.ALL_HETER_TRAINER_IP_PORT_LIST})"
        )
    if sid == 2 and not previous:  # stage 2's previous stage is the CPU trainers
        previous = _endpoints(environ, contract.TRAINER_ENDPOINTS)
    if not previous:
        raise StageRoleError(
            f"{contract.PREVIOUS_HETER_TRAINER_IP_PORT_LIST} is empty: a heter trainer of stage "
            f"{sid} needs the previous stage's endpoints to know who sends it batches"
        )
    index = mine[0]
    return StageRole(True, sid, n, index, own, previous, nxt, _timeout(environ), len(members))
