"""A worker's connection to every parameter server: DEALER sockets, deadlines, errors.

`call(requests)` sends one request to each named server at once, then waits for all
the replies. Two deadlines, because waiting for a slow trainer and talking to a dead
server are different things:

- the wait deadline (`wait_timeout`, default PADDLIKE_TIMEOUT or 300 s): how long a
  request may wait for the other trainers — a sync-mode pull of the next step waits
  until every trainer pushed the current one, a barrier until all arrived;
- the liveness deadline (`request_timeout`, at most 60 s by default): a server that has
  not answered for a moment gets a PING, which it answers at once even while it holds
  a pull back; no answer to the PING within `request_timeout` means the server is dead
  or unreachable, named with its endpoint in the `PsTimeoutError`.

Each socket carries this job's credentials (`ps.auth`: the job token from
PADDLIKE_JOB_TOKEN, proven once per connection). A server that refuses them makes the
next `call` raise `PsAuthError` naming that server, as soon as the refusal arrives.

Sending has a deadline too (`ps.sending`): a socket whose handshake was refused has no
peer, and a plain send would block in ZeroMQ for ever; here it waits at most to the
call's deadline (the liveness deadline when the call checks liveness) and raises
`PsAuthError` as soon as the refusal is reported. (Not ZMQ_IMMEDIATE: with it, a reply
that arrives just before the server closes its end is dropped with the connection.)

Replies are matched by request id, so a late answer to an earlier, timed-out request
is dropped rather than mistaken for a new one.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import zmq

from paddlike.distributed.ps import auth, sending, wire
from paddlike.distributed.ps import endpoints as addresses
from paddlike.distributed.ps.wire import Message, Op, Status

PROBE_AFTER = 1.0  # seconds of silence from a server before it gets a liveness PING


def _address(endpoint: str) -> str:
    """The server's address resolved as the server resolves it to bind (ps.endpoints); a
    name that does not resolve yet is left to ZeroMQ, which retries it as it reconnects."""
    try:
        return addresses.tcp_address(endpoint)
    except (OSError, ValueError):
        return f"tcp://{endpoint}"


class PsError(RuntimeError):
    """A parameter server answered with an error; the text names the server and the cause."""


class PsTimeoutError(PsError, TimeoutError):
    """A parameter server did not answer before the deadline."""


class PsAuthError(PsError):
    """A parameter server refused this process: wrong or missing job token, or not a job host."""


@dataclass
class _Pending:
    """One server's outstanding request, and the liveness PING it may have been sent."""

    req_id: int
    position: int
    heard: float  # when the server last showed it is alive (or the request went out)
    probe_id: int = 0  # 0: no PING outstanding
    probe_sent: float = 0.0
    answered_probe: bool = False  # the server answered a PING while holding the request


