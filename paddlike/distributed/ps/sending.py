"""Sending on a ZeroMQ socket without waiting past a deadline.

A DEALER with no peer (its connection refused at the handshake, or not made yet) blocks
in `send` until a peer appears: for ever when none will. Every send of the parameter
server's clients goes through `send_by`, which tries without blocking first (the usual
case costs one flag) and otherwise waits, up to the deadline, for the socket to become
writable while watching its handshake monitor, so that a refusal is raised at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import zmq

_NOBLOCK, _SNDMORE = int(zmq.NOBLOCK), int(zmq.SNDMORE)


def _ms(deadline: float) -> int:
    return max(0, int((deadline - time.monotonic()) * 1000) + 1)


def send_by(
    sock: zmq.Socket,
    frames: Sequence[object],
    deadline: float,
    monitor: zmq.Socket | None = None,
    on_event: Callable[[], None] = lambda: None,
) -> bool:
    """Send `frames` as one message; False when the socket could not take it by `deadline`.

    While waiting, `on_event()` is called whenever `monitor` (the socket's handshake
    monitor) has events; it raises to end the wait (a refused handshake). Once the first
    frame is queued the rest follow without a wait: ZeroMQ takes a message whole."""
    last = len(frames) - 1
    while True:
        try:
            sock.send(frames[0], _NOBLOCK | (_SNDMORE if last else 0), copy=False)
            break
        except zmq.Again:
            pass
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLOUT)
        if monitor is not None:
            poller.register(monitor, zmq.POLLIN)
        ready = dict(poller.poll(_ms(deadline)))
        if monitor is not None and monitor in ready:
            on_event()
        if not ready and time.monotonic() >= deadline:
            return False
    for i in range(1, last + 1):
        sock.send(frames[i], _SNDMORE if i < last else 0, copy=False)
    return True
