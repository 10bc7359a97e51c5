"""Whether node 0's store is gone, as opposed to out of reach.

When a call to node 0's store fails, the host may be silent (its machine died, the
network was cut: only the heartbeat timeout can tell) or it may answer a new connection
with a refusal (a TCP reset: the host is up and nothing listens on the store's port).
The second is proof that the launcher hosting the store has gone, so a watch
(`peers.watch`) decides at once instead of waiting out --heartbeat_timeout. Right as
that launcher dies its listener may still queue a connection, then reset it when the
kernel closes it: a reset before the store's hello (always its first words) is the
same proof.
"""

from __future__ import annotations

import socket

from paddlike import netaddr

PROBE_TIMEOUT = 1.0  # a host that answers refuses (or a live store greets) at once


def refuses(address: str, timeout: float = PROBE_TIMEOUT) -> bool:
    """True when the host of `address` ("host:port", "[v6]:port") refuses a connection to
    that port, or resets one without a word (a store's first act is its hello: a listener
    closing as its process dies resets what waits in its queue); False when the store
    greets us, stays silent for `timeout`, or cannot be reached."""
    try:
        host, port = netaddr.split(address)
        with socket.create_connection((host, int(port)), timeout=timeout) as probe:
            return not probe.recv(1)  # b"": closed before its hello
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    except (OSError, ValueError):
        return False


def refuses_us(address: str, hosts_store: bool) -> bool:
    """Whether node 0's TCP store at `address` refuses connections (never asked on etcd,
    nor by the node that hosts the store: its own store cannot be gone while it runs)."""
    return not address.startswith("etcd://") and not hosts_store and refuses(address)