class Client:
    def __init__(
        self,
        endpoints: Sequence[str],
        trainer_id: int,
        wait_timeout: float,
        request_timeout: float | None = None,
        policy: auth.Policy | None = None,
    ) -> None:
        """`policy` gives the job token to prove (default: PADDLIKE_JOB_TOKEN of os.environ)."""
        self.endpoints = tuple(endpoints)
        self.trainer_id = trainer_id
        self.wait_timeout = float(wait_timeout)
        self.request_timeout = float(
            min(wait_timeout, 60.0) if request_timeout is None else request_timeout
        )
        self._ids = itertools.count(1)
        self.ctx = zmq.Context()
        self.policy = policy if policy is not None else auth.Policy.from_env(os.environ)
        self.socks: list[zmq.Socket] = []
        self.watches: list[auth.HandshakeWatch] = []
        for i, ep in enumerate(self.endpoints):
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDTIMEO, max(1, int(self.request_timeout * 1000)))
            s.setsockopt(zmq.SNDHWM, 0)
            s.setsockopt(zmq.RCVHWM, 0)
            auth.secure_client(s, self.policy)
            peer = f"parameter server {i} at {ep}"
            self.watches.append(auth.HandshakeWatch(s, peer, self.policy))
            address = _address(ep)
            s.setsockopt(zmq.IPV6, int(addresses.is_ipv6_address(address)))
            s.connect(address)
            self.socks.append(s)
        self._index = {s: i for i, s in enumerate(self.socks)}
        self._watch_index = {w.socket: i for i, w in enumerate(self.watches)}

    def close(self) -> None:
        for w in self.watches:
            w.close()
        for s in self.socks:
            s.close(linger=0)
        self.ctx.term()

    def _send(self, server: int, msg: Message, deadline: float) -> int | None:
        """Send `msg` to `server`; its request id, or None when no connection to the server
        took it by `deadline`. A refused handshake raises PsAuthError at once."""
        msg.req_id = next(self._ids) & 0xFFFFFFFF
        msg.trainer = self.trainer_id
        watch = self.watches[server]
        if sending.send_by(
            self.socks[server], wire.encode(msg), deadline, watch.socket,
            lambda: self._check_handshake(server),
        ):  # fmt: skip
            return msg.req_id
        return None

    def _check_handshake(self, server: int) -> None:
        try:
            self.watches[server].check()
        except auth.AuthError as exc:
            raise PsAuthError(str(exc)) from None

    def call(
        self,
        requests: Sequence[tuple[int, Message]],
        timeout: float | None = None,
        probe: bool = True,
    ) -> list[Message]:
        """Send every (server, request), return the replies in the same order. `timeout`
        overrides the wait deadline for this call; liveness is checked all along, unless
        `probe` is False (the first contact, when a server may still be starting)."""
        limit = self.wait_timeout if timeout is None else timeout
        now = time.monotonic()
        deadline = now + limit
        probe_after = min(PROBE_AFTER, self.request_timeout / 4)
        expected: dict[int, _Pending] = {}
        # a server reached before answers a PING at once: a connection it does not take
        # within the liveness deadline is as dead as one that does not answer
        send_limit = min(limit, self.request_timeout) if probe else limit
        for pos, (server, msg) in enumerate(requests):
            if server in expected:
                raise ValueError("one request per server per call")
            req_id = self._send(server, msg, time.monotonic() + send_limit)
            if req_id is None:
                raise PsTimeoutError(
                    f"parameter server {server} at {self.endpoints[server]} did not accept a "
                    f"connection for {Op(msg.op).name} within {send_limit:g} s (is it "
                    "running? see its serverlog)"
                )
            expected[server] = _Pending(req_id, pos, now)
        replies: list[Message | None] = [None] * len(requests)
        # Error replies are raised only once every server has answered: a caller that
        # cleans up after an error (a failed save removes its temporary directory) must
        # not race the servers still working on the same request.
        errors: list[str] = []
        poller = zmq.Poller()
        for server in expected:
            poller.register(self.socks[server], zmq.POLLIN)
            poller.register(self.watches[server].socket, zmq.POLLIN)
        while expected:
            now = time.monotonic()
            wake = deadline
            for server, p in expected.items():
                if p.probe_id and now - p.probe_sent >= self.request_timeout:
                    op = Op(requests[p.position][1].op).name
                    raise PsTimeoutError(
                        f"parameter server {server} at {self.endpoints[server]} did not answer "
                        f"{op} nor a liveness check within {self.request_timeout:g} s (is it "
                        "running? see its serverlog)"
                    )
                if not probe:
                    continue
                if not p.probe_id and now - p.heard >= probe_after:
                    # not sent (no connection): no answer comes, as from a dead server
                    ping = Message(Op.PING)
                    self._send(server, ping, now)
                    p.probe_id, p.probe_sent = ping.req_id, now
                wake = min(wake, p.probe_sent + self.request_timeout if p.probe_id
                           else p.heard + probe_after)  # fmt: skip
            if now >= deadline:
                server, p = min(expected.items())
                op = Op(requests[p.position][1].op).name
                where = f"parameter server {server} at {self.endpoints[server]}"
                if not p.answered_probe:
                    raise PsTimeoutError(
                        f"{where} did not answer {op} within {limit:g} s (is it running? see "
                        "its serverlog)"
                    )
                raise PsTimeoutError(
                    f"{where} is alive but did not answer {op} within {limit:g} s: in sync "
                    "mode a pull waits for every trainer's push of the step, a barrier for "
                    "every trainer; one is slower than that or stuck (raise "
                    "init_worker(timeout=) or PADDLIKE_TIMEOUT)"
                )
            for sock, _ in poller.poll(max(1, int((wake - now) * 1000) + 1)):
                watched = self._watch_index.get(sock)
                if watched is None:
                    self._receive(sock, expected, replies, errors)
                    continue
                self._check_handshake(watched)
        if errors:
            raise PsError(errors[0])
        return replies  # type: ignore[return-value]

    def _receive(
        self,
        sock: zmq.Socket,
        expected: dict[int, _Pending],
        replies: list[Message | None],
        errors: list[str],
    ) -> None:
        server = self._index[sock]
        frames = sock.recv_multipart(copy=False)
        try:
            rep = wire.decode(frames)
        except wire.WireError as exc:
            raise PsError(
                f"parameter server {server} at {self.endpoints[server]} sent a "
                f"malformed reply: {exc}"
            ) from None
        p = expected.get(server)
        if p is None:
            return  # the answer to an earlier request that timed out
        if rep.req_id == p.probe_id:
            p.probe_id, p.heard = 0, time.monotonic()  # alive: the request is just waiting
            p.answered_probe = True
            return
        if rep.req_id != p.req_id:
            return
        del expected[server]
        if rep.status != Status.OK:
            errors.append(f"parameter server {server} at {self.endpoints[server]}: {rep.text}")
            return
        replies[p.position] = rep
