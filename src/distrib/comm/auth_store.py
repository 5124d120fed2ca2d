"""distrib's own key-value store for rendezvous, with an authenticated handshake.

Why not torch's ``TCPStore``: anyone who can reach its port can list, read
and write every key (gloo addresses, heartbeats, "done" flags), and it has no
hook to authenticate a connection. This store is small and plain instead: a
threaded TCP server on the chief (`AuthStoreServer`) and a client
(`AuthStore`) that subclasses ``torch.distributed.Store``, so gloo's process
group uses it exactly as it would use a ``TCPStore``. Every connection first
proves it holds the job secret (`distrib.comm.auth_handshake`); a stranger's
connection is closed before it can read or write a key, logged once per
address on the chief, and the job goes on. The server lives in
`distrib.comm.store_server` (re-exported here); this module is the client and
the choice between the two stores.

`host_store` / `connect_client` pick the store: this one when a job secret is
configured (`distrib.comm.secret.cluster_secret`), else torch's ``TCPStore`` as
before (with a one-time warning when the chief is not on loopback).

Example:
    >>> server = AuthStoreServer("127.0.0.1", 0, b"job-secret")
    >>> store = AuthStore("127.0.0.1", server.port, b"job-secret", timeout=5.0)
    >>> store.set("k", "v"); store.get("k")
    b'v'
    >>> store.add("n", 2)
    2
    >>> server.close()
"""
from __future__ import annotations

import socket
import threading
from datetime import timedelta
from typing import List, Optional, Union

import torch.distributed as dist

from distrib.comm.auth_handshake import AuthenticationError, client_handshake, decode_fields, encode_fields
from distrib.comm.errors import DistribCommError
from distrib.comm.secret import cluster_secret
from distrib.comm.store_server import AuthStoreServer, secret_mismatches

__all__ = ["AuthStore", "AuthStoreServer", "StoreTimeoutError", "host_store", "connect_client",
           "secret_mismatches"]

_REPLY_SLACK_SECONDS = 30.0  # at most this beyond the store timeout, before a silent chief counts as lost
_MIN_REPLY_SLACK_SECONDS = 5.0  # a store with a short timeout (heartbeats) waits only its timeout, at least this
Value = Union[str, bytes]


class StoreTimeoutError(DistribCommError, TimeoutError):
    """A blocking store call (get, wait) found no key within its timeout."""


def _b(value: Value) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


