"""The TCP key-value store shared by the launchers (rendezvous, abort) and the workers' runtime.

One server runs in daemon threads of its host process (node 0's launcher, or rank 0's
worker); clients connect from any process. The protocol is a compact binary framing
of length-prefixed byte strings: no pickle, no eval, so a hostile or broken peer can
at worst get an error frame back. Every call carries a deadline. With `allowed_hosts`
the server serves only the job's nodes; with a job token, only clients that prove
they hold it (HMAC of a challenge).

    wire.py      framing, handshake, statuses, errors: the bytes on the socket
    commands.py  one class per command: request encoder, effect on the table, reply decoder
    server.py    StoreServer: accept, authenticate, serve each connection on its thread
    client.py    StoreClient: connect (with retries), one command at a time, barrier

This package imports only the standard library: the launcher imports it, and its
import time counts toward every launch.
"""

from __future__ import annotations

from .client import StoreClient
from .server import CLOSE_GRACE, MAX_CONNECTIONS, WRONG_TOKEN, StoreServer
from .wire import (
    ERROR,
    FRAME_TIMEOUT,
    HANDSHAKE_TIMEOUT,
    MAGIC,
    MAX_FRAME,
    MAX_KEY,
    MISSING,
    OK,
    PROTOCOL_VERSION,
    TIMEOUT,
    ProtocolError,
    StoreAuthError,
    StoreError,
    StoreTimeoutError,
)

__all__ = [
    "CLOSE_GRACE",
    "ERROR",
    "FRAME_TIMEOUT",
    "HANDSHAKE_TIMEOUT",
    "MAGIC",
    "MAX_CONNECTIONS",
    "MAX_FRAME",
    "MAX_KEY",
    "MISSING",
    "OK",
    "PROTOCOL_VERSION",
    "TIMEOUT",
    "WRONG_TOKEN",
    "ProtocolError",
    "StoreAuthError",
    "StoreClient",
    "StoreError",
    "StoreServer",
    "StoreTimeoutError",
]
