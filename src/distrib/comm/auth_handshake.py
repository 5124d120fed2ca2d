"""Framing and the challenge-response handshake of distrib's authenticated store.

Every connection to the job's store starts with a mutual proof that both
ends hold the job secret; the secret itself never crosses the wire:

1. client -> server: ``MAGIC`` + a fresh 32-byte client nonce ``cn``
2. server -> client: a fresh 32-byte server nonce ``sn`` +
   ``HMAC-SHA256(secret, "distrib-server" | cn | sn)``
3. client -> server: ``HMAC-SHA256(secret, "distrib-client" | cn | sn)``
4. server -> client: one byte ``ACCEPTED``

Both nonces are fresh per connection, so a recorded handshake replayed on a
new connection fails (the server's nonce differs); the two directions use
different labels, so a server's proof cannot be reflected back as a client's.
Before step 4 the server reads only fixed, tiny sizes, so a stranger cannot
make it allocate memory.

After the handshake every message is a frame: a 4-byte big-endian length
and that many bytes, at most `MAX_FRAME_BYTES`. A frame holds a list of
byte fields (`encode_fields` / `decode_fields`).

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
from typing import List, Sequence

from distrib.comm.errors import DistribCommError

__all__ = ["AuthenticationError", "ProtocolError", "HandshakeAbandoned", "MAGIC", "MAX_FRAME_BYTES",
           "client_handshake", "server_handshake", "send_frame", "recv_frame",
           "encode_fields", "decode_fields"]

MAGIC = b"DSTRB\x01"
NONCE_BYTES = 32
MAC_BYTES = 32
ACCEPTED = b"\x01"
#: Largest frame either side accepts (a store value, or a batch of them).
MAX_FRAME_BYTES = 64 * 1024 * 1024
_MAX_FIELDS = 65536
_LEN = struct.Struct(">I")


class AuthenticationError(DistribCommError):
    """The other end of a store connection does not hold the job secret."""


class ProtocolError(DistribCommError, ConnectionError):
    """A peer sent bytes that are not distrib's store protocol (or closed early)."""


class HandshakeAbandoned(ProtocolError):
    """A peer greeted correctly, then closed before proving anything (a task that timed out)."""


def _mac(secret: bytes, label: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(secret, label + client_nonce + server_nonce, hashlib.sha256).digest()


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """Read exactly ``size`` bytes or raise `ProtocolError` when the peer closes first."""
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ProtocolError(f"connection closed after {len(chunks)} of {size} bytes")
        chunks += chunk
    return bytes(chunks)


def client_handshake(sock: socket.socket, secret: bytes, where: str) -> None:
    """Prove to the server at ``where`` that we hold ``secret``, and check it does too.

    Raises:
        AuthenticationError: the server's proof is wrong (a different secret),
            or it closed the connection after our proof (it rejected ours).
    """
    client_nonce = os.urandom(NONCE_BYTES)
    sock.sendall(MAGIC + client_nonce)
    try:
        reply = recv_exact(sock, NONCE_BYTES + MAC_BYTES)
    except ProtocolError:
        raise AuthenticationError(
            f"the store at {where} closed the connection during the handshake: it is not a "
            f"distrib store with authentication (is DISTRIB_JOB_SECRET set on the chief too?)") from None
    server_nonce, server_mac = reply[:NONCE_BYTES], reply[NONCE_BYTES:]
    if not hmac.compare_digest(server_mac, _mac(secret, b"distrib-server", client_nonce, server_nonce)):
        raise AuthenticationError(
            f"the store at {where} does not hold this job's secret: give every task the same "
            f"DISTRIB_JOB_SECRET (or DISTRIB_JOB_SECRET_FILE)")
    sock.sendall(_mac(secret, b"distrib-client", client_nonce, server_nonce))
    try:
        accepted = recv_exact(sock, 1)
    except ProtocolError:
        accepted = b""
    if accepted != ACCEPTED:
        raise AuthenticationError(f"the store at {where} rejected this task's proof of the job secret")


def server_handshake(sock: socket.socket, secret: bytes) -> None:
    """Check that the client on ``sock`` holds ``secret``; raise `AuthenticationError` if not."""
    hello = recv_exact(sock, len(MAGIC) + NONCE_BYTES)
    if hello[:len(MAGIC)] != MAGIC:
        raise AuthenticationError("the first bytes are not distrib's store handshake")
    client_nonce = hello[len(MAGIC):]
    server_nonce = os.urandom(NONCE_BYTES)
    sock.sendall(server_nonce + _mac(secret, b"distrib-server", client_nonce, server_nonce))
    try:
        proof = recv_exact(sock, MAC_BYTES)
    except ProtocolError:
        raise HandshakeAbandoned("the peer left after its greeting (a task that gave up waiting?)") from None
    if not hmac.compare_digest(proof, _mac(secret, b"distrib-client", client_nonce, server_nonce)):
        raise AuthenticationError("wrong proof of the job secret")
    sock.sendall(ACCEPTED)


def send_frame(sock: socket.socket, payload: bytes) -> None:
    """Send one length-prefixed frame."""
    if len(payload) > MAX_FRAME_BYTES:
        raise ProtocolError(f"a store message of {len(payload)} bytes exceeds the "
                            f"{MAX_FRAME_BYTES}-byte limit")
    sock.sendall(_LEN.pack(len(payload)) + payload)


def recv_frame(sock: socket.socket) -> bytes:
    """Receive one length-prefixed frame, refusing one larger than `MAX_FRAME_BYTES`."""
    (size,) = _LEN.unpack(recv_exact(sock, _LEN.size))
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"announced a {size}-byte message (limit {MAX_FRAME_BYTES})")
    return recv_exact(sock, size)


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
