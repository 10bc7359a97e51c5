"""The channel between two pipeline stages: forward batches one way, their answers back.

`StageSender` (a CPU trainer, or a heter trainer feeding a later stage) connects a DEALER
to one member of the next stage; `StageReceiver` (a heter trainer) binds a ROUTER that
several senders feed (fan-in). Every batch is tagged with its sender's index and a batch
id, and is answered by exactly one backward packet sent to that sender.

What a user notices:
- Bounded in-flight batches: a sender with `max_in_flight` unanswered batches blocks in
  `send_forward` until one is answered, up to the deadline; then a StageError names the
  receiver and the oldest unanswered batch.
- Deadlines everywhere (PADDLIKE_TIMEOUT, else 300 s), and errors naming the peer's
  endpoint and index.
- A peer that dies is noticed at once, not at the deadline: a killed process closes its
  TCP connection, which the socket monitor reports. The receiver learns which sender it
  was from the connection's file descriptor (ZMQ_SRCFD of the sender's packets), so the
  error names the trainer. ZMTP heartbeats close a connection whose peer went silent
  (a cut network) within `heartbeat_timeout`, which then reads the same way.
- A clean end: `end()` waits for every answer, sends END and waits for the receiver's
  acknowledgement; `recv_forward` returns None once every expected sender has ended.

Sockets are created in one place, `open_socket`, which secures them with `ps.auth` (the
job token and hosts): a peer that is refused is reported as an `auth.AuthError` at once.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import zmq

from paddlike.distributed.ps import auth, endpoints, sending, stage_wire
from paddlike.distributed.ps.stage import stage_label
from paddlike.distributed.ps.stage_wire import Kind, Packet, StageWireError

DEFAULT_MAX_IN_FLIGHT = 8
HEARTBEAT_IVL_MS = 1000
MAX_HEARTBEAT_MS = 655_000  # libzmq's ceiling for HEARTBEAT_TTL
LINGER_MS = 2000
_REFUSED = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
# Plain ints: enum arithmetic is slow on the hot path.
_EVENTS, _POLLIN, _RCVMORE = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.RCVMORE)
_SNDMORE = int(zmq.SNDMORE)
_MONITOR_EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | _REFUSED


class StageError(RuntimeError):
    """A stage channel failed: a peer died, refused us, or missed the deadline (text says who)."""


class StageTimeoutError(StageError, TimeoutError):
    """A stage channel wait ran past its deadline."""


class ForwardBatch(NamedTuple):
    """One received forward batch: who sent it, its id, and its array (or tuple of arrays)."""

    trainer_id: int
    batch_id: int
    activations: np.ndarray | tuple[np.ndarray, ...]


def open_socket(
    ctx: zmq.Context, kind: int, policy: auth.Policy | None, name: str
) -> tuple[zmq.Socket, auth.Gatekeeper | None]:
    """Every socket of the channel is made here, secured with `policy` (ps.auth) before it
    binds or connects: the ROUTER serves only the job's peers, the DEALER proves the job
    token. None: no authentication (both ends must agree). Returns (socket, gate to close)."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    if policy is None:
        return sock, None
    if kind == zmq.ROUTER:
        return sock, auth.secure_server(sock, policy, name)
    auth.secure_client(sock, policy)
    return sock, None


def _heartbeats(sock: zmq.Socket, timeout: float) -> None:
    sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    ms = min(MAX_HEARTBEAT_MS, max(HEARTBEAT_IVL_MS, int(timeout * 1000)))
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, ms)
    sock.setsockopt(zmq.HEARTBEAT_TTL, ms)


def _tcp(endpoint: str) -> str:
    host = endpoints.host(endpoint)
    try:
        return endpoints.tcp_address(endpoint)
    except OSError as exc:
        raise StageError(
            f"stage endpoint {endpoint!r}: host {host!r} does not resolve ({exc})"
        ) from None


def _monitor_events(monitor: zmq.Socket) -> list[tuple[int, int]]:
    """(event, value) for every monitor event already queued."""
    events = []
    while monitor.getsockopt(_EVENTS) & _POLLIN:  # cheaper than a zmq.Again per call
        frames = monitor.recv_multipart(zmq.NOBLOCK)
        event, value = (
            int.from_bytes(frames[0][:2], "little"),
            int.from_bytes(frames[0][2:6], "little"),
        )
        events.append((event, value))
    return events


def _recv(sock: zmq.Socket, copied: int) -> list:
    """One message's frames: the first `copied` as bytes, the rest as zero-copy zmq.Frames
    (pyzmq's recv_multipart makes every frame one or the other; a Frame costs more than
    copying a few bytes, a copy costs more than a Frame for an array)."""
    frames: list = []
    while True:
        if len(frames) < copied:
            frames.append(sock.recv(zmq.NOBLOCK))
            if not sock.getsockopt(_RCVMORE):
                return frames
        else:
            frame = sock.recv(zmq.NOBLOCK, copy=False)
            frames.append(frame)
            if not frame.more:
                return frames


