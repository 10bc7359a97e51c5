"""The launchers' key-value store on an etcd v3 cluster (``--master etcd://host:port,...``).

`EtcdStore` has the methods rendezvous and job watching use on the TCP store (set,
get, try_get, add, compare_set, delete, wait), so the same rendezvous, abort and
restart logic runs through etcd, and no node is a single point of failure. It talks
to etcd's HTTP/JSON gateway (``/v3/...``, served by etcd 3.3 and later; 3.4 also
serves ``/v3beta``) with the standard library: one kept-alive connection per thread
(`etcd_gateway`; http.client, never through a proxy from the environment: cluster nodes
often carry one for the internet, which cannot reach, or must not see, etcd), and a
watch on a socket of its own, kept between waits for the same key (`etcd_watch`).

- keys and values are base64 in the JSON; every key lives under
  ``/paddlike/<job id>/`` (``--job_id``, default "default");
- `compare_set` is a transaction (`/v3/kv/txn`); `add` never contends: each call writes
  create-only tallies of its own (``<key>\\0<random>``) and counts them in the same
  transaction, and a counter reads as its count; `arrive_and_claim` is a rendezvous
  arrival (two counters and a create-only entry) in one transaction;
- `get` waits with a watch (`/v3/watch`, a stream of JSON lines) that starts just
  after the revision at which the key was found missing, so no put is missed;
- a tally, like every key this launcher writes, carries its lease: a launcher that
  leaves takes its tallies with it, so a counter can go down (its count is who is
  still there, not who ever came);
- liveness is a lease: every key this launcher writes is attached to its lease
  (TTL = --heartbeat_timeout), kept alive every TTL/5. A launcher that dies or is cut
  off loses its lease, and with it its ``alive/<node>`` key: the others notice that
  (`LeaseLiveness`). Keys of a job that ended vanish with the launchers' leases, so
  the next run with the same job id starts clean.
"""

from __future__ import annotations

import base64
import contextlib
import os
import threading
import time
from collections.abc import Sequence

from paddlike import netaddr
from paddlike.distributed.store import StoreError, StoreTimeoutError
from paddlike.launch.peers.etcd_gateway import EtcdGateway, EtcdUnreachable
from paddlike.launch.peers.etcd_watch import WatchRejected, WatchStream

PREFIX = "/paddlike"
DEFAULT_JOB = "default"
IO_TIMEOUT = 5.0  # seconds for one gateway request that does not wait for a key



def parse_etcd_master(master: str) -> list[tuple[str, int]]:
    """``etcd://h1:2379,h2:2379`` -> [("h1", 2379), ("h2", 2379)] (validated by options)."""
    rest = master[len("etcd://") :] if master.startswith("etcd://") else master
    out = []
    for item in rest.split(","):
        host, _, port = item.strip().rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return out


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text or "")


def _to_bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


