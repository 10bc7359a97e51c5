"""The parameter server: one ROUTER socket, one thread, every request answered.

`serve(role)` binds POD_IP:PADDLE_PORT and handles requests until either every
trainer has sent STOP or SIGTERM arrives (the launcher sends it once all trainers
exited 0); then it answers what it already received and returns. A request it cannot
parse or apply gets an ERROR reply naming the problem, and the loop goes on, so one
broken client never takes the server down for the others.

Only the job's peers get that far: the socket is secured with `ps.auth` before it binds
(the job's hosts only and, with a job token, only peers that prove it; decided once per
connection by ZeroMQ's ZAP handler). Requests that name a trainer (BARRIER, STOP, SAVE,
LOAD) must name one of the job's trainers, and SAVE/LOAD take absolute directories only.

Sync mode lives here too: a push of step s is held until every trainer has pushed
step s, then the mean is applied at once; a pull of step s waits (its reply is
deferred, the loop keeps serving) until the pushes of every earlier step are applied.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from paddlike.distributed.ps import auth, checkpoint, endpoints, wire
from paddlike.distributed.ps.role import PsRole
from paddlike.distributed.ps.sharding import dense_ranges
from paddlike.distributed.ps.tables import (
    DenseShard,
    SparseShard,
    TableError,
    TableSpec,
    merge_rows,
)
from paddlike.distributed.ps.wire import ArrayParts, Message, Op, Status, WireError

Frames = list[Any]
# A DECLARE whose dense shard exceeds this many elements (16 GiB of float32) is refused
# rather than attempted: the allocation would take the server's node down with it.
MAX_TABLE_ELEMENTS = 1 << 32
MAX_ROW_DIM = 1 << 20


class RequestError(ValueError):
    """A well-formed message that asks for something impossible (bad op, wrong dtype)."""


@dataclass
class _Table:
    spec: TableSpec
    shard: DenseShard | SparseShard
    applied: int = 0  # sync mode: steps whose pushes are applied
    pending: dict[int, dict[int, Any]] = field(default_factory=dict)  # step -> trainer -> grad
    waiting: list[tuple[bytes, Message]] = field(default_factory=list)  # deferred pulls


def _array(msg: Message, i: int, dtype: Any, ndim: int, what: str) -> ArrayParts:
    if len(msg.arrays) <= i:
        raise RequestError(f"{Op(msg.op).name} needs {what} as array {i}; got {len(msg.arrays)}")
    a = msg.arrays[i]
    assert isinstance(a, ArrayParts)
    if a.dtype != np.dtype(dtype) or len(a.shape) != ndim:
        raise RequestError(
            f"{Op(msg.op).name}: {what} must be {np.dtype(dtype)} with {ndim} dimension(s), "
            f"got {a.dtype} of shape {a.shape}"
        )
    return a


class Server:
    def __init__(self, role: PsRole) -> None:
        self.role = role
        self.index = role.server_index
        self.num_servers = len(role.server_endpoints)
        self.tables: dict[str, _Table] = {}
        self.barrier: dict[int, tuple[bytes, Message]] = {}
        self.stopped: set[int] = set()
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 5000)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.address = endpoints.tcp_address(role.endpoint)
        self.sock.setsockopt(zmq.IPV6, int(endpoints.is_ipv6_address(self.address)))
        self.policy = auth.Policy.create(role.token, role.job_hosts)
        self.gate = auth.secure_server(self.sock, self.policy, f"parameter server {self.index}")
        try:
            self.sock.bind(self.address)
        except BaseException:
            self.gate.close()
            self.sock.close(linger=0)
            self.ctx.term()
            raise
        self._stop = False

    def _describe_policy(self) -> str:
        hosts = (
            "any address (the job's hosts are unknown)"
            if self.role.job_hosts is None
            else "loopback and " + ", ".join(self.role.job_hosts)
        )
        token = "job token required" if self.policy.token else "no job token"
        return f"accepting peers from {hosts}; {token}"

    # --- replies -----------------------------------------------------------------
    def _reply(
        self,
        ident: bytes,
        req: Message,
        text: str = "",
        arrays: list[np.ndarray] | None = None,
        arg0: int = 0,
        arg1: int = 0,
        lend: DenseShard | None = None,
    ) -> None:
        rep = Message(
            op=req.op,
            req_id=req.req_id,
            trainer=req.trainer,
            step=req.step,
            arg0=arg0,
            arg1=arg1,
            text=text,
            arrays=arrays or [],
        )
        frames = [ident, *wire.encode(rep)]
        if lend is not None:
            lend.lend(self.sock.send_multipart(frames, copy=False, track=True))
        else:
            self.sock.send_multipart(frames, copy=False)

    def _error(self, ident: bytes, req: Message, text: str) -> None:
        # One line in the serverlog too: the worker raises, but its log may be elsewhere.
        print(
            f"server {self.index}: error reply to trainer {req.trainer} (op {req.op}): {text}",
            file=sys.stderr,
            flush=True,
        )
        rep = Message(op=req.op, req_id=req.req_id, trainer=req.trainer, text=text)
        rep.status = Status.ERROR
        self.sock.send_multipart([ident, *wire.encode(rep)])

    # --- the loop ----------------------------------------------------------------
    def serve(self) -> None:
        """Handle requests until stopped; returns normally (exit code 0)."""
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        in_main = threading.current_thread() is threading.main_thread()
        if in_main:
            old_fd = signal.set_wakeup_fd(wake_w.fileno())
            old_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(wake_r.fileno(), zmq.POLLIN)
        print(
            f"parameter server {self.index} serving on {self.address} for "
            f"{self.role.trainers_num} trainer(s), {self._describe_policy()}",
            flush=True,
        )
        try:
            while not self._stop:
                poller.poll()  # no deadline: a server lives until the job stops it
                with contextlib.suppress(BlockingIOError):
                    wake_r.recv(4096)  # any signal wrote here; only SIGTERM stops us
                self._drain()
            self._drain(limit=100_000)  # SIGTERM: finish what already arrived
            for t in self.tables.values():
                for ident, req in t.waiting:
                    self._error(ident, req, f"server {self.index} is stopping")
            for ident, req in self.barrier.values():
                self._error(ident, req, f"server {self.index} is stopping")
        finally:
            if in_main:
                signal.set_wakeup_fd(old_fd)
                signal.signal(signal.SIGTERM, old_handler)
            wake_r.close()
            wake_w.close()
            self.sock.close()
            self.gate.close()
            self.ctx.term()
        print(f"parameter server {self.index} stopped", flush=True)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self._stop = True

    def _drain(self, limit: int | None = None) -> None:
        """Handle every message already queued (at most `limit`), stopping early on SIGTERM."""
        count = 0
        while not (self._stop and limit is None) and (limit is None or count < limit):
            count += 1
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self.handle(frames)

    def handle(self, frames: Frames) -> None:
        ident = frames[0].bytes
        req = Message(op=0)
        try:
            if len(frames) >= 2:
                req = wire.decode_header(frames[1])
            req = wire.decode(frames[1:])
            self._dispatch(ident, req)
        except (WireError, RequestError, TableError, checkpoint.CheckpointError, OSError) as exc:
            self._error(ident, req, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug here must not stop the server for everyone
            traceback.print_exc(file=sys.stderr)
            self._error(ident, req, f"internal error on server {self.index}: {exc!r}")

    # --- requests ----------------------------------------------------------------
    def _table(self, msg: Message, kind: str) -> _Table:
        t = self.tables.get(msg.text)
        if t is None:
            raise TableError(f"no table {msg.text!r} on server {self.index}; declare it first")
        if t.spec.kind != kind:
            raise TableError(f"table {msg.text!r} is {t.spec.kind}, not {kind}")
        return t

    def _dispatch(self, ident: bytes, msg: Message) -> None:
        try:
            op = Op(msg.op)
        except ValueError:
            raise RequestError(f"unknown op {msg.op}") from None
        if op is Op.HELLO:
            if msg.arg0 != self.num_servers or msg.arg1 != self.role.trainers_num:
                raise RequestError(
                    f"the worker sees {msg.arg0} servers and {msg.arg1} trainers, server "
                    f"{self.index} sees {self.num_servers} and {self.role.trainers_num}"
                )
            self._reply(ident, msg, arg0=self.index)
            return
        if op in (Op.BARRIER, Op.STOP, Op.SAVE, Op.LOAD) and not (
            0 <= msg.trainer < self.role.trainers_num
        ):
            raise RequestError(
                f"{op.name} from trainer {msg.trainer}, but this job's trainers are "
                f"0..{self.role.trainers_num - 1}"
            )
        if op is Op.DECLARE:
            self._declare(ident, msg)
        elif op in (Op.PULL_DENSE, Op.PULL_SPARSE):
            t = self._table(msg, "dense" if op is Op.PULL_DENSE else "sparse")
            if t.spec.mode == "sync" and msg.step > t.applied:
                t.waiting.append((ident, msg))
            else:
                self._pull(ident, msg, t)
        elif op in (Op.PUSH_DENSE, Op.PUSH_SPARSE):
            self._push(ident, msg, self._table(msg, "dense" if op is Op.PUSH_DENSE else "sparse"))
        elif op is Op.ASSIGN_DENSE:
            t = self._table(msg, "dense")
            a = _array(msg, 0, np.float32, 1, "the values")
            assert isinstance(t.shard, DenseShard)
            t.shard.assign(list(a.flat_parts()), a.size)
            self._reply(ident, msg)
        elif op in (Op.DELTA_DENSE, Op.DELTA_SPARSE):
            self._delta(msg)
            self._reply(ident, msg)
        elif op is Op.BARRIER:
            self.barrier[msg.trainer] = (ident, msg)
            if len(self.barrier) >= self.role.trainers_num:
                waiting, self.barrier = self.barrier, {}
                for wid, wmsg in waiting.values():
                    self._reply(wid, wmsg)
        elif op is Op.SAVE:
            self._save(ident, msg)
        elif op is Op.LOAD:
            self._load(ident, msg)
        elif op is Op.STOP:
            self.stopped.add(msg.trainer)
            self._reply(ident, msg)
            if len(self.stopped) >= self.role.trainers_num:
                self._stop = True
        elif op is Op.PING:
            self._reply(ident, msg)
        elif op is Op.STAT:
            rows = {
                n: (t.shard.n if isinstance(t.shard, SparseShard) else t.shard.size)
                for n, t in self.tables.items()
            }
            self._reply(ident, msg, text=json.dumps(rows))

    def _declare(self, ident: bytes, msg: Message) -> None:
        spec = TableSpec.from_json(msg.text)
        if spec.kind == "dense":
            start, stop = dense_ranges(spec.size, self.num_servers)[self.index]
            if stop - start > MAX_TABLE_ELEMENTS:
                raise RequestError(
                    f"table {spec.name!r}: this server's shard would hold {stop - start} "
                    f"elements, beyond the limit of {MAX_TABLE_ELEMENTS}; use more servers"
                )
        if spec.kind == "sparse" and spec.dim > MAX_ROW_DIM:
            raise RequestError(
                f"table {spec.name!r}: rows of {spec.dim} floats are beyond the limit of "
                f"{MAX_ROW_DIM}"
            )
        t = self.tables.get(spec.name)
        if t is not None:
            problem = t.spec.mismatch(spec)
            if problem:
                raise TableError(problem)
        else:
            if spec.kind == "dense":
                start, stop = dense_ranges(spec.size, self.num_servers)[self.index]
                shard: DenseShard | SparseShard = DenseShard(spec, start, stop)
            else:
                shard = SparseShard(spec)
            t = self.tables[spec.name] = _Table(spec, shard)
        arg0, arg1 = (t.shard.start, t.shard.stop) if isinstance(t.shard, DenseShard) else (0, 0)
        self._reply(ident, msg, arg0=arg0, arg1=arg1)

    def _pull(self, ident: bytes, msg: Message, t: _Table) -> None:
        if isinstance(t.shard, DenseShard):
            self._reply(ident, msg, arrays=[t.shard.values], lend=t.shard)
        else:
            keys = _array(msg, 0, np.int64, 1, "the keys").array()
            self._reply(ident, msg, arrays=[t.shard.pull(keys)])

    def _grad(self, msg: Message, t: _Table) -> Any:
        if isinstance(t.shard, DenseShard):
            g = _array(msg, 0, np.float32, 1, "the gradient")
            t.shard.check_size(g.size, "the gradient")
            return g
        keys = _array(msg, 0, np.int64, 1, "the keys").array()
        grads = _array(msg, 1, np.float32, 2, "the gradients").array()
        t.shard._check_rows(keys, grads, "the gradient")
        return merge_rows(keys, grads)

    def _push(self, ident: bytes, msg: Message, t: _Table) -> None:
        grad = self._grad(msg, t)
        if t.spec.mode == "geo":
            raise RequestError(f"table {t.spec.name!r} is in geo mode: workers send deltas")
        if t.spec.mode == "async":
            self._apply(t, [grad])
            self._reply(ident, msg)
            return
        if msg.step < t.applied:
            raise RequestError(
                f"table {t.spec.name!r}: trainer {msg.trainer} pushed step {msg.step}, "
                f"but step {t.applied - 1} is already applied"
            )
        step = t.pending.setdefault(msg.step, {})
        if msg.trainer in step or not 0 <= msg.trainer < self.role.trainers_num:
            raise RequestError(
                f"table {t.spec.name!r}: trainer {msg.trainer} pushed step {msg.step} twice "
                f"(or is not one of the {self.role.trainers_num} trainers)"
            )
        step[msg.trainer] = grad
        self._reply(ident, msg)
        while len(t.pending.get(t.applied, ())) == self.role.trainers_num:
            self._apply(t, list(t.pending.pop(t.applied).values()))
            t.applied += 1
        if t.waiting:
            ready = [w for w in t.waiting if w[1].step <= t.applied]
            t.waiting = [w for w in t.waiting if w[1].step > t.applied]
            for wid, wmsg in ready:
                try:
                    self._pull(wid, wmsg, t)
                except (RequestError, TableError) as exc:
                    self._error(wid, wmsg, f"{type(exc).__name__}: {exc}")

    def _apply(self, t: _Table, grads: list[Any]) -> None:
        """Apply the mean of `grads` (one per trainer in sync mode, one in async mode)."""
        n = len(grads)
        if isinstance(t.shard, DenseShard):
            if n == 1:
                t.shard.apply(list(grads[0].flat_parts()), grads[0].size)
                return
            acc = grads[0].array().astype(np.float32, copy=True).reshape(-1)
            for g in grads[1:]:
                for off, part in g.flat_parts():
                    acc[off : off + part.size] += part
            acc *= np.float32(1.0 / n)
            t.shard.apply([(0, acc)], acc.size)
            return
        if n == 1:
            keys, rows = grads[0]
        else:
            keys, rows = merge_rows(
                np.concatenate([k for k, _ in grads]), np.concatenate([r for _, r in grads])
            )
            rows = rows * np.float32(1.0 / n)
        t.shard.apply(keys, rows)

    def _delta(self, msg: Message) -> None:
        scale = 1.0 / self.role.trainers_num
        if msg.op == Op.DELTA_DENSE:
            t = self._table(msg, "dense")
            d = _array(msg, 0, np.float32, 1, "the delta")
            assert isinstance(t.shard, DenseShard)
            t.shard.add(list(d.flat_parts()), d.size, scale)
        else:
            t = self._table(msg, "sparse")
            keys = _array(msg, 0, np.int64, 1, "the keys").array()
            delta = _array(msg, 1, np.float32, 2, "the delta").array()
            assert isinstance(t.shard, SparseShard)
            t.shard._check_rows(keys, delta, "the delta")
            t.shard.add(*merge_rows(keys, delta), scale)

    def _directory(self, msg: Message) -> Path:
        """The absolute directory of a SAVE or LOAD request: {"dir": "/abs/path"}."""
        what = Op(msg.op).name
        try:
            raw = json.loads(msg.text)["dir"]
        except (ValueError, KeyError, TypeError):
            raise RequestError(
                f'{what} needs {{"dir": "/an/absolute/path"}} as its text, got {msg.text[:200]!r}'
            ) from None
        if not isinstance(raw, str) or "\0" in raw or not Path(raw).is_absolute():
            raise RequestError(
                f"{what} directory {raw!r} is not an absolute path; a server resolves no "
                "relative paths (its working directory is not the trainer's): send an "
                "absolute one (ps.save/ps.load do)"
            )
        return Path(raw)

    def _save(self, ident: bytes, msg: Message) -> None:
        root = self._directory(msg)
        for name, t in self.tables.items():
            meta, arrays = t.shard.state()
            checkpoint.write_shard(root, self.index, name, meta, arrays)
        specs = [json.loads(t.spec.to_json()) for t in self.tables.values()]
        self._reply(ident, msg, text=json.dumps(specs))

    def _load(self, ident: bytes, msg: Message) -> None:
        root = self._directory(msg)
        loaded = {name: checkpoint.read_shard(root, self.index, name) for name in self.tables}
        for name, (meta, arrays) in loaded.items():  # all checked before any table changes
            self.tables[name].shard.check_state(meta, arrays)
        for name, (meta, arrays) in loaded.items():
            self.tables[name].shard.load_state(meta, arrays)
        self._reply(ident, msg)


def serve(role: PsRole) -> None:
    Server(role).serve()
