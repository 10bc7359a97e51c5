"""A worker's connection to every parameter server: DEALER sockets, deadlines, errors.

`call(requests)` sends one request to each named server at once, then waits for all
the replies until one deadline; a server that does not answer in time is named, with
its endpoint, in the `PsTimeoutError`. Replies are matched by request id, so a late
answer to an earlier, timed-out request is dropped rather than mistaken for a new one.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

import zmq

from paddlike.distributed.ps import wire
from paddlike.distributed.ps.wire import Message, Op, Status


class PsError(RuntimeError):
    """A parameter server answered with an error; the text names the server and the cause."""


class PsTimeoutError(PsError, TimeoutError):
    """A parameter server did not answer before the deadline."""


class Client:
    def __init__(self, endpoints: Sequence[str], trainer_id: int, timeout: float) -> None:
        self.endpoints = tuple(endpoints)
        self.trainer_id = trainer_id
        self.timeout = timeout
        self._ids = itertools.count(1)
        self.ctx = zmq.Context()
        self.socks: list[zmq.Socket] = []
        for ep in self.endpoints:
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 0)
            s.setsockopt(zmq.RCVHWM, 0)
            s.connect(f"tcp://{ep}")
            self.socks.append(s)
        self._index = {s: i for i, s in enumerate(self.socks)}

    def close(self) -> None:
        for s in self.socks:
            s.close(linger=0)
        self.ctx.term()

    def call(
        self, requests: Sequence[tuple[int, Message]], timeout: float | None = None
    ) -> list[Message]:
        """Send every (server, request), return the replies in the same order."""
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        expected: dict[int, tuple[int, int]] = {}  # server -> (req_id, position)
        for pos, (server, msg) in enumerate(requests):
            if server in expected:
                raise ValueError("one request per server per call")
            msg.req_id = next(self._ids) & 0xFFFFFFFF
            msg.trainer = self.trainer_id
            expected[server] = (msg.req_id, pos)
            self.socks[server].send_multipart(wire.encode(msg), copy=False)
        replies: list[Message | None] = [None] * len(requests)
        poller = zmq.Poller()
        for server in expected:
            poller.register(self.socks[server], zmq.POLLIN)
        while expected:
            left = deadline - time.monotonic()
            if left <= 0:
                server = min(expected)
                op = Op(requests[expected[server][1]][1].op).name
                raise PsTimeoutError(
                    f"parameter server {server} at {self.endpoints[server]} did not answer "
                    f"{op} within {limit:g} s (is it running? see its serverlog; in sync mode "
                    "a pull also waits for every trainer's push)"
                )
            for sock, _ in poller.poll(max(1, int(left * 1000))):
                server = self._index[sock]
                frames = sock.recv_multipart(copy=False)
                try:
                    rep = wire.decode(frames)
                except wire.WireError as exc:
                    raise PsError(
                        f"parameter server {server} at {self.endpoints[server]} sent a "
                        f"malformed reply: {exc}"
                    ) from None
                want = expected.get(server)
                if want is None or rep.req_id != want[0]:
                    continue  # the answer to an earlier request that timed out
                del expected[server]
                poller.unregister(sock)
                if rep.status != Status.OK:
                    raise PsError(
                        f"parameter server {server} at {self.endpoints[server]}: {rep.text}"
                    )
                replies[want[1]] = rep
        return replies  # type: ignore[return-value]
