"""A stage channel's sending end (stage_channel.py): a DEALER to one member of the next
stage, at most `max_in_flight` unanswered batches, END and its acknowledgement."""

from __future__ import annotations

import time

import numpy as np
import zmq

from paddlike.distributed.ps import auth, endpoints, sending, stage_wire
from paddlike.distributed.ps.stage import stage_label
from paddlike.distributed.ps.stage_sockets import (
    DEFAULT_MAX_IN_FLIGHT,
    EVENTS,
    MONITOR_EVENTS,
    POLLIN,
    REFUSED,
    StageError,
    StageTimeoutError,
    heartbeats,
    monitor_events,
    ms_left,
    open_socket,
    recv_frames,
    zmq_tcp,
)
from paddlike.distributed.ps.stage_wire import Kind, Packet, StageWireError


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
        address = zmq_tcp(peer)  # before any socket exists: nothing to undo if it fails
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
        heartbeats(self.sock, self.heartbeat_timeout)
        self.monitor = self.sock.get_monitor_socket(MONITOR_EVENTS)
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
        ready = dict(self.poller.poll(ms_left(deadline)))
        if not ready:
            return time.monotonic() < deadline
        if self.sock in ready:
            self._take(ready)
        if self.monitor in ready:
            self._events()
        return True  # a failure is raised by the caller, once what it waits for is missing

    def _events(self) -> None:
        """Note the connection events queued on the monitor; a refused handshake raises."""
        for event, value in monitor_events(self.monitor):
            if event & REFUSED and self.policy is not None:
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
        self._handle(recv_frames(self.sock, copied=1))  # the head is small: copying it is cheaper
        if self.monitor in ready:
            while self.sock.getsockopt(EVENTS) & POLLIN:
                self._handle(recv_frames(self.sock, copied=1))

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
