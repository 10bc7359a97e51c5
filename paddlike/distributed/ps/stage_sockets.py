"""The ZeroMQ sockets of a stage channel (stage_channel.py): each made and secured in one
place (`open_socket`), ZMTP heartbeats, the monitor's events, frames in and out without
copies, and the channel's errors. Shared by the sender's and the receiver's end."""

from __future__ import annotations

import time

import zmq

from paddlike.distributed.ps import auth, endpoints

DEFAULT_MAX_IN_FLIGHT = 8
HEARTBEAT_IVL_MS = 1000
MAX_HEARTBEAT_MS = 655_000  # libzmq's ceiling for HEARTBEAT_TTL
LINGER_MS = 2000
REFUSED = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
# Plain ints: enum arithmetic is slow on the hot path.
EVENTS, POLLIN, RCVMORE = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.RCVMORE)
SNDMORE = int(zmq.SNDMORE)
MONITOR_EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | REFUSED


class StageError(RuntimeError):
    """A stage channel failed: a peer died, refused us, or missed the deadline (text says who)."""


class StageTimeoutError(StageError, TimeoutError):
    """A stage channel wait ran past its deadline."""


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


def heartbeats(sock: zmq.Socket, timeout: float) -> None:
    sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    ms = min(MAX_HEARTBEAT_MS, max(HEARTBEAT_IVL_MS, int(timeout * 1000)))
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, ms)
    sock.setsockopt(zmq.HEARTBEAT_TTL, ms)


def zmq_tcp(endpoint: str) -> str:
    host = endpoints.host(endpoint)
    try:
        return endpoints.tcp_address(endpoint)
    except OSError as exc:
        raise StageError(
            f"stage endpoint {endpoint!r}: host {host!r} does not resolve ({exc})"
        ) from None


def monitor_events(monitor: zmq.Socket) -> list[tuple[int, int]]:
    """(event, value) for every monitor event already queued."""
    events = []
    while monitor.getsockopt(EVENTS) & POLLIN:  # cheaper than a zmq.Again per call
        frames = monitor.recv_multipart(zmq.NOBLOCK)
        event, value = (
            int.from_bytes(frames[0][:2], "little"),
            int.from_bytes(frames[0][2:6], "little"),
        )
        events.append((event, value))
    return events


def recv_frames(sock: zmq.Socket, copied: int) -> list:
    """One message's frames: the first `copied` as bytes, the rest as zero-copy zmq.Frames
    (pyzmq's recv_multipart makes every frame one or the other; a Frame costs more than
    copying a few bytes, a copy costs more than a Frame for an array)."""
    frames: list = []
    while True:
        if len(frames) < copied:
            frames.append(sock.recv(zmq.NOBLOCK))
            if not sock.getsockopt(RCVMORE):
                return frames
        else:
            frame = sock.recv(zmq.NOBLOCK, copy=False)
            frames.append(frame)
            if not frame.more:
                return frames


def send_frames(sock: zmq.Socket, frames: list) -> None:
    """One message, every frame without a copy (pyzmq still copies the small ones). The
    same as `send_multipart(frames, copy=False)` less its per-frame type checks and flag
    arithmetic on enums, which cost microseconds per batch on the hot path."""
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        sock.send(frame, SNDMORE if i < last else 0, copy=False)


def source_fd(frame: zmq.Frame) -> int:
    """The connection a frame came on; -1 where libzmq no longer offers ZMQ_SRCFD (it is
    deprecated): a dead sender is then named only at the deadline, as one that stopped."""
    try:
        return int(frame.get(zmq.SRCFD))
    except (zmq.ZMQError, AttributeError, ValueError):
        return -1


def ms_left(deadline: float) -> int:
    return max(0, int((deadline - time.monotonic()) * 1000) + 1)

