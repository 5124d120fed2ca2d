"""distrib's own key-value store for rendezvous, with an authenticated handshake.

Why not torch's ``TCPStore``: anyone who can reach its port can list, read
and write every key (gloo addresses, heartbeats, "done" flags), and it has no
hook to authenticate a connection. This store is small and plain instead: a
threaded TCP server on the chief (`AuthStoreServer`) and a client
(`AuthStore`) that subclasses ``torch.distributed.Store``, so gloo's process
group uses it exactly as it would use a ``TCPStore``. Every connection first
proves it holds the job secret (`distrib.comm.auth_handshake`); a stranger's
connection is closed before it can read or write a key, logged once per
address on the chief, and the job goes on.

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

import collections
import logging
import socket
import threading
import time
from datetime import timedelta
from typing import Dict, List, Optional, Sequence, Set, Union

import torch.distributed as dist

from distrib.comm.auth_handshake import (AuthenticationError, HandshakeAbandoned, ProtocolError,
                                         SecretMismatchError, client_handshake, decode_fields,
                                         encode_fields, server_handshake)
from distrib.comm.errors import DistribCommError
from distrib.comm.secret import cluster_secret

__all__ = ["AuthStore", "AuthStoreServer", "StoreTimeoutError", "host_store", "connect_client",
           "secret_mismatches"]

log = logging.getLogger("distrib.comm")
_HANDSHAKE_SECONDS = 10.0  # the whole handshake must end by then, however the peer paces its bytes
_MAX_PENDING = 64  # unauthenticated connections at once; the oldest is dropped for a new one
_ACCEPT_BACKOFF = (0.01, 1.0)  # after a failed accept() (EMFILE...): first and longest pause
_MISMATCHES: List[str] = []  # peers that proved a different job secret, in this process
_MAX_KEY_BYTES = 4096
_REPLY_SLACK_SECONDS = 30.0  # at most this beyond the store timeout, before a silent chief counts as lost
_MIN_REPLY_SLACK_SECONDS = 5.0  # a store with a short timeout (heartbeats) waits only its timeout, at least this
Value = Union[str, bytes]


class StoreTimeoutError(DistribCommError, TimeoutError):
    """A blocking store call (get, wait) found no key within its timeout."""


def _b(value: Value) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


# --------------------------------------------------------------------- server
class AuthStoreServer:
    """The chief's store: a dict behind a lock, served to authenticated connections only."""

    def __init__(self, host: str, port: int, secret: bytes, handshake_seconds: float = _HANDSHAKE_SECONDS,
                 max_pending: int = _MAX_PENDING) -> None:
        self._secret = secret
        self._handshake_seconds = handshake_seconds
        self._max_pending = max_pending
        self._pending: "collections.OrderedDict[int, socket.socket]" = collections.OrderedDict()
        self._pending_lock = threading.Lock()
        self._data: Dict[bytes, bytes] = {}
        self._cond = threading.Condition()
        self._reported: Set[str] = set()
        self._closed = False
        self.accept_failures = 0
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]  # IPv6 literals too
        self._listener = socket.create_server((host, port), family=family, reuse_port=False, backlog=128)
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept_loop, name="distrib-store", daemon=True).start()

    def close(self) -> None:
        """Stop accepting connections (connections already open end with the process)."""
        self._closed = True
        try:
            self._listener.close()
        except OSError:
            pass

    def _accept_loop(self) -> None:
        pause = _ACCEPT_BACKOFF[0]
        while not self._closed:
            try:
                conn, addr = self._listener.accept()
            except OSError as exc:
                if self._closed:
                    return
                self.accept_failures += 1
                if self.accept_failures == 1:
                    log.warning("distrib: the job's store could not accept a connection (%s); it "
                                "backs off and keeps serving", exc)
                time.sleep(pause)  # poll: the kernel does not say when a descriptor frees up
                pause = min(_ACCEPT_BACKOFF[1], pause * 2)
                continue
            pause = _ACCEPT_BACKOFF[0]
            self._admit(conn)
            threading.Thread(target=self._serve, args=(conn, f"{addr[0]}:{addr[1]}"), daemon=True,
                             name="distrib-store-conn").start()

    def _admit(self, conn: socket.socket) -> None:
        """Count ``conn`` as unauthenticated; past the cap, drop the oldest such connection."""
        with self._pending_lock:
            self._pending[id(conn)] = conn
            while len(self._pending) > self._max_pending:
                _, oldest = self._pending.popitem(last=False)
                try:
                    oldest.shutdown(socket.SHUT_RDWR)  # its thread's read ends and it closes
                except OSError:
                    pass

    def _authenticated(self, conn: socket.socket) -> bool:
        with self._pending_lock:
            return self._pending.pop(id(conn), None) is not None

    def _serve(self, conn: socket.socket, address: str) -> None:
        with conn:
            try:
                deadline = time.monotonic() + self._handshake_seconds
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.settimeout(self._handshake_seconds)
                if not conn.recv(1, socket.MSG_PEEK):
                    return  # connect-and-close: a task probing whether the chief listens yet
                session = server_handshake(conn, self._secret, deadline)
                if not self._authenticated(conn):
                    return  # dropped for a newer connection just as it finished
            except HandshakeAbandoned:
                return  # nothing was proven and nothing read: not worth a warning
            except SecretMismatchError as exc:
                _MISMATCHES.append(address)
                log.warning("distrib: %s: a connection from %s to the job's store; the job goes on "
                            "without it", exc, address)
                return
            except (AuthenticationError, ProtocolError, OSError) as exc:
                self._report_stranger(address.rsplit(":", 1)[0], exc)
                return
            finally:
                self._authenticated(conn)
            conn.settimeout(None)
            try:
                while True:
                    request = decode_fields(session.recv(conn))
                    session.send(conn, encode_fields(self._dispatch(request)))
            except AuthenticationError as exc:
                self._report_stranger(address.rsplit(":", 1)[0], exc)
            except (ProtocolError, OSError):
                return  # the task left (or broke its own connection): nothing to answer

    def _report_stranger(self, address: str, exc: BaseException) -> None:
        if address not in self._reported:
            self._reported.add(address)
            log.warning("distrib: refused a connection to the job's store from %s: it did not "
                        "prove it holds the job secret (%s); the job goes on", address, exc)

    def _dispatch(self, request: List[bytes]) -> List[bytes]:
        if not request or any(len(k) > _MAX_KEY_BYTES for k in request[1:2]):
            return [b"error", b"malformed request"]
        op, args = request[0], request[1:]
        handler = _HANDLERS.get(op)
        if handler is None:
            return [b"error", b"unknown operation " + op[:32]]
        try:
            return handler(self, args)
        except (ValueError, IndexError) as exc:
            return [b"error", str(exc).encode()[:200]]

    def _wait_keys(self, keys: Sequence[bytes], timeout_ms: int) -> bool:
        deadline = time.monotonic() + timeout_ms / 1000.0
        with self._cond:
            while not all(k in self._data for k in keys):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def _op_set(self, a: List[bytes]) -> List[bytes]:
        with self._cond:
            self._data[a[0]] = a[1]
            self._cond.notify_all()
        return [b"ok"]

    def _op_get(self, a: List[bytes]) -> List[bytes]:
        if not self._wait_keys(a[:1], int(a[1])):
            return [b"timeout"]
        with self._cond:
            return [b"ok", self._data[a[0]]]

    def _op_add(self, a: List[bytes]) -> List[bytes]:
        with self._cond:
            value = int(self._data.get(a[0], b"0")) + int(a[1])
            self._data[a[0]] = str(value).encode()
            self._cond.notify_all()
        return [b"ok", str(value).encode()]

    def _op_compare_set(self, a: List[bytes]) -> List[bytes]:
        key, expected, desired = a[0], a[1], a[2]
        with self._cond:
            current = self._data.get(key)
            if current is None:
                if expected:
                    return [b"ok", expected]
                current = None
            if current is None or current == expected:
                self._data[key] = desired
                self._cond.notify_all()
                return [b"ok", desired]
            return [b"ok", current]

    def _op_append(self, a: List[bytes]) -> List[bytes]:
        with self._cond:
            self._data[a[0]] = self._data.get(a[0], b"") + a[1]
            self._cond.notify_all()
        return [b"ok"]

    def _op_wait(self, a: List[bytes]) -> List[bytes]:
        return [b"ok"] if self._wait_keys(a[1:], int(a[0])) else [b"timeout"]

    def _op_check(self, a: List[bytes]) -> List[bytes]:
        with self._cond:
            return [b"ok", b"1" if all(k in self._data for k in a) else b"0"]

    def _op_delete(self, a: List[bytes]) -> List[bytes]:
        with self._cond:
            return [b"ok", b"1" if self._data.pop(a[0], None) is not None else b"0"]

    def _op_num_keys(self, a: List[bytes]) -> List[bytes]:
        with self._cond:
            return [b"ok", str(len(self._data)).encode()]

    def _op_multi_get(self, a: List[bytes]) -> List[bytes]:
        if not self._wait_keys(a[1:], int(a[0])):
            return [b"timeout"]
        with self._cond:
            return [b"ok"] + [self._data[k] for k in a[1:]]

    def _op_multi_set(self, a: List[bytes]) -> List[bytes]:
        if len(a) % 2:
            raise ValueError("multi_set needs as many values as keys")
        half = len(a) // 2
        with self._cond:
            self._data.update(zip(a[:half], a[half:]))
            self._cond.notify_all()
        return [b"ok"]


_HANDLERS = {
    b"set": AuthStoreServer._op_set, b"get": AuthStoreServer._op_get,
    b"add": AuthStoreServer._op_add, b"compare_set": AuthStoreServer._op_compare_set,
    b"append": AuthStoreServer._op_append, b"wait": AuthStoreServer._op_wait,
    b"check": AuthStoreServer._op_check, b"delete": AuthStoreServer._op_delete,
    b"num_keys": AuthStoreServer._op_num_keys, b"multi_get": AuthStoreServer._op_multi_get,
    b"multi_set": AuthStoreServer._op_multi_set,
}


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


def secret_mismatches() -> List[str]:
    """Addresses that proved a different job secret to this process's store, oldest first."""
    return list(_MISMATCHES)
