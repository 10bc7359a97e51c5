"""What the peers stage needs from the options (`PeersSpec`), made in one place
(`peers_spec`): `peers` never sees the whole options record, so its signatures say
what it uses."""

from __future__ import annotations

from paddlike.launch import NamedTuple
from paddlike.launch.context.master import uses_etcd

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.context.options.record import LaunchOptions


class PeersSpec(NamedTuple):
    """How a many-node launcher reaches the others and how long it waits for them."""

    etcd: str | None  # --master etcd://h1:2379,...: the launchers meet there; None: node 0's store
    job_id: str | None  # --job_id: the job's keys on etcd
    token: bytes | None  # --job_token: node 0's store refuses launchers without it
    rdzv_timeout: float  # --rdzv_timeout
    heartbeat_timeout: float  # --heartbeat_timeout


def peers_spec(options: LaunchOptions) -> PeersSpec:
    """The peers' part of the options."""
    return PeersSpec(
        etcd=options.master if uses_etcd(options) else None,
        job_id=options.job_id,
        token=options.job_token.encode() if options.job_token else None,
        rdzv_timeout=options.rdzv_timeout,
        heartbeat_timeout=options.heartbeat_timeout,
    )
