"""Who may talk on the parameter-server channel: per-call HMAC tokens from the job secret.

Every call carries, in its gRPC metadata, a token
``<timestamp>.<nonce>.<digest>.<mac>`` where ``digest`` is the SHA-256 of
the request bytes and ``mac`` an HMAC-SHA256, keyed with a key derived from
the job secret (`distrib.comm.secret.job_secret`), over the method, the
*destination task*, the timestamp, the nonce and the digest. The raw secret
never leaves the process.

The server checks a call in two steps. `check_header`, on the metadata
alone and before a byte of the request is read: the MAC (a caller without
the secret cannot forge one), the destination and method (a call recorded
on its way to one task or method is refused by any other), the age (older
than `MAX_SKEW_SECONDS` is refused) and the nonce (a replayed call is
refused). The nonce memory is bounded: when it is full the oldest nonces are
forgotten and every token not newer than the newest forgotten one is
refused as too old, so a replay is refused whatever the memory holds.
Then `check_body`, once the request is read: its digest must match.
Replies are signed the same way (bound to the request's nonce), so a caller
never decodes a reply that did not come from a task of the job.

Example:
    >>> auth = CallAuth(b"s3cret")
    >>> token = auth.sign("/distrib.ps.PS/Call", "ps:0", b"request")
    >>> auth.check_header("/distrib.ps.PS/Call", "ps:0", token) is None
    True
    >>> auth.check_body(token, b"changed") is not None               # refused: why
    True
    >>> auth.check_header("/distrib.ps.PS/Call", "ps:1", auth.sign("/distrib.ps.PS/Call", "ps:0", b"r"),
    ...                   signed_for="ps:0")
    'the call was signed for ps:0, not ps:1 (a recorded call sent elsewhere?)'
"""
from __future__ import annotations

import collections
import hashlib
import hmac
import secrets
import threading
import time
from typing import Deque, Optional, Set, Tuple

__all__ = ["CallAuth", "TOKEN_HEADER", "DEST_HEADER", "MAX_SKEW_SECONDS", "NONCE_MEMORY"]

TOKEN_HEADER = "x-distrib-auth"
DEST_HEADER = "x-distrib-dest"
MAX_SKEW_SECONDS = 300.0
NONCE_MEMORY = 1 << 16
_KEY_LABEL = b"distrib parameter-server channel v2"
_MAC_BYTES = 32


class CallAuth:
    """Signs and checks calls and replies of one job.

    Args:
        secret: the job secret (bytes); the signing key is HMAC(secret, label).
        nonce_memory: how many recent nonces a server remembers.
    """

    def __init__(self, secret: bytes, nonce_memory: int = NONCE_MEMORY) -> None:
        self._key = hmac.new(secret, _KEY_LABEL, hashlib.sha256).digest()
        self._lock = threading.Lock()
        self._seen: Set[str] = set()
        self._order: Deque[Tuple[float, str]] = collections.deque()
        self._memory = nonce_memory
        self._floor = float("-inf")  # tokens stamped at or before this are refused

    @property
    def remembered(self) -> int:
        """How many recent nonces are remembered (at most ``nonce_memory``; older ones are refused by age)."""
        return len(self._seen)

    def _mac(self, *parts: bytes) -> bytes:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in parts:
            mac.update(len(part).to_bytes(8, "big"))
            mac.update(part)
        return mac.digest()

    # ------------------------------------------------------------ requests
    def sign(self, method: str, dest: str, request: bytes) -> str:
        """The token for one call of ``method`` on task ``dest`` with body ``request``."""
        stamp = f"{time.time():.6f}"
        nonce = secrets.token_hex(16)
        digest = hashlib.sha256(request).hexdigest()
        mac = self._mac(b"call", method.encode(), dest.encode(), stamp.encode(), nonce.encode(),
                        digest.encode())
        return f"{stamp}.{nonce}.{digest}.{mac.hex()}"

    def check_header(self, method: str, dest: str, token: Optional[str],
                     signed_for: Optional[str] = None) -> Optional[str]:
        """None if ``token`` is a fresh, unreplayed token of this job for ``method`` on ``dest``.

        ``signed_for`` is the destination the caller says it signed for (only
        used to word the refusal). Returns why not (one line, no secrets).
        """
        if not token:
            return "the call carries no job token (is the same job secret set on every task?)"
        try:
            whole, frac, nonce, digest, mac_hex = token.split(".")
            stamp = float(f"{whole}.{frac}")
            mac = bytes.fromhex(mac_hex)
        except ValueError:
            return "the call's job token is malformed"
        expected = self._mac(b"call", method.encode(), dest.encode(), f"{whole}.{frac}".encode(),
                             nonce.encode(), digest.encode())
        if not hmac.compare_digest(mac, expected):
            if signed_for and signed_for != dest:
                return f"the call was signed for {signed_for[:64]}, not {dest} (a recorded call sent elsewhere?)"
            return ("job secret mismatch: the call's job token does not match this task's secret (a "
                    "different DISTRIB_JOB_SECRET, or a call meant for another task or method)")
        now = time.time()
        if abs(now - stamp) > MAX_SKEW_SECONDS:
            return (f"the call's job token is {abs(now - stamp):.0f}s old (more than "
                    f"{MAX_SKEW_SECONDS:.0f}s): replayed, or the clocks of the hosts differ")
        with self._lock:
            if nonce in self._seen or stamp <= self._floor:
                return "the call's job token was used before (a replayed call)"
            self._seen.add(nonce)
            self._order.append((stamp, nonce))
            while self._order and (len(self._order) > self._memory
                                   or now - self._order[0][0] > 2 * MAX_SKEW_SECONDS):
                old_stamp, old_nonce = self._order.popleft()
                self._seen.discard(old_nonce)
                self._floor = max(self._floor, old_stamp)
        return None

    def check_body(self, token: str, request: bytes) -> Optional[str]:
        """None if ``request`` is the body ``token`` (already checked by `check_header`) was made for."""
        digest = token.split(".")[3]
        if not hmac.compare_digest(digest, hashlib.sha256(request).hexdigest()):
            return "the request does not match its job token (changed on the way)"
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
