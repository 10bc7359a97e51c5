"""Who may talk to a job's ZeroMQ sockets: the job's hosts and, with a job token, its holders.

Any socket a job listens on (a parameter server's ROUTER, a heter stage's channel) calls
`secure_server(sock, policy, name)` before it binds; any socket that connects to one
calls `secure_client(sock, policy)` before it connects, and may watch its handshakes
with `HandshakeWatch` to turn a refusal into an `AuthError` at once instead of a
silent wait. The decision is ZeroMQ's own ZAP protocol, answered by pyzmq's
`ThreadAuthenticator` (one handler thread per context): once per connection, at the
handshake, so requests on an accepted connection cost nothing extra.

The rules, the same as the stores' (`paddlike.distributed.store`):

- address: loopback and the job's hosts (PADDLIKE_NODE_HOSTS, resolved) are accepted;
  anyone else is refused before any credentials are looked at;
- token: with a job token (PADDLIKE_JOB_TOKEN) a peer must prove it holds the token.

Mechanism. Every paddlike peer speaks ZeroMQ's PLAIN mechanism, user "paddlike", whose
password is HMAC-SHA256(token, "paddlike zap v1 plain") in hex ("-" without a
token): the token itself never crosses the wire and the data plane keeps its speed.
CURVE (keypairs derived from the token the same way) is available with
`Mechanism.CURVE`; it also encrypts every byte, which costs a factor of about 3.5 on
bulk arrays on this kind of machine (0.34 against 1.18 GB/s for 64 MiB round trips
over loopback), far outside the data plane's 5 % budget, so PLAIN is the default.
PLAIN's derived password can be replayed by someone who can read the job's traffic
on the wire; such a peer could read the (unencrypted) parameters anyway. A CURVE
policy without a token behaves as PLAIN (there is nothing to derive keys from).

A refused peer gets nothing: libzmq drops the connection before any message reaches
the socket. The handler logs one line per refused address (to stderr, i.e. the
process's log), never more, so a peer that keeps reconnecting cannot flood the log.
A peer speaking another mechanism (a raw socket with none) fails the handshake inside
libzmq before ZAP is asked: refused as well, but libzmq does not say from where.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import hmac
import ipaddress
import socket
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

from paddlike import contract

USERNAME = b"paddlike"
NO_TOKEN = b"-"  # the password of a peer without a token (libzmq refuses an empty one)
MAX_LOGGED = 4096  # distinct refused addresses logged; after that, one line says so
_KDF_LABEL = b"paddlike zap v1 "
_WATCHED = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
)
# A CURVE server that cannot decrypt a client's hello (another token) just hangs up, which
# the client sees as a handshake failed without detail, like a connection cut mid-way.
# One such failure is retried; this many in a row, with no success between, is a refusal.
NO_DETAIL_FAILURES = 3


class Mechanism(enum.Enum):
    PLAIN = "plain"  # authentication only: no per-message cost
    CURVE = "curve"  # authentication and encryption of every frame


class AuthError(ConnectionRefusedError):
    """A peer refused this process's handshake; the text names the peer and the likely cause."""


def _log(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"paddlike auth: {message}\n")
        sys.stderr.flush()


def _derive(token: bytes, purpose: bytes) -> bytes:
    return hmac.new(token, _KDF_LABEL + purpose, hashlib.sha256).digest()


def plain_password(token: bytes | None) -> bytes:
    """The PLAIN password of a job with `token` (NO_TOKEN without one)."""
    return _derive(token, b"plain").hex().encode() if token else NO_TOKEN


def curve_keypair(token: bytes, side: str) -> tuple[bytes, bytes]:
    """(public, secret) z85 CURVE keys of `side` ("server" or "client"), derived from `token`."""
    secret = z85.encode(_derive(token, b"curve " + side.encode()))
    return zmq.curve_public(secret), secret


def _canonical(addr: str) -> str:
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return addr
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(_canonical(addr)).is_loopback
    except ValueError:
        return False


def resolve_hosts(hosts: Iterable[str]) -> frozenset[str]:
    """Every address of every host name or address in `hosts` (unresolvable ones are logged)."""
    out: set[str] = set()
    for host in hosts:
        host = host.strip().strip("[]")
        if not host:
            continue
        out.add(_canonical(host))
        try:
            for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP):
                out.add(_canonical(str(info[4][0])))
        except OSError as exc:
            _log(f"job host {host!r} does not resolve ({exc}); peers from it will be refused")
    return frozenset(out)


