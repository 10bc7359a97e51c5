"""A death notice: what a launcher's guardian writes to node 0's store if the launcher dies
during a round (`run.guardian`). Encoded by the launcher while it lives (it knows the
round, its place and the store), delivered by the guardian, which knows nothing else.

One line of JSON: ``{"store": [host, port], "token": hex | null, "cause": [key, b64],
"marks": [[key, b64], ...]}``. Every write is create-only: the round's first cause wins,
as always; the cause is stamped with the time it is delivered.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence

# How long a guardian tries to reach node 0's store before it ends the workers anyway.
NOTICE_TIMEOUT = 1.0


def encode_notice(
    store: tuple[str, int],
    token: bytes | None,
    cause: tuple[str, bytes],
    marks: Sequence[tuple[str, bytes]],
) -> bytes:
    def pair(kv: tuple[str, bytes]) -> list[str]:
        return [kv[0], base64.b64encode(kv[1]).decode()]

    return json.dumps(
        {
            "store": list(store),
            "token": token.hex() if token is not None else None,
            "cause": pair(cause),
            "marks": [pair(m) for m in marks],
        }
    ).encode()


def deliver_notice(notice: bytes) -> bool:
    """Make the notice's writes; False when node 0's store cannot be reached within
    NOTICE_TIMEOUT (it is gone too, or the network). Never raises."""
    from paddlike.distributed.store import StoreClient, StoreError
    from paddlike.launch.peers import protocol as p

    if not notice:  # (the guardian's dry run: the imports above done ahead of time)
        return False
    try:
        data = json.loads(notice)
        host, port = data["store"]
        token = bytes.fromhex(data["token"]) if data["token"] else None
        key, b64 = data["cause"]
        cause = p.decode_cause(base64.b64decode(b64))
        cause.time = time.time()
        writes = [(key, p.encode_cause(cause))]
        writes += [(k, base64.b64decode(v)) for k, v in data["marks"]]
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
