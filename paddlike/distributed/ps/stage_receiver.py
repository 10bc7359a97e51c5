"""A stage channel's receiving end (stage_channel.py): a ROUTER fed by several senders,
each batch answered to the sender it came from, a dead sender named from its connection."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import zmq

from paddlike.distributed.ps import auth, endpoints, stage_wire
from paddlike.distributed.ps.stage import stage_label
from paddlike.distributed.ps.stage_sockets import (
    EVENTS,
    MONITOR_EVENTS,
    POLLIN,
    StageError,
    StageTimeoutError,
    heartbeats,
    monitor_events,
    ms_left,
    open_socket,
    recv_frames,
    send_frames,
    source_fd,
    zmq_tcp,
)
from paddlike.distributed.ps.stage_wire import Kind, Packet, StageWireError


class ForwardBatch(NamedTuple):
    """One received forward batch: who sent it, its id, and its array (or tuple of arrays)."""

    trainer_id: int
    batch_id: int
    activations: np.ndarray | tuple[np.ndarray, ...]


@dataclass
class _Peer:
    """What the receiver knows of one expected sender."""

    index: int
    endpoint: str
    ident: bytes | None = None
    fd: int = -1  # the connection its packets came on (ZMQ_SRCFD)
    last_batch: int | None = None
    batches: int = 0
    ended: bool = False


class StageReceiver:
    """A heter trainer's bound end: forward batches from several senders, answers back."""

    def __init__(
        self,
        endpoint: str,
        *,
        stage: int,
        index: int,
        senders: dict[int, str],
        timeout: float = 300.0,
        heartbeat_timeout: float | None = None,
        policy: auth.Policy | None = None,
    ) -> None:
        address = zmq_tcp(endpoint)
        self.endpoint, self.stage, self.index = endpoint, stage, index
        self.me = f"{stage_label(stage, index)} at {endpoint}"
        self.timeout = float(timeout)
        self.peers = {i: _Peer(i, ep) for i, ep in senders.items()}
        self.queue: deque[ForwardBatch] = deque()
        self.unanswered: dict[tuple[int, int], bytes] = {}  # (sender, batch) -> identity
        self._failure: str | None = None
        self.ctx = zmq.Context()
        self.sock, self.gate = open_socket(self.ctx, zmq.ROUTER, policy, self.me)
        self.sock.setsockopt(zmq.IPV6, int(endpoints.is_ipv6_address(address)))
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # an answer to a gone sender raises
        self.heartbeat_timeout = heartbeat_timeout or min(self.timeout, 30.0)
        heartbeats(self.sock, self.heartbeat_timeout)
        self.monitor = self.sock.get_monitor_socket(MONITOR_EVENTS)
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self.poller.register(self.monitor, zmq.POLLIN)
        try:
            self.sock.bind(address)
        except zmq.ZMQError as exc:
            self.close()
            raise StageError(
                f"{self.me}: cannot bind {endpoint}: {exc} (is another process using the port?)"
            ) from None

    def _name(self, peer: _Peer) -> str:
        return f"{stage_label(self.stage - 1, peer.index)} ({peer.endpoint})"

    @property
    def done(self) -> bool:
        return all(p.ended for p in self.peers.values()) and not self.queue

    # --- the public operations ---------------------------------------------------
    def recv_forward(self, timeout: float | None = None) -> ForwardBatch | None:
        """The next forward batch from any sender, oldest first; None once all have ended."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self._raise_failure()
        while not self.queue:
            if all(p.ended for p in self.peers.values()):
                return None
            if not self._pump(deadline):
                raise StageTimeoutError(
                    f"{self.me} waited {self.timeout if timeout is None else timeout:g} s "
                    f"(PADDLIKE_TIMEOUT) for a batch: {self._who_owes()}"
                )
        return self.queue.popleft()

    def send_backward(self, grads: object, batch_id: int, trainer_id: int | None = None) -> None:
        """Answer batch `batch_id` of `trainer_id` (may be left out when only one sender has
        that batch unanswered). Arrays go out without a copy: don't write into them after."""
        self._drain_monitor()
        self._raise_failure()
        arrays, sequence = stage_wire.as_arrays(grads, "send_backward: grads")
        key = self._find(int(batch_id), trainer_id)
        ident = self.unanswered[key]
        packet = Packet(Kind.BACKWARD, self.stage, self.index, key[1], arrays, sequence)
        try:
            send_frames(self.sock, [ident, *stage_wire.encode(packet)])
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            self._failure = (
                f"{self.me}: cannot answer batch {key[1]} of {self._name(self.peers[key[0]])}: "
                "it is no longer connected (it exited? see its log)"
            )
            self._raise_failure()
        del self.unanswered[key]

    def close(self) -> None:
        """Close the socket; after a failure without waiting to deliver queued answers."""
        if self.sock.closed:
            return
        self.sock.disable_monitor()
        self.monitor.close(linger=0)
        self.sock.close(linger=0 if self._failure else None)
        if self.gate is not None:
            self.gate.close()
        self.ctx.term()

    # --- inside --------------------------------------------------------------------
    def _find(self, batch_id: int, trainer_id: int | None) -> tuple[int, int]:
        if trainer_id is not None:
            if (trainer_id, batch_id) not in self.unanswered:
                raise ValueError(
                    f"send_backward: no unanswered batch {batch_id} from trainer {trainer_id} "
                    f"(unanswered: {self._listing()})"
                )
            return trainer_id, batch_id
        keys = [k for k in self.unanswered if k[1] == batch_id]
        if len(keys) == 1:
            return keys[0]
        if not keys:
            raise ValueError(
                f"send_backward: no unanswered batch {batch_id} (unanswered: {self._listing()})"
            )
        raise ValueError(
            f"send_backward: batch {batch_id} is unanswered for trainers "
            f"{sorted(k[0] for k in keys)}; pass trainer_id= to say which"
        )

    def _listing(self) -> str:
        return ", ".join(f"trainer {t} batch {b}" for t, b in sorted(self.unanswered)) or "none"

    def _who_owes(self) -> str:
        parts = []
        for p in self.peers.values():
            if p.ended:
                continue
            if p.ident is None:
                parts.append(f"{self._name(p)} never connected (is it running? see its log)")
            else:
                parts.append(f"{self._name(p)} sent {p.batches} batches, the last {p.last_batch}")
        return "; ".join(parts)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise StageError(self._failure)

    def _pump(self, deadline: float) -> bool:
        ready = dict(self.poller.poll(ms_left(deadline)))
        if not ready:
            return time.monotonic() < deadline
        if self.sock in ready:
            self._take(ready)
        # Data first, then connection events: a sender's last packets are queued before
        # its disconnect is reported, and they tell which connection was whose.
        if self.monitor in ready:
            self._drain_monitor()
        self._raise_failure()
        return True

    def _drain_monitor(self) -> None:
        for event, fd in monitor_events(self.monitor):
            if event != zmq.EVENT_DISCONNECTED:
                continue
            for p in self.peers.values():
                if p.fd == fd and not p.ended:
                    p.fd = -1
                    owed = [b for (t, b) in self.unanswered if t == p.index] or "none"
                    self._failure = self._failure or (
                        f"{self.me}: {self._name(p)} disconnected without ending its stream "
                        f"(it sent {p.batches} batches, the last {p.last_batch}; unanswered "
                        f"here: {owed}): it exited, or was silent for "
                        f"{self.heartbeat_timeout:g} s (hung, or the network failed) — see its "
                        "log. A sender that finishes calls ps.end_forward()"
                    )

    def _take(self, ready: dict) -> None:
        """Handle the packet the poll saw; every queued one when connection events are
        pending too, so that a sender's last packets are counted before its disconnect."""
        self._handle(recv_frames(self.sock, copied=1))  # the identity as bytes, the head a Frame
        if self.monitor in ready:
            while self.sock.getsockopt(EVENTS) & POLLIN:
                self._handle(recv_frames(self.sock, copied=1))

    def _handle(self, frames: list) -> None:
        ident = frames[0]
        try:
            p = stage_wire.decode(frames[1:])
        except StageWireError as exc:
            self._refuse(ident, f"malformed packet: {exc}")
            return
        peer = self.peers.get(p.sender)
        if p.stage != self.stage - 1 or peer is None:
            expected = sorted(self.peers)
            self._refuse(
                ident,
                f"{self.me} receives from members {expected} of stage {self.stage - 1}, not "
                f"from {stage_label(p.stage, p.sender)} (do both sides see the same "
                "PADDLE_*_HETER_TRAINER_IP_PORT_LIST?)",
            )
            return
        peer.ident = ident
        peer.fd = source_fd(frames[1])
        if p.kind == Kind.HELLO:
            return
        if p.kind == Kind.FORWARD:
            peer.batches += 1
            peer.last_batch = p.batch_id
            self.unanswered[(p.sender, p.batch_id)] = ident
            self.queue.append(ForwardBatch(p.sender, p.batch_id, p.payload()))
        elif p.kind == Kind.END:
            peer.ended = True
            self.sock.send_multipart([ident, *stage_wire.encode(
                Packet(Kind.END_ACK, self.stage, self.index))])  # fmt: skip
        else:
            self._refuse(ident, f"unexpected {Kind(p.kind).name} packet")

    def _refuse(self, ident: bytes, why: str) -> None:
        """Tell the sender, and fail here too: a misconfigured job must not half-run."""
        self._failure = self._failure or f"{self.me}: refused a sender: {why}"
        packet = Packet(Kind.ERROR, self.stage, self.index, text=why)
        with contextlib.suppress(zmq.ZMQError):
            self.sock.send_multipart([ident, *stage_wire.encode(packet)])