# --------------------------------------------------------------------- client
class AuthStore(dist.Store):
    """A ``torch.distributed.Store`` on one authenticated connection to `AuthStoreServer`.

    Blocking calls (``get``, ``wait``, ``multi_get``) wait up to the store's
    timeout (``set_timeout``) and then raise `StoreTimeoutError`.
    """

    def __init__(self, host: str, port: int, secret: bytes, timeout: float,
                 server: Optional[AuthStoreServer] = None) -> None:
        super().__init__()
        dist.Store.set_timeout(self, timedelta(seconds=timeout))
        self._where = f"{host}:{port}"
        self._args = (host, port, secret)
        self._server = server  # the chief's own client keeps its server alive
        self._lock = threading.Lock()
        self._sock = socket.create_connection((host, port), timeout=max(1.0, timeout))
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._session = client_handshake(self._sock, secret, self._where)
        except BaseException:
            self._sock.close()
            raise

    def _timeout_ms(self, timeout: Optional[timedelta] = None) -> int:
        chosen = timeout if timeout is not None else self.timeout
        return max(0, int(chosen.total_seconds() * 1000))

    def _call(self, *fields: bytes, wait_ms: int = 0) -> List[bytes]:
        with self._lock:
            try:
                # A chief that stopped answering must not block this task forever.
                limit = self.timeout.total_seconds()
                slack = min(_REPLY_SLACK_SECONDS, max(_MIN_REPLY_SLACK_SECONDS, limit))
                self._sock.settimeout(max(wait_ms / 1000.0, limit) + slack)
                self._session.send(self._sock, encode_fields(fields))
                reply = decode_fields(self._session.recv(self._sock))
            except AuthenticationError as exc:
                self._sock.close()
                raise DistribCommError(f"the job's store at {self._where}: {exc}") from None
            except OSError as exc:
                self._sock.close()  # a half-read reply would desynchronise every later call
                raise DistribCommError(f"lost the connection to the job's store at {self._where}: "
                                       f"{exc}") from None
        status = reply[0] if reply else b"error"
        if status == b"ok":
            return reply[1:]
        if status == b"timeout":
            raise StoreTimeoutError(f"timed out waiting for {fields[-1][:100]!r} in the job's store "
                                    f"at {self._where}")
        raise DistribCommError(f"the job's store at {self._where} refused a request: "
                               f"{(reply[1:2] or [b'?'])[0].decode(errors='replace')}")

    def set(self, key: str, value: Value) -> None:
        self._call(b"set", _b(key), _b(value))

    def get(self, key: str) -> bytes:
        ms = self._timeout_ms()
        return self._call(b"get", _b(key), str(ms).encode(), wait_ms=ms)[0]

    def add(self, key: str, value: int) -> int:
        return int(self._call(b"add", _b(key), str(int(value)).encode())[0])

    def compare_set(self, key: str, expected_value: Value, desired_value: Value) -> bytes:
        return self._call(b"compare_set", _b(key), _b(expected_value), _b(desired_value))[0]

    def append(self, key: str, value: Value) -> None:
        self._call(b"append", _b(key), _b(value))

    def wait(self, keys: List[str], timeout: Optional[timedelta] = None) -> None:
        ms = self._timeout_ms(timeout)
        self._call(b"wait", str(ms).encode(), *[_b(k) for k in keys], wait_ms=ms)

    def check(self, keys: List[str]) -> bool:
        return self._call(b"check", *[_b(k) for k in keys])[0] == b"1"

    def delete_key(self, key: str) -> bool:
        return self._call(b"delete", _b(key))[0] == b"1"

    def num_keys(self) -> int:
        return int(self._call(b"num_keys")[0])

    def multi_get(self, keys: List[str]) -> List[bytes]:
        ms = self._timeout_ms()
        return self._call(b"multi_get", str(ms).encode(), *[_b(k) for k in keys], wait_ms=ms)

    def multi_set(self, keys: List[str], values: List[Value]) -> None:
        self._call(b"multi_set", *[_b(k) for k in keys], *[_b(v) for v in values])

    def has_extended_api(self) -> bool:
        return True

    def clone(self) -> "AuthStore":
        host, port, secret = self._args
        return AuthStore(host, port, secret, self.timeout.total_seconds())

    def close(self) -> None:
        """Close the connection (and, on the chief, stop serving)."""
        try:
            self._sock.close()
        finally:
            if self._server is not None:
                self._server.close()


# ------------------------------------------------------------------ choosing
def host_store(host: str, port: int, world_size: int, timeout: float) -> dist.Store:
    """The chief's store: `AuthStoreServer` + its own client with a secret, else ``TCPStore``."""
    secret = cluster_secret(host)
    if secret is None:
        return dist.TCPStore(host, port, world_size, is_master=True,
                             timeout=timedelta(seconds=timeout), wait_for_workers=False)
    server = AuthStoreServer(host, port, secret)
    try:
        return AuthStore(host, server.port, secret, timeout, server=server)
    except BaseException:
        server.close()
        raise


def connect_client(host: str, port: int, world_size: int, timeout: float) -> dist.Store:
    """A connection to the chief's store, authenticated when the job has a secret (`cluster_secret`)."""
    secret = cluster_secret(host)
    if secret is None:
        return dist.TCPStore(host, port, world_size, is_master=False,
                             timeout=timedelta(seconds=timeout))
    return AuthStore(host, port, secret, timeout)
