"""Framing and the challenge-response handshake of distrib's authenticated store.

Every connection to the job's store starts with a mutual proof that both
ends hold the job secret; the secret itself never crosses the wire:

1. client -> server: ``MAGIC`` + a fresh 32-byte client nonce ``cn``
2. server -> client: a fresh 32-byte server nonce ``sn`` +
   ``HMAC-SHA256(secret, "distrib-server" | cn | sn)``
3. client -> server: ``HMAC-SHA256(secret, "distrib-client" | cn | sn)``
   (sent even when the server's proof was wrong, so that both ends learn of
   a *job secret mismatch* at once)
4. server -> client: one byte, ``ACCEPTED`` or ``REJECTED``

Both nonces are fresh per connection, so a recorded handshake replayed on a
new connection fails (the server's nonce differs); the two directions use
different labels, so a server's proof cannot be reflected back as a client's.
Before step 4 the server reads only fixed, tiny sizes, so a stranger cannot
make it allocate memory, and the whole handshake has one deadline (a peer
that trickles one byte at a time is dropped when it passes).

After the handshake every message is a frame of a `Session`: a 4-byte
big-endian length, that many bytes, and a 32-byte HMAC (keyed by a
per-connection key derived from the secret and both nonces) over the
direction, a sequence number and the bytes. A changed, dropped, reordered or
replayed frame fails its MAC. A frame holds a list of byte fields
(`encode_fields` / `decode_fields`).

Example:
    >>> decode_fields(encode_fields([b"set", b"key", b"value"]))
    [b'set', b'key', b'value']
"""
from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import time
from typing import List, Optional, Sequence

from distrib.comm.errors import DistribCommError

__all__ = ["AuthenticationError", "SecretMismatchError", "ProtocolError", "HandshakeAbandoned", "MAGIC",
           "MAX_FRAME_BYTES", "Session", "client_handshake", "server_handshake", "encode_fields",
           "decode_fields"]

MAGIC = b"DSTRB\x02"
NONCE_BYTES = 32
MAC_BYTES = 32
ACCEPTED = b"\x01"
REJECTED = b"\x00"
#: Largest frame either side accepts (a store value, or a batch of them).
MAX_FRAME_BYTES = 64 * 1024 * 1024
_MAX_FIELDS = 65536
_LEN = struct.Struct(">I")
_SEQ = struct.Struct(">Q")


class AuthenticationError(DistribCommError):
    """The other end of a store connection does not hold the job secret."""


class SecretMismatchError(AuthenticationError):
    """The other end proved it holds a job secret, but a different one."""


class ProtocolError(DistribCommError, ConnectionError):
    """A peer sent bytes that are not distrib's store protocol (or closed early)."""


class HandshakeAbandoned(ProtocolError):
    """A peer greeted correctly, then closed before proving anything (a task that timed out)."""


