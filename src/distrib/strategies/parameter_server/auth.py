"""Who may talk on the parameter-server channel: per-call HMAC tokens from the job secret.

Every call carries, in its gRPC metadata, a token
``<timestamp>.<nonce>.<mac>`` where ``mac`` is an HMAC-SHA256, keyed with a
key derived from the job secret (`distrib.comm.secret.job_secret`), over the
method, the timestamp, the nonce and the SHA-256 digest of the request bytes.
The raw secret never leaves the process. The server checks the token before
it deserializes anything: a caller without the secret cannot forge one, a
changed request no longer matches its token, a token older than
`MAX_SKEW_SECONDS` is refused, and a nonce seen before (a replayed call) is
refused. Replies are signed the same way (bound to the request's nonce), so
a caller never unpickles a reply that did not come from a task of the job.

Example:
    >>> auth = CallAuth(b"s3cret")
    >>> token = auth.sign("/distrib.ps.PS/Call", b"request")
    >>> auth.check("/distrib.ps.PS/Call", b"request", token) is None
    True
    >>> auth.check("/distrib.ps.PS/Call", b"changed", token) is not None   # refused: why
    True
"""
from __future__ import annotations

import collections
import hashlib
import hmac
import secrets
import threading
import time
from typing import Deque, Optional, Set, Tuple

__all__ = ["CallAuth", "TOKEN_HEADER", "MAX_SKEW_SECONDS"]

TOKEN_HEADER = "x-distrib-auth"
MAX_SKEW_SECONDS = 300.0
_KEY_LABEL = b"distrib parameter-server channel v1"
_MAC_BYTES = 32
_NONCE_MEMORY = 1 << 16


class CallAuth:
    """Signs and checks calls and replies of one job.

    Args:
        secret: the job secret (bytes); the signing key is HMAC(secret, label).
    """

    def __init__(self, secret: bytes) -> None:
        self._key = hmac.new(secret, _KEY_LABEL, hashlib.sha256).digest()
        self._lock = threading.Lock()
        self._seen: Set[str] = set()
        self._order: Deque[Tuple[float, str]] = collections.deque()

    def _mac(self, *parts: bytes) -> bytes:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in parts:
            mac.update(len(part).to_bytes(8, "big"))
            mac.update(part)
        return mac.digest()

    # ------------------------------------------------------------ requests
    def sign(self, method: str, request: bytes) -> str:
        """The token for one call of ``method`` with body ``request``."""
        stamp = f"{time.time():.6f}"
        nonce = secrets.token_hex(16)
        mac = self._mac(b"call", method.encode(), stamp.encode(), nonce.encode(),
                        hashlib.sha256(request).digest())
        return f"{stamp}.{nonce}.{mac.hex()}"

    def check(self, method: str, request: bytes, token: Optional[str]) -> Optional[str]:
        """None if ``token`` authenticates this call, else why not (one line, no secrets)."""
        if not token:
            return "the call carries no job token (is DISTRIB_JOB_SECRET set the same on every task?)"
        try:
            whole, frac, nonce, mac_hex = token.split(".")
            stamp = float(f"{whole}.{frac}")
            mac = bytes.fromhex(mac_hex)
        except ValueError:
            return "the call's job token is malformed"
        expected = self._mac(b"call", method.encode(), f"{whole}.{frac}".encode(), nonce.encode(),
                             hashlib.sha256(request).digest())
        if not hmac.compare_digest(mac, expected):
            return "the call's job token does not match (a different DISTRIB_JOB_SECRET, or a changed request)"
        now = time.time()
        if abs(now - stamp) > MAX_SKEW_SECONDS:
            return (f"the call's job token is {abs(now - stamp):.0f}s old (more than "
                    f"{MAX_SKEW_SECONDS:.0f}s): replayed, or the clocks of the hosts differ")
        with self._lock:
            if nonce in self._seen:
                return "the call's job token was used before (a replayed call)"
            self._seen.add(nonce)
            self._order.append((now, nonce))
            while self._order and (len(self._order) > _NONCE_MEMORY
                                   or now - self._order[0][0] > 2 * MAX_SKEW_SECONDS):
                self._seen.discard(self._order.popleft()[1])
        return None

    @staticmethod
    def nonce_of(token: str) -> str:
        """The nonce of a (checked) request token; replies are bound to it."""
        return token.split(".")[2]

    # ------------------------------------------------------------ replies
    def seal_reply(self, nonce: str, body: bytes) -> bytes:
        """``mac + body``: a reply the caller can check came from the job."""
        return self._mac(b"reply", nonce.encode(), hashlib.sha256(body).digest()) + body

    def open_reply(self, nonce: str, sealed: bytes) -> Optional[bytes]:
        """The body of a sealed reply, or None if it was not sealed with the job's key."""
        mac, body = sealed[:_MAC_BYTES], sealed[_MAC_BYTES:]
        expected = self._mac(b"reply", nonce.encode(), hashlib.sha256(body).digest())
        return body if len(mac) == _MAC_BYTES and hmac.compare_digest(mac, expected) else None
