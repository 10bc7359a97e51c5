"""Who this process is in a parameter-server job, read from the environment contract.

The launcher (or any scheduler that speaks Paddle's PS contract) sets TRAINING_ROLE or
PADDLE_ROLE, PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINER_ENDPOINTS,
PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ID, and for a server PADDLE_PORT and POD_IP.
A server's index is the position of its own ip:port in the server list; a trainer's
id is its position in the trainer list. PADDLIKE_JOB_TOKEN and PADDLIKE_NODE_HOSTS say
whom a server serves (see `ps.auth`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from paddlike import contract, netaddr
from paddlike.distributed.ps import endpoints

DEFAULT_TIMEOUT = 300.0  # like init_parallel_env: how long a trainer waits for the others


class RoleError(ValueError):
    """The environment does not describe a valid PS process; the text names the variable."""


class Role(enum.Enum):
    SERVER = contract.ROLE_PSERVER
    TRAINER = contract.ROLE_TRAINER
    HETER_TRAINER = contract.ROLE_HETER_TRAINER  # a later pipeline stage (ps/stage.py)


@dataclass(frozen=True)
class PsRole:
    role: Role
    server_endpoints: tuple[str, ...]
    trainers_num: int
    trainer_id: int  # -1 on a server
    server_index: int  # -1 on a trainer
    timeout: float  # seconds a trainer waits for the others (PADDLIKE_TIMEOUT, default 300)
    token: str | None = field(default=None, repr=False)  # PADDLIKE_JOB_TOKEN: never printed
    # The job's hosts (PADDLIKE_NODE_HOSTS plus the hosts of every server, trainer and heter
    # endpoint), or None when unknown: neither node hosts nor trainer endpoints were given.
    job_hosts: tuple[str, ...] | None = None

    @property
    def endpoint(self) -> str:
        """A server's own ip:port (what it binds)."""
        return self.server_endpoints[self.server_index]


def _job_hosts(
    environ: Mapping[str, str], servers: tuple[str, ...], trainers: tuple[str, ...]
) -> tuple[str, ...] | None:
    nodes = [h.strip() for h in environ.get(contract.NODE_HOSTS, "").split(",") if h.strip()]
    if not nodes and not trainers:
        return None  # trainers may be anywhere: only a token can tell them apart
    heter = environ.get(contract.ALL_HETER_TRAINER_IP_PORT_LIST, "").split(",")
    peers = (*servers, *trainers, *(ep.strip() for ep in heter if ep.strip()))
    peer_hosts = (endpoints.host(ep) for ep in peers if endpoints.well_formed(ep))
    hosts = dict.fromkeys([*nodes, *peer_hosts])
    return tuple(h for h in hosts if h)


def _int(environ: Mapping[str, str], name: str) -> int:
    value = environ.get(name, "")
    try:
        return int(value)
    except ValueError:
        raise RoleError(f"{name}={value!r} is not an integer") from None


def _endpoints(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    raw = environ.get(name, "")
    eps = tuple(e.strip() for e in raw.split(",") if e.strip())
    for ep in eps:
        if not endpoints.well_formed(ep):
            raise RoleError(
                f"{name}: entry {ep!r} is not host:port, an IPv6 host in brackets "
                f"([fd00::1]:6170) (value {raw!r})"
            )
    return eps


def role_from_env(environ: Mapping[str, str]) -> PsRole:
    """The PS role described by `environ`; a missing or contradictory value is a RoleError."""
    raw_role = environ.get(contract.TRAINING_ROLE) or environ.get(contract.PADDLE_ROLE) or ""
    try:
        role = Role(raw_role.upper())
    except ValueError:
        raise RoleError(
            f"{contract.TRAINING_ROLE}/{contract.PADDLE_ROLE}={raw_role!r}: expected "
            f"{contract.ROLE_PSERVER} or {contract.ROLE_TRAINER} (start the script with "
            "python -m paddlike.launch --server_num N --worker_num M)"
        ) from None
    servers = _endpoints(environ, contract.PSERVERS_IP_PORT_LIST)
    if not servers:
        raise RoleError(f"{contract.PSERVERS_IP_PORT_LIST} is empty: no parameter servers")
    trainer_eps = _endpoints(environ, contract.TRAINER_ENDPOINTS)
    if environ.get(contract.TRAINERS_NUM):
        trainers_num = _int(environ, contract.TRAINERS_NUM)
    else:
        trainers_num = len(trainer_eps)
    if trainers_num < 1:
        raise RoleError(f"{contract.TRAINERS_NUM}={trainers_num}: a PS job needs a trainer")
    timeout = DEFAULT_TIMEOUT
    if environ.get(contract.TIMEOUT):
        try:
            timeout = float(environ[contract.TIMEOUT])
        except ValueError:
            raise RoleError(
                f"{contract.TIMEOUT}={environ[contract.TIMEOUT]!r} is not seconds"
            ) from None
    token = environ.get(contract.JOB_TOKEN) or None
    hosts = _job_hosts(environ, servers, trainer_eps)
    if role is Role.HETER_TRAINER:  # uses the servers' dense tables, owns no trainer id
        return PsRole(role, servers, trainers_num, -1, -1, timeout, token, hosts)
    if role is Role.TRAINER:
        trainer_id = _int(environ, contract.TRAINER_ID)
        if not 0 <= trainer_id < trainers_num:
            raise RoleError(
                f"{contract.TRAINER_ID}={trainer_id} is outside 0..{trainers_num - 1} "
                f"({contract.TRAINERS_NUM}={trainers_num})"
            )
        return PsRole(role, servers, trainers_num, trainer_id, -1, timeout, token, hosts)
    ip, port = environ.get(contract.POD_IP, ""), environ.get(contract.PADDLE_PORT, "")
    own = netaddr.join(ip, port)  # POD_IP is a bare host, also for IPv6
    mine = [i for i, ep in enumerate(servers) if endpoints.same(ep, own)]
    if mine:
        index = mine[0]
    else:
        same_port = [i for i, ep in enumerate(servers) if endpoints.port(ep) == port]
        if len(same_port) != 1 or ip:
            raise RoleError(
                f"this server's {contract.POD_IP}:{contract.PADDLE_PORT} = {own!r} is not in "
                f"{contract.PSERVERS_IP_PORT_LIST}={','.join(servers)!r}"
            )
        index = same_port[0]
    return PsRole(role, servers, trainers_num, -1, index, timeout, token, hosts)
