"""A death notice: what a launcher's guardian writes to node 0's store if the launcher dies
during a round (`run.guardian`). Encoded by the launcher while it lives (it knows the
round, its place and the store: `protocol.encode_notice`), delivered by the guardian
(`deliver_notice`), which knows nothing else.

One line of JSON: ``{"store": [host, port], "token": hex | null, "cause": [key, b64],
"marks": [[key, b64], ...]}``, or for etcd ``"etcd": [[host, port], ...], "job_id": ...``
instead of the store (the writes then carry a lease of their own, NOTICE_LEASE long: the
dead launcher's goes soon). Every write is create-only: the round's first cause wins, as
always; the cause is stamped with the time it is delivered.
"""

from __future__ import annotations

import base64
import json
import time

# How long a guardian tries to reach node 0's store before it ends the workers anyway.
NOTICE_TIMEOUT = 1.0
# etcd: how long the notice's keys outlive the guardian (the others read them at once)
NOTICE_LEASE = 60.0


def deliver_notice(notice: bytes) -> bool:
    """Make the notice's writes; False when node 0's store cannot be reached within
    NOTICE_TIMEOUT (it is gone too, or the network). Never raises."""
    from paddlike.distributed.store import StoreClient, StoreError
    from paddlike.launch.peers import protocol as p

    if not notice:  # (the guardian's dry run: the imports done ahead of time)
        from paddlike.launch.peers import etcd  # noqa: F401  (an etcd job's notice)

        return False
    try:
        data = json.loads(notice)
        key, b64 = data["cause"]
        cause = p.decode_cause(base64.b64decode(b64))
        cause.time = time.time()
        writes = [(key, p.encode_cause(cause))]
        writes += [(k, base64.b64decode(v)) for k, v in data["marks"]]
        if "etcd" in data:
            return _deliver_etcd(data, writes)
        host, port = data["store"]
        token = bytes.fromhex(data["token"]) if data["token"] else None
        kv = StoreClient(
            host,
            int(port),
            timeout=NOTICE_TIMEOUT,
            token=token,
            reconnect_timeout=0.0,
            io_timeout=NOTICE_TIMEOUT,
        )
    except (StoreError, OSError, ValueError, KeyError, TypeError):
        return False
    try:
        for k, v in writes:
            kv.compare_set(k, None, v)
        return True
    except (StoreError, OSError):
        return False
    finally:
        kv.close()


def _deliver_etcd(data: dict, writes: list[tuple[str, bytes]]) -> bool:
    """The writes on etcd, under a lease of their own (never revoked: it expires)."""
    from paddlike.distributed.store import StoreError
    from paddlike.launch.peers.etcd import EtcdStore

    endpoints = [(h, int(port)) for h, port in data["etcd"]]
    kv = EtcdStore(
        endpoints, job_id=data["job_id"], timeout=NOTICE_TIMEOUT, io_timeout=NOTICE_TIMEOUT
    )
    try:
        kv.grant_lease(NOTICE_LEASE)
        for k, v in writes:
            kv.compare_set(k, None, v)
        return True
    except (StoreError, OSError):
        return False
