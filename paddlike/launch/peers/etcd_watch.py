"""One etcd watch (``/v3/watch`` on the JSON gateway) as a stream of messages read with
deadlines, so that one watch serves a whole wait made of many short ones.

A launcher waiting for the rendezvous's verdict wakes each second to print progress; a
watch opened anew for each of those seconds cost etcd and the launcher a connection and
a gRPC stream per node per second (1024 nodes: a thousand a second, most of the round).
This stream is kept between waits instead. It speaks HTTP/1.0 on a socket of its own,
so the body is the gateway's messages, one JSON object a line, with no chunk framing
(the server closes at the end), and "is a whole message here?" is answered by this
module's own buffer and `select`, never by a read that times out halfway (after which
a `socket.makefile` reader refuses to read on).
"""

from __future__ import annotations

import json
import select
import socket
import time

from paddlike import netaddr
from paddlike.distributed.store import StoreError

HEADER_LIMIT = 64 * 1024  # bytes of response head before the stream is called broken


class WatchRejected(StoreError):
    """etcd answered the watch with an HTTP error (as opposed to not answering)."""


class WatchStream:
    """An open watch: `next_message` returns the gateway's messages one by one."""

    def __init__(self, host: str, port: int, body: dict, timeout: float) -> None:
        """Open the watch; OSError when nothing answers within `timeout` s, WatchRejected
        when etcd refuses it."""
        deadline = time.monotonic() + timeout
        self.sock = socket.create_connection((host, port), timeout=max(0.05, timeout))
        self._buf = b""
        try:
            data = json.dumps(body).encode()
            head = (
                f"POST /v3/watch HTTP/1.0\r\nHost: {netaddr.join(host, port)}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            )
            self.sock.sendall(head.encode() + data)
            status, rest = self._read_head(deadline)
            self._buf = rest
            if status >= 400:
                detail = self._read_rest(deadline).decode("utf-8", "replace").strip()
                where = netaddr.join(host, port)
                raise WatchRejected(f"etcd at {where} rejected /v3/watch: {detail}")
        except BaseException:
            self.close()
            raise

    def _read_head(self, deadline: float) -> tuple[int, bytes]:
        """The status code and what came after the response head."""
        raw = b""
        while b"\r\n\r\n" not in raw:
            if len(raw) > HEADER_LIMIT or not self._readable(deadline):
                raise OSError("no response head to /v3/watch")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("connection closed before the response head of /v3/watch")
            raw += chunk
        head, _, rest = raw.partition(b"\r\n\r\n")
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) < 2 or not parts[1].isdigit():
            raise OSError(f"not an HTTP response to /v3/watch: {head[:80]!r}")
        return int(parts[1]), rest

    def _read_rest(self, deadline: float) -> bytes:
        data = self._buf
        while self._readable(deadline):
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data

    def _readable(self, deadline: float) -> bool:
        """Whether the socket has data (or its end) before `deadline`."""
        left = deadline - time.monotonic()
        if left <= 0:
            return bool(select.select([self.sock], [], [], 0)[0])
        return bool(select.select([self.sock], [], [], left)[0])

    def next_message(self, deadline: float) -> dict | None:
        """The next message (a dict), or None once `deadline` passed first; EOFError when
        the stream ended (etcd closed it, or the connection broke)."""
        while b"\n" not in self._buf:
            if not self._readable(deadline):
                return None
            try:
                chunk = self.sock.recv(65536)
            except OSError as exc:
                raise EOFError(f"watch stream broke: {exc}") from exc
            if not chunk:
                raise EOFError("watch stream ended")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError as exc:
            raise EOFError(f"watch stream sent no JSON: {line[:80]!r}") from exc
        return message if isinstance(message, dict) else {}

    def close(self) -> None:
        self.sock.close()