@dataclass(frozen=True)
class Policy:
    """Whom a listening socket serves, and how a connecting socket proves itself.

    `allowed` holds the job's host addresses (loopback is always allowed); None accepts
    any address (the job's hosts are unknown). `token` None: no proof asked for.
    """

    token: bytes | None = field(default=None, repr=False)
    allowed: frozenset[str] | None = None
    mechanism: Mechanism = Mechanism.PLAIN

    @classmethod
    def create(
        cls,
        token: bytes | str | None,
        hosts: Iterable[str] | None,
        mechanism: Mechanism = Mechanism.PLAIN,
    ) -> Policy:
        """A policy for `hosts` (names or addresses, resolved now; None: any address)."""
        raw = token.encode() if isinstance(token, str) else token
        allowed = None if hosts is None else resolve_hosts(hosts)
        return cls(raw or None, allowed, mechanism)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str],
        extra_hosts: Iterable[str] = (),
        mechanism: Mechanism = Mechanism.PLAIN,
    ) -> Policy:
        """The job's policy: PADDLIKE_JOB_TOKEN, PADDLIKE_NODE_HOSTS plus `extra_hosts`.

        With neither node hosts nor extra hosts the job's hosts are unknown and any
        address is accepted (the token, if any, is still required)."""
        hosts = [h for h in environ.get(contract.NODE_HOSTS, "").split(",") if h.strip()]
        hosts += [h for h in extra_hosts if h.strip()]
        return cls.create(environ.get(contract.JOB_TOKEN) or None, hosts or None, mechanism)

    @property
    def uses_curve(self) -> bool:
        return self.mechanism is Mechanism.CURVE and self.token is not None

    def address_allowed(self, address: str) -> bool:
        if self.allowed is None or _is_loopback(address):
            return True
        return _canonical(address) in self.allowed

    def refusal(self, address: str, mechanism: bytes, credentials: list[bytes]) -> str | None:
        """Why a peer at `address` offering `credentials` is refused, or None to accept it."""
        if not self.address_allowed(address):
            return "its address is not one of the job's hosts"
        if mechanism == b"CURVE" and self.uses_curve:
            good = z85.decode(curve_keypair(self.token, "client")[0])  # type: ignore[arg-type]
            if len(credentials) == 1 and hmac.compare_digest(credentials[0], good):
                return None
            return "it did not prove the job token (unknown CURVE key)"
        if mechanism == b"PLAIN" and not self.uses_curve:
            if len(credentials) != 2 or credentials[0] != USERNAME:
                return "it is not a paddlike peer (unknown PLAIN user)"
            if self.token is None or hmac.compare_digest(
                credentials[1], plain_password(self.token)
            ):
                return None
            if credentials[1] == NO_TOKEN:
                return "it has no job token"
            return "it did not prove the job token (wrong token)"
        return f"it uses the {mechanism.decode(errors='replace')} mechanism, not this job's"


class _Gate(ThreadAuthenticator):
    """pyzmq's ZAP handler thread, answering with `Policy.refusal` and logging each address once."""

    def __init__(self, context: zmq.Context, policy: Policy) -> None:
        super().__init__(context)
        self.policy = policy
        self.users = 0
        self.refused: dict[str, str] = {}  # address -> first reason (bounded by MAX_LOGGED)
        self.lock = threading.Lock()  # `refused` is read from other threads
        self._overflowed = False

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        if len(msg) < 2:
            return  # no request id to answer; libzmq never sends this
        request_id = msg[1]
        try:
            _version, _rid, domain, address, _identity, mechanism, *credentials = msg
            name, addr = domain.decode(errors="replace"), address.decode(errors="replace")
            reason = self.policy.refusal(addr, mechanism, credentials)
        except Exception as exc:  # a malformed request must not end the handler thread
            name, addr, reason = "zap", "?", f"malformed ZAP request ({exc!r})"
        if reason is None:
            self._send_zap_reply(request_id, b"200", b"OK", USERNAME.decode())
            return
        self._note(name, addr, reason)
        self._send_zap_reply(request_id, b"400", reason.encode()[:255])

    def _note(self, name: str, addr: str, reason: str) -> None:
        if addr in self.refused:
            return
        if len(self.refused) >= MAX_LOGGED:
            if not self._overflowed:
                self._overflowed = True
                _log(f"{name}: more than {MAX_LOGGED} addresses refused; no longer logging them")
            return
        with self.lock:
            self.refused[addr] = reason
        _log(f"{name}: refused peer {addr}: {reason} (logged once per address)")


_gates: dict[int, _Gate] = {}
_gates_lock = threading.Lock()


