"""etcd's HTTP/JSON gateway (``/v3/...``) for `etcd.EtcdStore`: one kept-alive connection
per thread and endpoint (http.client; never through a proxy from the environment), the
endpoint that answered last tried first."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Sequence

from paddlike import netaddr
from paddlike.distributed.store import StoreError, StoreTimeoutError

# what a kept-alive connection that etcd closed while idle raises on its next request
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class EtcdUnreachable(StoreError):
    """No endpoint of the cluster answered (as opposed to one answering with an error)."""


class EtcdGateway:
    """Requests to an etcd cluster's gateway at `endpoints`. Thread-safe."""

    def __init__(self, endpoints: Sequence[tuple[str, int]], io_timeout: float) -> None:
        self.endpoints = list(endpoints)
        self.io_timeout = io_timeout  # seconds for a request that does not wait for a key
        self.good = 0  # index of the endpoint that answered last
        self._local = threading.local()  # each thread's kept-alive connections

    @property
    def address(self) -> str:
        return "etcd://" + ",".join(netaddr.join(h, p) for h, p in self.endpoints)

    def call(self, path: str, body: dict, timeout: float | None = None) -> dict:
        """One request on this thread's kept-alive connection to the endpoint that answered
        last (a new connection per call cost most of each call: 256 nodes took 13 s)."""
        t = max(0.05, self.io_timeout if timeout is None else timeout)
        data = json.dumps(body).encode()
        errors = []
        n = len(self.endpoints)
        for k in range(n):
            i = (self.good + k) % n
            for retry in (False, True):
                conn, reused = self._connection(i, t)
                if conn.sock is None:  # not up (yet), or not there: the next endpoint
                    try:
                        conn.connect()
                    except OSError as exc:
                        self._forget(i)
                        errors.append(f"{netaddr.join(*self.endpoints[i])}: {exc}")
                        break
                try:
                    conn.request("POST", f"/v3/{path}", data, {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                except (OSError, http.client.HTTPException) as exc:  # no answer: unreachable
                    self._forget(i)
                    stale = isinstance(exc, _STALE) and reused and not retry
                    if stale:  # etcd closed the idle connection meanwhile: once more, fresh
                        continue
                    errors.append(f"{netaddr.join(*self.endpoints[i])}: {exc}")
                    break
                try:
                    raw = resp.read()
                except TimeoutError as exc:
                    self._forget(i)
                    raise StoreTimeoutError(
                        f"etcd at {self.address} did not answer /v3/{path}"
                    ) from exc
                except (OSError, http.client.HTTPException) as exc:
                    self._forget(i)
                    raise StoreError(
                        f"etcd at {self.address} failed during /v3/{path}: {exc}"
                    ) from exc
                if resp.status >= 400:
                    detail = raw.decode("utf-8", "replace").strip()
                    where = netaddr.join(*self.endpoints[i])
                    raise StoreError(f"etcd at {where} rejected /v3/{path}: {detail}")
                self.good = i
                try:
                    return json.loads(raw or b"{}")
                except ValueError as exc:
                    raise StoreError(
                        f"etcd at {self.address} failed during /v3/{path}: {exc}"
                    ) from exc
        raise EtcdUnreachable(
            f"no etcd endpoint of {self.address} answered /v3/{path}: " + "; ".join(errors)
        )

    def _connection(self, i: int, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection to endpoint `i` (new or kept), and whether it was kept."""
        conns = self._local.__dict__.setdefault("conns", {})
        conn = conns.get(i)
        reused = conn is not None
        if conn is None:
            host, port = self.endpoints[i]
            conn = conns[i] = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, reused

    def _forget(self, i: int) -> None:
        conn = self._local.__dict__.get("conns", {}).pop(i, None)
        if conn is not None:
            conn.close()