class EtcdStore:
    """A job's keys on etcd, through the JSON gateway. Thread-safe (each thread its own
    kept-alive connection); `grant_lease` before writing so that this launcher's keys
    carry its lease."""

    def __init__(
        self,
        endpoints: Sequence[tuple[str, int]],
        *,
        job_id: str | None = None,
        timeout: float = 300.0,
        io_timeout: float = IO_TIMEOUT,
    ) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints")
        self.endpoints = list(endpoints)
        self.prefix = f"{PREFIX}/{job_id or DEFAULT_JOB}/"
        self.timeout = timeout
        self.io_timeout = io_timeout
        self.lease: int | None = None
        self.lease_ttl: float = 0.0
        self._gateway = EtcdGateway(self.endpoints, io_timeout)
        self._owns_lease = True
        self._local = threading.local()  # each thread's kept watch
        self._keepalive_stop = threading.Event()
        self._keepalive_thread: threading.Thread | None = None
        self._watches: set[WatchStream] = set()  # every thread's kept watch, for `close`
        self._watches_lock = threading.Lock()

    @property
    def address(self) -> str:
        return "etcd://" + ",".join(netaddr.join(h, p) for h, p in self.endpoints)

    def _call(self, path: str, body: dict, timeout: float | None = None) -> dict:
        """One request to the gateway (`EtcdGateway.call`)."""
        return self._gateway.call(path, body, timeout)

    def _k(self, key: str) -> str:
        return _b64((self.prefix + key).encode())

    def _put_op(self, key: str, value: bytes) -> dict:
        return self._put_raw((self.prefix + key).encode(), value)

    def _put_raw(self, full_key: bytes, value: bytes) -> dict:
        """A put of `full_key` (the job's prefix included) under this launcher's lease."""
        op: dict = {"key": _b64(full_key), "value": _b64(value)}
        if self.lease is not None:
            op["lease"] = str(self.lease)
        return op

    def _range(self, key: str) -> tuple[dict | None, int]:
        """(the key's kv or None, the store revision of the answer). A counter (`add`) has
        no kv of its own: its tallies' count stands in for it, read in the same call."""
        tallies = self._tally_range(key)
        txn = {
            "success": [
                {"request_range": {"key": self._k(key)}},
                {"request_range": {**tallies, "count_only": True}},
            ]
        }
        r = self._call("kv/txn", txn)
        revision = int(r.get("header", {}).get("revision", 0))
        answers = r.get("responses") or [{}, {}]
        kvs = answers[0].get("response_range", {}).get("kvs") or []
        if kvs:
            return kvs[0], revision
        count = int(answers[-1].get("response_range", {}).get("count", 0) or 0)
        if count:
            return {"value": _b64(str(count).encode())}, revision
        return None, revision

    def _tally_range(self, key: str) -> dict:
        """Where a counter's tallies live: ``<key>\\0<id>``, a range no other key enters
        (the byte 0 appears in no key of the protocol)."""
        start = (self.prefix + key + "\0").encode()
        return {"key": _b64(start), "range_end": _b64(start[:-1] + b"\x01")}

    # -- the KV interface --

    def set(self, key: str, value: bytes | str) -> None:
        self._call("kv/put", self._put_op(key, _to_bytes(value)))

    def try_get(self, key: str) -> bytes | None:
        kv, _ = self._range(key)
        return None if kv is None else _unb64(kv.get("value"))

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The key's value, waiting up to `timeout` (default: the store's) for a put. The
        watch a wait opens stays open when the wait times out, for this thread's next
        `get` of the same key (a launcher waits for the verdict a second at a time)."""
        t = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        while True:
            watch = self._kept_watch(key)
            if watch is None:
                kv, revision = self._range(key)
                if kv is not None:
                    return _unb64(kv.get("value"))
                if time.monotonic() < deadline:
                    watch = self._start_watch(key, revision + 1, deadline)
            if watch is not None:
                value = self._next_put(watch, key, deadline)
                if value is not None:
                    return value
            if time.monotonic() >= deadline:
                raise StoreTimeoutError(
                    f"key {key!r} did not appear in etcd at {self.address} within {t:g} s"
                )

    def _kept_watch(self, key: str) -> WatchStream | None:
        kept = getattr(self._local, "watch", None)
        return kept[1] if kept is not None and kept[0] == key else None

    def _start_watch(self, key: str, start_revision: int, deadline: float) -> WatchStream | None:
        """A watch of `key` and its tallies (`add`) from `start_revision` on, kept as this
        thread's (closing the one it kept before); None when the deadline passes first."""
        self._drop_watch()
        full = (self.prefix + key).encode()
        # the key and its tallies: a counter's get wakes on a tally and reads again
        watched = {"key": _b64(full), "range_end": _b64(full + b"\x01")}
        body = {"create_request": {**watched, "start_revision": str(start_revision)}}
        errors = []
        n = len(self.endpoints)
        for k in range(n):
            i = (self._gateway.good + k) % n
            host, port = self.endpoints[i]
            try:
                watch = WatchStream(host, port, body, max(0.05, deadline - time.monotonic()))
            except WatchRejected:
                raise
            except OSError as exc:
                errors.append(f"{netaddr.join(host, port)}: {exc}")
                continue
            self._local.watch = (key, watch)
            with self._watches_lock:
                self._watches.add(watch)
            return watch
        if time.monotonic() >= deadline:
            return None
        raise EtcdUnreachable(
            f"no etcd endpoint of {self.address} answered /v3/watch: " + "; ".join(errors)
        )

    def _drop_watch(self) -> None:
        kept = getattr(self._local, "watch", None)
        self._local.watch = None
        if kept is not None:
            with self._watches_lock:
                self._watches.discard(kept[1])
            kept[1].close()

    def _next_put(self, watch: WatchStream, key: str, deadline: float) -> bytes | None:
        """The value of the next put of `key` on `watch`, or None: when `deadline` passes
        first (the watch stays kept), or when the caller must read again (a tally of a
        counter came, or the stream ended: the watch is dropped)."""
        full = (self.prefix + key).encode()
        while True:
            try:
                message = watch.next_message(deadline)
            except EOFError:
                self._drop_watch()
                return None
            if message is None:
                return None
            result = message.get("result") or {}
            if message.get("error") or result.get("canceled"):  # e.g. history compacted
                self._drop_watch()
                return None
            for event in result.get("events") or []:
                if event.get("type", "PUT") != "PUT":
                    continue
                self._drop_watch()
                if _unb64(event["kv"].get("key")) != full:
                    return None  # a tally: the caller reads the count again
                return _unb64(event["kv"].get("value"))

    def add(self, key: str, amount: int = 1) -> int:
        """A counter that counts up without contention: each call writes `amount` tallies
        of its own (``<key>\\0<random id>``, create-only) and counts the key's tallies in
        the same transaction, which etcd applies one at a time: so the count is this
        call's place among all calls, found in one request that never has to be retried.
        (A compare-and-swap on one key made N arrivals retry O(N) times each: 256 nodes
        took 24 s.) `try_get` and `get` read a counter as its count, in ASCII decimal as
        on the TCP store. A tally carries this launcher's lease like any key it writes.
        """
        if amount < 0:
            raise StoreError(f"etcd counter {key!r} only counts up (add {amount})")
        if amount == 0:
            kv, _ = self._range(key)
            return 0 if kv is None else int(_unb64(kv.get("value")))
        deadline = time.monotonic() + self.io_timeout
        while True:
            r = self._call("kv/txn", self._tally_txn(key, amount))
            if r.get("succeeded"):
                answer = (r.get("responses") or [{}])[-1].get("response_range", {})
                return int(answer.get("count", 0) or 0)
            if time.monotonic() > deadline:  # 96 random bits taken already: never in practice
                raise StoreTimeoutError(f"add to etcd key {key!r}: no fresh tally")

    def arrive_and_claim(
        self, arrived: str, key: str, value: bytes, count: str
    ) -> tuple[int, bytes, int | None]:
        """A rendezvous arrival in one transaction (was three requests, each a write etcd
        commits on its own): a tally of the counter `arrived`; `value` under `key` if no
        one holds it (create-only) and then a tally of `count`. Returns (this arrival's
        number, the value `key` holds now, the count after this tally or None when `key`
        was taken already), as `peers.kv.arrive_and_claim` does with three calls."""
        arrival = self._tally_txn(arrived, 1)
        counted = self._tally_txn(count, 1)
        tally_put, arrivals_count = arrival["success"]
        claim = {"key": self._k(key), "result": "EQUAL", "target": "CREATE"}
        claim["create_revision"] = "0"
        txn = {
            "compare": [claim],
            "success": [
                tally_put,
                {"request_put": self._put_op(key, value)},
                counted["success"][0],
                arrivals_count,
                counted["success"][1],
            ],
            "failure": [tally_put, arrivals_count, {"request_range": {"key": self._k(key)}}],
        }
        r = self._call("kv/txn", txn)
        answers = [a.get("response_range", {}) for a in r.get("responses") or []]
        if r.get("succeeded"):
            return int(answers[3].get("count", 0) or 0), value, int(answers[4].get("count", 0) or 0)
        kvs = answers[2].get("kvs") or [] if len(answers) > 2 else []
        held = _unb64(kvs[0].get("value")) if kvs else b""
        return int(answers[1].get("count", 0) or 0), held, None

    def _tally_txn(self, key: str, amount: int) -> dict:
        """`amount` fresh tallies of `key`, each create-only, then the count of them all."""
        mine = [(self.prefix + key + "\0" + os.urandom(12).hex()).encode() for _ in range(amount)]
        create_only = {"result": "EQUAL", "target": "CREATE", "create_revision": "0"}
        return {
            "compare": [{"key": _b64(k), **create_only} for k in mine],
            "success": [
                *({"request_put": self._put_raw(k, b"1")} for k in mine),
                {"request_range": {**self._tally_range(key), "count_only": True}},
            ],
        }

    def compare_set(self, key: str, expected: bytes | str | None, desired: bytes | str) -> bytes:
        """Set `desired` iff the value is `expected` (None: absent); return the value now
        stored (b"" when absent), as `StoreClient.compare_set` does."""
        want = _to_bytes(desired)
        if expected is None:
            compare = {"key": self._k(key), "result": "EQUAL", "target": "CREATE"}
            compare["create_revision"] = "0"
        else:
            compare = {"key": self._k(key), "result": "EQUAL", "target": "VALUE"}
            compare["value"] = _b64(_to_bytes(expected))
        txn = {
            "compare": [compare],
            "success": [{"request_put": self._put_op(key, want)}],
            "failure": [{"request_range": {"key": self._k(key)}}],
        }
        r = self._call("kv/txn", txn)
        if r.get("succeeded"):
            return want
        kvs = (r.get("responses") or [{}])[0].get("response_range", {}).get("kvs") or []
        return _unb64(kvs[0].get("value")) if kvs else b""

    def missing(self, keys: Sequence[str]) -> list[str]:
        """Which of `keys` etcd lacks right now: one range read over their common prefix
        (keys only), instead of one request per key — the rendezvous asks this about
        every node not seen yet, each second."""
        keys = list(keys)
        if len(keys) < 2:
            return [k for k in keys if self.try_get(k) is None]
        present = self._under_common_prefix(keys, keys_only=True)
        return [k for k in keys if k not in present]

    def get_many(self, keys: Sequence[str], timeout: float | None = None) -> list[bytes]:
        """Every key's value, in order: one range read over their common prefix (the last
        arrival of a rendezvous reads N entries in one request, not N), then a waiting
        `get` for each key not there yet, all under one deadline of `timeout` s."""
        keys = list(keys)
        t = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        found = self._under_common_prefix(keys, keys_only=False) if len(keys) > 1 else {}
        out = []
        for k in keys:
            value = found.get(k)
            if value is None:
                value = self.get(k, timeout=max(0.001, deadline - time.monotonic()))
            out.append(value)
        return out

    def _under_common_prefix(self, keys: list[str], *, keys_only: bool) -> dict[str, bytes]:
        """The keys (and values, unless `keys_only`) stored under the common prefix of
        `keys`, in one range read; keys without the job's prefix stripped."""
        lo, hi = min(keys), max(keys)  # the common prefix of all: that of these two
        n = 0
        while n < min(len(lo), len(hi)) and lo[n] == hi[n]:
            n += 1
        start = (self.prefix + lo[:n]).encode()  # (never empty: the job's prefix leads)
        end = start[:-1] + bytes([start[-1] + 1])  # every key that starts with `start`
        body: dict = {"key": _b64(start), "range_end": _b64(end)}
        if keys_only:
            body["keys_only"] = True
        r = self._call("kv/range", body)
        wanted = set(keys)
        out = {}
        for kv in r.get("kvs") or []:
            name = _unb64(kv.get("key")).decode("utf-8", "replace")[len(self.prefix) :]
            if name in wanted:
                out[name] = _unb64(kv.get("value"))
        return out

    def delete(self, key: str) -> bool:
        r = self._call("kv/deleterange", {"key": self._k(key)})
        return int(r.get("deleted", 0)) > 0

    def wait(self, keys: Sequence[str], timeout: float | None = None) -> None:
        t = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        for key in keys:
            try:
                self.get(key, timeout=max(0.001, deadline - time.monotonic()))
            except StoreTimeoutError as exc:
                missing = [k for k in keys if self.try_get(k) is None]
                raise StoreTimeoutError(
                    f"keys {','.join(missing)} did not appear in etcd at {self.address} "
                    f"within {t:g} s"
                ) from exc

    # -- the lease --

    def grant_lease(self, ttl: float) -> int:
        """A lease of `ttl` s (whole seconds, at least 2) for every key this store writes,
        kept alive from a daemon thread every ttl/5 s until `close`."""
        seconds = max(2, round(ttl))
        r = self._call("lease/grant", {"TTL": str(seconds)})
        if r.get("error"):
            raise StoreError(f"etcd at {self.address} refused a lease: {r['error']}")
        self.lease, self.lease_ttl = int(r["ID"]), float(seconds)
        self._keepalive_thread = threading.Thread(
            target=self._keepalive_loop, name="etcd-keepalive", daemon=True
        )
        self._keepalive_thread.start()
        return self.lease

    def sharing_lease(self) -> EtcdStore:
        """Another handle on the same keys and lease (for a thread); its `close` leaves
        the lease alone."""
        other = EtcdStore(
            self.endpoints, job_id=None, timeout=self.timeout, io_timeout=self.io_timeout
        )
        other.prefix, other.lease, other.lease_ttl = self.prefix, self.lease, self.lease_ttl
        other._owns_lease = False
        return other

    def keepalive(self) -> None:
        """Renew the lease; StoreError when etcd cannot be reached or the lease expired."""
        if self.lease is None:
            return
        r = self._call("lease/keepalive", {"ID": str(self.lease)})
        if int(r.get("result", {}).get("TTL", 0)) <= 0:
            raise StoreError(
                f"this launcher's etcd lease expired at {self.address}: it could not reach "
                f"etcd for {self.lease_ttl:g} s (--heartbeat_timeout)"
            )

    def _keepalive_loop(self) -> None:
        while not self._keepalive_stop.wait(self.lease_ttl / 5):
            try:
                self.keepalive()
            except StoreError:
                continue  # the job watch's heartbeat reports a lasting failure

    def close(self) -> None:
        """Stop the keepalive and revoke the lease: this launcher's keys vanish with it;
        close the watches kept open."""
        self._keepalive_stop.set()
        with self._watches_lock:
            watches, self._watches = self._watches, set()
        for watch in watches:
            watch.close()
        if self.lease is not None and self._owns_lease:
            lease, self.lease = self.lease, None
            with contextlib.suppress(StoreError):  # else it expires by itself after its TTL
                self._call("lease/revoke", {"ID": str(lease)})