class Gatekeeper:
    """The handle `secure_server` returns; `close()` it before the context is terminated."""

    def __init__(self, context: zmq.Context, gate: _Gate) -> None:
        self._key = id(context)
        self._gate: _Gate | None = gate

    @property
    def refused(self) -> dict[str, str]:
        """Refused addresses so far, with the first reason of each."""
        gate = self._gate
        if gate is None:
            return {}
        with gate.lock:
            return dict(gate.refused)

    def close(self) -> None:
        gate, self._gate = self._gate, None
        if gate is None:
            return
        with _gates_lock:
            gate.users -= 1
            if gate.users > 0:
                return
            _gates.pop(self._key, None)
        gate.stop()


def secure_server(sock: zmq.Socket, policy: Policy, name: str) -> Gatekeeper:
    """Make `sock` (not yet bound) serve only peers `policy` admits; `name` labels log lines.

    One ZAP handler serves every socket of a context, so every secured socket of one
    context must use the same policy (a ValueError otherwise).
    """
    sock.zap_domain = name.encode()[:254] or b"paddlike"
    if policy.uses_curve:
        public, secret = curve_keypair(policy.token, "server")  # type: ignore[arg-type]
        sock.curve_publickey, sock.curve_secretkey = public, secret
        sock.curve_server = True
    else:
        sock.plain_server = True
    ctx = sock.context
    with _gates_lock:
        gate = _gates.get(id(ctx))
        if gate is None:
            gate = _gates[id(ctx)] = _Gate(ctx, policy)
            try:
                gate.start()
            except BaseException:
                del _gates[id(ctx)]
                raise
        elif gate.policy != policy:
            raise ValueError(
                f"{name}: this ZeroMQ context already authenticates with another policy; "
                "use one context per policy"
            )
        gate.users += 1
    return Gatekeeper(ctx, gate)


def secure_client(sock: zmq.Socket, policy: Policy) -> None:
    """Give `sock` (not yet connected) the credentials a server of this job asks for."""
    if policy.uses_curve:
        public, secret = curve_keypair(policy.token, "client")  # type: ignore[arg-type]
        sock.curve_serverkey = curve_keypair(policy.token, "server")[0]  # type: ignore[arg-type]
        sock.curve_publickey, sock.curve_secretkey = public, secret
    else:
        sock.plain_username = USERNAME
        sock.plain_password = plain_password(policy.token)


def refusal_message(peer: str, event: int, value: int, policy: Policy) -> str:
    """What a refused handshake with `peer` (e.g. "parameter server 0 at host:port") means."""
    have = (
        "this process holds a job token (PADDLIKE_JOB_TOKEN)"
        if policy.token
        else "this process has no job token (PADDLIKE_JOB_TOKEN is unset)"
    )
    if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        return (
            f"{peer} hung up during the handshake {NO_DETAIL_FAILURES} times in a row (last "
            f"error {value}): with CURVE that is what another job token looks like; {have}. "
            "Run it with the job's --job_token (or PADDLIKE_JOB_TOKEN)"
        )
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return (
            f"{peer} refused this process (ZAP status {value}): the job token was refused or "
            f"not proven, or this host is not one of the job's hosts; {have}. Run it with "
            "the job's --job_token (or PADDLIKE_JOB_TOKEN) on one of the job's hosts; the "
            "peer's log names the reason"
        )
    return (
        f"{peer} failed the handshake with this process (ZeroMQ event {event:#x}, code "
        f"{value:#x}): the peer expects other credentials than this process offers (another "
        f"job token, or a token where this process has none); {have}. Run it with the "
        "job's --job_token (or PADDLIKE_JOB_TOKEN)"
    )


class HandshakeWatch:
    """A monitor of one connecting socket's handshakes: poll `.socket`, then `check()`.

    `check()` raises `AuthError` once the peer refused a handshake, so a client waiting
    for a reply learns at once why none will come."""

    def __init__(self, sock: zmq.Socket, peer: str, policy: Policy) -> None:
        self.peer, self.policy = peer, policy
        self._sock = sock
        self._hangups = 0  # handshakes failed without detail since the last success
        self.socket = sock.get_monitor_socket(events=_WATCHED)

    def check(self) -> None:
        """Raise AuthError if a refused handshake was reported; return otherwise."""
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            parsed = parse_monitor_message(frames)
            event, value = int(parsed["event"]), int(parsed["value"])
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._hangups = 0
                continue
            if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                self._hangups += 1
                if self._hangups < NO_DETAIL_FAILURES:
                    continue
            raise AuthError(refusal_message(self.peer, event, value, self.policy))

    def close(self) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self._sock.disable_monitor()
        self.socket.close(linger=0)