def _mac(secret: bytes, label: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(secret, label + client_nonce + server_nonce, hashlib.sha256).digest()


def recv_exact(sock: socket.socket, size: int, deadline: Optional[float] = None, prefix: bytes = b"") -> bytes:
    """Read exactly ``size`` bytes or raise `ProtocolError` when the peer closes first.

    With ``deadline`` (a ``time.monotonic()`` value) the whole read must end by
    then, however the peer paces its bytes (``socket.timeout`` otherwise).
    With ``prefix``, the bytes must begin with it: `AuthenticationError` as
    soon as one that arrived differs, so a peer that sent a few other bytes and
    waits for an answer (torch's own store client) is refused at once, not
    when the deadline passes.
    """
    chunks = bytearray()
    while len(chunks) < size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout(f"handshake deadline passed after {len(chunks)} of {size} bytes")
            sock.settimeout(remaining)
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ProtocolError(f"connection closed after {len(chunks)} of {size} bytes")
        chunks += chunk
        if prefix and chunks[:len(prefix)] != prefix[:len(chunks)]:
            raise AuthenticationError("the first bytes are not distrib's store handshake")
    return bytes(chunks)


class Session:
    """The authenticated framing of one connection after its handshake.

    Args:
        secret: the job secret.
        client_nonce: the handshake's client nonce.
        server_nonce: the handshake's server nonce.
        is_client: which end this is (the two directions are keyed apart).

    Example:
        >>> a = Session(b"s", b"c" * 32, b"n" * 32, is_client=True)
        >>> b = Session(b"s", b"c" * 32, b"n" * 32, is_client=False)
        >>> b.open(a.seal(b"hello"))
        b'hello'
    """

    def __init__(self, secret: bytes, client_nonce: bytes, server_nonce: bytes, is_client: bool) -> None:
        self._key = _mac(secret, b"distrib-session", client_nonce, server_nonce)
        self._out_label, self._in_label = (b"c2s", b"s2c") if is_client else (b"s2c", b"c2s")
        self._sent = 0
        self._received = 0

    def _tag(self, label: bytes, seq: int, payload: bytes) -> bytes:
        return hmac.new(self._key, label + _SEQ.pack(seq) + payload, hashlib.sha256).digest()

    def seal(self, payload: bytes) -> bytes:
        """One frame: length, ``payload``, MAC over this direction's next sequence number."""
        if len(payload) > MAX_FRAME_BYTES:
            raise ProtocolError(f"a store message of {len(payload)} bytes exceeds the "
                                f"{MAX_FRAME_BYTES}-byte limit")
        tag = self._tag(self._out_label, self._sent, payload)
        self._sent += 1
        return _LEN.pack(len(payload)) + payload + tag

    def open(self, frame: bytes) -> bytes:
        """The payload of a whole frame made by the peer's `seal`; `AuthenticationError` if forged."""
        (size,) = _LEN.unpack(frame[:_LEN.size])
        return self._check(frame[_LEN.size:_LEN.size + size], frame[_LEN.size + size:])

    def _check(self, payload: bytes, tag: bytes) -> bytes:
        if len(tag) != MAC_BYTES or not hmac.compare_digest(tag, self._tag(self._in_label, self._received,
                                                                             payload)):
            raise AuthenticationError("a store message failed its integrity check (changed, reordered "
                                      "or replayed on the way)")
        self._received += 1
        return payload

    def send(self, sock: socket.socket, payload: bytes) -> None:
        """Send one sealed frame."""
        sock.sendall(self.seal(payload))

    def recv(self, sock: socket.socket) -> bytes:
        """Receive and check one frame, refusing one larger than `MAX_FRAME_BYTES` before reading it."""
        (size,) = _LEN.unpack(recv_exact(sock, _LEN.size))
        if size > MAX_FRAME_BYTES:
            raise ProtocolError(f"announced a {size}-byte message (limit {MAX_FRAME_BYTES})")
        body = recv_exact(sock, size + MAC_BYTES)
        return self._check(body[:size], body[size:])


def client_handshake(sock: socket.socket, secret: bytes, where: str) -> Session:
    """Prove to the server at ``where`` that we hold ``secret``, and check it does too.

    Raises:
        SecretMismatchError: the server proved a different secret, or refused ours.
        ProtocolError: the server closed the connection before its proof.
    """
    client_nonce = os.urandom(NONCE_BYTES)
    sock.sendall(MAGIC + client_nonce)
    try:
        reply = recv_exact(sock, NONCE_BYTES + MAC_BYTES)
    except ProtocolError:  # retried by the caller: a busy store sheds its oldest handshakes
        raise ProtocolError(
            f"the store at {where} closed the connection during the handshake (it is busy, or it is "
            f"not a distrib store with authentication: is a job secret set on the chief too?)") from None
    server_nonce, server_mac = reply[:NONCE_BYTES], reply[NONCE_BYTES:]
    sock.sendall(_mac(secret, b"distrib-client", client_nonce, server_nonce))
    if not hmac.compare_digest(server_mac, _mac(secret, b"distrib-server", client_nonce, server_nonce)):
        raise SecretMismatchError(
            f"job secret mismatch: the job's store at {where} proved a different job secret than this "
            f"task's: give every task the same DISTRIB_JOB_SECRET (or DISTRIB_JOB_SECRET_FILE)")
    try:
        accepted = recv_exact(sock, 1)
    except ProtocolError:
        accepted = b""
    if accepted != ACCEPTED:
        raise SecretMismatchError(
            f"job secret mismatch: the job's store at {where} refused this task's proof of the job "
            f"secret: give every task the same DISTRIB_JOB_SECRET (or DISTRIB_JOB_SECRET_FILE)")
    return Session(secret, client_nonce, server_nonce, is_client=True)


def server_handshake(sock: socket.socket, secret: bytes, deadline: float) -> Session:
    """Check that the client on ``sock`` holds ``secret``, all by ``deadline`` (monotonic).

    Raises:
        SecretMismatchError: a well-formed proof of a different secret.
        AuthenticationError: not distrib's handshake.
        HandshakeAbandoned: the client left after its greeting.
        socket.timeout: the deadline passed.
    """
    hello = recv_exact(sock, len(MAGIC) + NONCE_BYTES, deadline, prefix=MAGIC)
    client_nonce = hello[len(MAGIC):]
    server_nonce = os.urandom(NONCE_BYTES)
    sock.sendall(server_nonce + _mac(secret, b"distrib-server", client_nonce, server_nonce))
    try:
        proof = recv_exact(sock, MAC_BYTES, deadline)
    except ProtocolError:
        raise HandshakeAbandoned("the peer left after its greeting (a task that gave up waiting?)") from None
    if not hmac.compare_digest(proof, _mac(secret, b"distrib-client", client_nonce, server_nonce)):
        try:
            sock.sendall(REJECTED)
        except OSError:
            pass
        raise SecretMismatchError("job secret mismatch: it proved a different job secret (a task "
                                  "started with another DISTRIB_JOB_SECRET, or a stranger)")
    sock.sendall(ACCEPTED)
    return Session(secret, client_nonce, server_nonce, is_client=False)


def encode_fields(fields: Sequence[bytes]) -> bytes:
    """Pack byte strings into one frame payload (a count, then length-prefixed fields)."""
    parts = [_LEN.pack(len(fields))]
    for field in fields:
        parts.append(_LEN.pack(len(field)))
        parts.append(bytes(field))
    return b"".join(parts)


def decode_fields(payload: bytes) -> List[bytes]:
    """Unpack `encode_fields`' output; `ProtocolError` if the payload is malformed."""
    view = memoryview(payload)
    if len(view) < _LEN.size:
        raise ProtocolError("a store message shorter than its header")
    (count,) = _LEN.unpack(view[:_LEN.size])
    if count > _MAX_FIELDS:
        raise ProtocolError(f"a store message with {count} fields (limit {_MAX_FIELDS})")
    pos, fields = _LEN.size, []
    for _ in range(count):
        if pos + _LEN.size > len(view):
            raise ProtocolError("a store message cut short")
        (size,) = _LEN.unpack(view[pos:pos + _LEN.size])
        pos += _LEN.size
        if pos + size > len(view):
            raise ProtocolError("a store message field runs past its end")
        fields.append(bytes(view[pos:pos + size]))
        pos += size
    if pos != len(view):
        raise ProtocolError("trailing bytes after a store message")
    return fields
