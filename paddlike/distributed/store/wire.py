"""The store's wire format, in one place: framing, the handshake, the statuses, the errors.

All integers are big-endian:

    frame     = u32 length, then `length` bytes of payload (length <= MAX_FRAME)
    field     = u32 length, then bytes                       ("bytes" below)
    handshake: server -> HELLO frame: b"PLKS" u8 version u8 flags [32-byte nonce | reason]
                   flags: 1 = token required, 2 = refused (reason follows, then close)
               client -> AUTH frame: mac bytes (32 bytes, or empty without token);
                   a longer one is refused unread (MAX_AUTH: nothing big before auth)
               server -> u8 status frame: 0 ok, 1 bad token (then close)
    request  = u8 opcode, then the command's fields
    response = u8 status (OK, TIMEOUT, MISSING, ERROR), then the command's fields
               (ERROR: one field, the message)

The commands themselves (opcode, fields, effect, reply) are in `commands.py`.
"""

from __future__ import annotations

import socket
import struct

MAX_FRAME = 64 << 20  # 64 MiB: far above any key/value the runtime or launcher sends
MAX_AUTH = 32  # the largest frame read before the handshake: an AUTH's HMAC-SHA256
MAX_KEY = 4096
PROTOCOL_VERSION = 1
MAGIC = b"PLKS"
HANDSHAKE_TIMEOUT = 10.0  # seconds a fresh connection gets to authenticate
FRAME_TIMEOUT = 30.0  # seconds between the first and last byte of one frame
NONCE_SIZE = 32  # the server's challenge; the answer is HMAC-SHA256(token, nonce)
FLAG_TOKEN = 1
FLAG_REFUSED = 2

U8 = struct.Struct(">B")
U32 = struct.Struct(">I")
I64 = struct.Struct(">q")

# Response status codes.
OK, TIMEOUT, MISSING, ERROR = 0, 1, 2, 3


class StoreError(RuntimeError):
    """A store call failed; the message names the store address and the key."""


class StoreTimeoutError(StoreError, TimeoutError):
    """A key (or a connection) did not come before the deadline."""


class StoreAuthError(StoreError):
    """The store refused this client: wrong or missing job token, or not a job host."""


class ProtocolError(ValueError):
    """A malformed frame: the server answers ERROR and drops the connection."""


def field(data: bytes) -> bytes:
    return U32.pack(len(data)) + data


def frame(payload: bytes) -> bytes:
    return U32.pack(len(payload)) + payload


def status(code: int) -> bytes:
    """A reply's first byte (OK, TIMEOUT, MISSING or ERROR)."""
    return U8.pack(code)


def error_reply(message: str) -> bytes:
    return U8.pack(ERROR) + field(message.encode())


class Reader:
    """Parse fields out of one payload; every short read is a ProtocolError, never a crash."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError(f"truncated frame: wanted {n} bytes at offset {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def rest(self) -> bytes:
        out = self.data[self.pos :]
        self.pos = len(self.data)
        return out

    def u8(self) -> int:
        return U8.unpack(self.take(1))[0]

    def u32(self) -> int:
        return U32.unpack(self.take(4))[0]

    def i64(self) -> int:
        return I64.unpack(self.take(8))[0]

    def bytes_(self) -> bytes:
        return self.take(self.u32())

    def key(self) -> str:
        raw = self.bytes_()
        if len(raw) > MAX_KEY:
            raise ProtocolError(f"key of {len(raw)} bytes is longer than {MAX_KEY}")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("key is not UTF-8") from exc

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolError(f"{len(self.data) - self.pos} unexpected bytes after the fields")


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """n bytes, or EOFError when the peer closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket, first_byte_timeout: float | None) -> bytes:
    """One frame: waits up to `first_byte_timeout` for it to begin, then FRAME_TIMEOUT for it."""
    sock.settimeout(first_byte_timeout)
    head = recv_exact(sock, 1)
    sock.settimeout(FRAME_TIMEOUT if first_byte_timeout is None else first_byte_timeout)
    head += recv_exact(sock, 3)
    (length,) = U32.unpack(head)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes is larger than {MAX_FRAME}")
    return recv_exact(sock, length)


# --- the handshake's frames: HELLO (server), AUTH (client), its verdict (server) -------


def hello(nonce: bytes, token_required: bool) -> bytes:
    flags = FLAG_TOKEN if token_required else 0
    return frame(MAGIC + U8.pack(PROTOCOL_VERSION) + U8.pack(flags) + nonce)


def refusal(reason: str) -> bytes:
    """The HELLO that refuses a peer: it carries the reason instead of a nonce."""
    return frame(MAGIC + U8.pack(PROTOCOL_VERSION) + U8.pack(FLAG_REFUSED) + reason.encode())


class Hello:
    """A HELLO as the client reads it: a nonce to answer, or the reason it was refused."""

    def __init__(self, payload: bytes) -> None:
        r = Reader(payload)
        if r.take(len(MAGIC)) != MAGIC:
            raise ProtocolError("not a paddlike store")
        r.u8()  # protocol version
        flags = r.u8()
        self.refused = bool(flags & FLAG_REFUSED)
        self.token_required = bool(flags & FLAG_TOKEN)
        self.reason = r.rest().decode("utf-8", "replace") if self.refused else ""
        self.nonce = b"" if self.refused else r.take(NONCE_SIZE)


def verdict(accepted: bool) -> bytes:
    """The server's answer to AUTH: 0 accepted, 1 bad token (then it closes)."""
    return frame(U8.pack(0 if accepted else 1))


def accepted(payload: bytes) -> bool:
    return Reader(payload).u8() == 0