def _send_frames(sock: zmq.Socket, frames: list) -> None:
    """One message, every frame without a copy (pyzmq still copies the small ones). The
    same as `send_multipart(frames, copy=False)` less its per-frame type checks and flag
    arithmetic on enums, which cost microseconds per batch on the hot path."""
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        sock.send(frame, _SNDMORE if i < last else 0, copy=False)


def _source_fd(frame: zmq.Frame) -> int:
    """The connection a frame came on; -1 where libzmq no longer offers ZMQ_SRCFD (it is
    deprecated): a dead sender is then named only at the deadline, as one that stopped."""
    try:
        return int(frame.get(zmq.SRCFD))
    except (zmq.ZMQError, AttributeError, ValueError):
        return -1


def _ms(deadline: float) -> int:
    return max(0, int((deadline - time.monotonic()) * 1000) + 1)


class StageSender:
    """One sender's connection to its member of the next stage."""

    def __init__(
        self,
        peer: str,
        *,
        stage: int,
        index: int,
        peer_index: int = 0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        timeout: float = 300.0,
        heartbeat_timeout: float | None = None,
        policy: auth.Policy | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight={max_in_flight}: at least 1 batch must be in flight")
        address = _tcp(peer)  # before any socket exists: nothing to undo if it fails
        self.peer, self.stage, self.index = peer, stage, index
        self.peer_name = f"{stage_label(stage + 1, peer_index)} at {peer}"
        self.me = stage_label(stage, index)
        self.max_in_flight, self.timeout = max_in_flight, float(timeout)
        self.unanswered: dict[int, float] = {}  # batch id -> when sent, oldest first
        self._held: dict[int, list[np.ndarray]] = {}  # sent with copy=False: kept alive
        self.answered: dict[int, np.ndarray | tuple[np.ndarray, ...]] = {}
        self.connected = False
        self.ended = False
        self._failure: str | None = None  # the receiver refused us
        self._lost = False  # the connection closed before the end of the stream
        self.ctx = zmq.Context()
        self.policy = policy
        self.sock, _ = open_socket(self.ctx, zmq.DEALER, policy, self.me)
        self.sock.setsockopt(zmq.IPV6, int(endpoints.is_ipv6_address(address)))
        self.sock.setsockopt(zmq.ROUTING_ID, f"s{stage}:{index}".encode())
        self.heartbeat_timeout = heartbeat_timeout or min(self.timeout, 30.0)
        _heartbeats(self.sock, self.heartbeat_timeout)
        self.monitor = self.sock.get_monitor_socket(_MONITOR_EVENTS)
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self.poller.register(self.monitor, zmq.POLLIN)
        self.sock.connect(address)
        self._send(Packet(Kind.HELLO, stage, index), time.monotonic() + self.timeout, self.timeout)

    # --- the public operations ---------------------------------------------------
    def send_forward(
        self, activations: object, batch_id: int, timeout: float | None = None
    ) -> None:
        """Send one batch; blocks while `max_in_flight` batches are unanswered (deadline).

        The arrays are handed to ZeroMQ without a copy: do not write into them until
        `recv_backward(batch_id)` has returned (the answer proves they were received)."""
        self._check_open("send_forward")
        arrays, sequence = stage_wire.as_arrays(activations, "send_forward: activations")
        batch_id = int(batch_id)
        if batch_id in self.unanswered or batch_id in self.answered:
            raise ValueError(
                f"send_forward: batch {batch_id} is already in flight or its answer is not "
                "collected yet; give every batch its own id"
            )
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while len(self.unanswered) >= self.max_in_flight:
            self._raise_failure()
            if not self._pump(deadline):
                oldest = next(iter(self.unanswered))
                raise StageTimeoutError(
                    f"{self.me}: {self.peer_name} has not answered batch {oldest} (and "
                    f"{len(self.unanswered) - 1} later ones) within {limit:g} s; "
                    f"send_forward blocks at max_in_flight={self.max_in_flight} unanswered "
                    "batches — is the heter trainer stuck? see its heterlog"
                )
        packet = Packet(Kind.FORWARD, self.stage, self.index, batch_id, arrays, sequence)
        self._send(packet, deadline, limit)
        self.unanswered[batch_id] = time.monotonic()
        self._held[batch_id] = arrays

    def recv_backward(
        self, batch_id: int, timeout: float | None = None
    ) -> np.ndarray | tuple[np.ndarray, ...]:
        """The answer to forward batch `batch_id` (read-only arrays), waiting up to the deadline."""
        batch_id = int(batch_id)
        if batch_id not in self.answered and batch_id not in self.unanswered:
            raise ValueError(
                f"recv_backward: batch {batch_id} was never sent with send_forward, or its "
                "answer was already received"
            )
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        never = " and never accepted a connection (is it running? see its heterlog)"
        while batch_id not in self.answered:
            self._raise_failure()
            if not self._pump(deadline):
                raise StageTimeoutError(
                    f"{self.me}: {self.peer_name} did not answer batch {batch_id} within "
                    f"{limit:g} s{'' if self.connected else never}"
                )
        return self.answered.pop(batch_id)

    def end(self, timeout: float | None = None) -> None:
        """Wait for every answer, tell the receiver no more batches come, wait for its ack."""
        if self.ended:
            return
        self._check_open("end_forward")
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while self.unanswered:
            self._raise_failure()
            if not self._pump(deadline):
                raise StageTimeoutError(
                    f"{self.me}: ending the stream, {self.peer_name} did not answer batches "
                    f"{list(self.unanswered)} within {limit:g} s"
                )
        self._send(Packet(Kind.END, self.stage, self.index), deadline, limit)
        while not self.ended:
            self._raise_failure()
            if not self._pump(deadline):
                raise StageTimeoutError(
                    f"{self.me}: {self.peer_name} did not acknowledge the end of the stream "
                    f"within {limit:g} s"
                )
        self.close()

    def close(self) -> None:
        """Close the socket; batches still queued are dropped unless the stream ended cleanly
        (a broken stream must not hold the process's exit for the linger period)."""
        if self.sock.closed:
            return
        self.sock.disable_monitor()
        self.monitor.close(linger=0)
        self.sock.close(linger=None if self.ended else 0)
        self.ctx.term()

    # --- inside --------------------------------------------------------------------
    def _check_open(self, what: str) -> None:
        if self.ended or self.sock.closed:
            raise StageError(f"{what}: {self.me} already ended its stream to {self.peer_name}")
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise StageError(self._failure)
        if self._lost:
            owed = f" with batches {list(self.unanswered)} unanswered" if self.unanswered else ""
            raise StageError(
                f"{self.me}: {self.peer_name} closed the connection{owed}: it exited, or "
                f"was silent for {self.heartbeat_timeout:g} s (hung, or the network failed) — "
                "see its heterlog for why"
            )

    def _send(self, packet: Packet, deadline: float, limit: float) -> None:
        """Send, waiting for a connection at most to `deadline` (a refusal raises at once)."""
        if not sending.send_by(self.sock, stage_wire.encode(packet), deadline, self.monitor,
                               self._events):  # fmt: skip
            self._raise_failure()
            raise StageTimeoutError(
                f"{self.me}: {self.peer_name} did not accept a connection within {limit:g} s "
                "(is it running? see its heterlog)"
            )

    def _pump(self, deadline: float) -> bool:
        """Handle what arrives until something did or the deadline; False at the deadline."""
        ready = dict(self.poller.poll(_ms(deadline)))
        if not ready:
            return time.monotonic() < deadline
        if self.sock in ready:
            self._take(ready)
        if self.monitor in ready:
            self._events()
        return True  # a failure is raised by the caller, once what it waits for is missing

    def _events(self) -> None:
        """Note the connection events queued on the monitor; a refused handshake raises."""
        for event, value in _monitor_events(self.monitor):
            if event & _REFUSED and self.policy is not None:
                why = auth.refusal_message(self.peer_name, event, value, self.policy)
                raise auth.AuthError(why)
            if event == zmq.EVENT_CONNECTED:
                self.connected = True
            elif event == zmq.EVENT_DISCONNECTED and not self.ended:
                self._lost = True

    def _take(self, ready: dict) -> None:
        """Handle the packet the poll saw; every queued one when connection events are
        pending too (they must come after the packets). Another packet wakes the next
        poll: asking ZMQ_EVENTS before and after each packet costs a syscall each."""
        self._handle(_recv(self.sock, copied=1))  # the head is small: copying it is cheaper
        if self.monitor in ready:
            while self.sock.getsockopt(_EVENTS) & _POLLIN:
                self._handle(_recv(self.sock, copied=1))

    def _handle(self, frames: list) -> None:
        try:
            p = stage_wire.decode(frames)
        except StageWireError as exc:
            raise StageError(
                f"{self.me}: {self.peer_name} sent a malformed packet: {exc}"
            ) from None
        if p.kind == Kind.BACKWARD:
            if self.unanswered.pop(p.batch_id, None) is None:
                raise StageError(
                    f"{self.me}: {self.peer_name} answered batch {p.batch_id}, which is not in "
                    "flight (answered twice?)"
                )
            self._held.pop(p.batch_id, None)
            self.answered[p.batch_id] = p.payload()
        elif p.kind == Kind.END_ACK:
            self.ended = True
        elif p.kind == Kind.ERROR:
            self._failure = f"{self.me}: {self.peer_name} refused this sender: {p.text}"
        else:
            raise StageError(f"{self.me}: unexpected {Kind(p.kind).name} from {self.peer_name}")


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
        address = _tcp(endpoint)
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
        _heartbeats(self.sock, self.heartbeat_timeout)
        self.monitor = self.sock.get_monitor_socket(_MONITOR_EVENTS)
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
            _send_frames(self.sock, [ident, *stage_wire.encode(packet)])
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
        ready = dict(self.poller.poll(_ms(deadline)))
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
        for event, fd in _monitor_events(self.monitor):
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
        self._handle(_recv(self.sock, copied=1))  # the identity as bytes, the head a Frame
        if self.monitor in ready:
            while self.sock.getsockopt(_EVENTS) & _POLLIN:
                self._handle(_recv(self.sock, copied=1))

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
        peer.fd = _source_fd(frames[1])
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
