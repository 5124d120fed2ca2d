"""The chief's side of distrib's key-value store: `AuthStoreServer` (the client is `distrib.comm.auth_store`).

A threaded TCP server holding a dict behind a lock. Each connection must
first prove it holds the job secret (`distrib.comm.auth_handshake`) within
the handshake time; at most ``max_pending`` connections may be unproven at
once (the oldest is dropped for a new one). A peer that proves a different
secret is recorded (`secret_mismatches`, so a rendezvous timeout can name
it) and logged once per host, whatever its source port; the job goes on. What
strangers cost is bounded: at most `MAX_NAMED_HOSTS` hosts are remembered and
named (one line each), the rest are counted and announced by one more line.

Example:
    >>> server = AuthStoreServer("127.0.0.1", 0, b"job-secret")
    >>> server.port > 0
    True
    >>> server.close()
"""
from __future__ import annotations

import collections
import logging
import socket
import threading
import time
from typing import Dict, List, Optional, Sequence

from distrib.comm.auth_handshake import (AuthenticationError, HandshakeAbandoned, ProtocolError, SecretMismatchError,
                                         decode_fields, encode_fields, server_handshake)

__all__ = ["AuthStoreServer", "secret_mismatches", "HostLog", "MAX_NAMED_HOSTS"]

log = logging.getLogger("distrib.comm")
_HANDSHAKE_SECONDS = 10.0  # the whole handshake must end by then, however the peer paces its bytes
_MAX_PENDING = 64  # unauthenticated connections at once; the oldest is dropped for a new one
_ACCEPT_BACKOFF = (0.01, 1.0)  # after a failed accept() (EMFILE...): first and longest pause
_MAX_KEY_BYTES = 4096
#: Hosts remembered (and logged, once each) as strangers or as holders of another secret.
MAX_NAMED_HOSTS = 32


class HostLog:
    """Which hosts were already logged: one line per host, at most ``limit`` hosts, then one more line.

    Thread-safe; its memory is bounded by ``limit`` however many peers connect.

    Example:
        >>> log = HostLog(limit=2)
        >>> [log.first_time(h) for h in ("a", "a", "b", "c", "d")]
        ['new', None, 'new', 'full', None]
        >>> log.hosts(), log.count("a"), log.unnamed
        (['a', 'b'], 2, 2)
    """

    def __init__(self, limit: int = MAX_NAMED_HOSTS) -> None:
        self._limit = limit
        self._counts: "collections.OrderedDict[str, int]" = collections.OrderedDict()
        self._lock = threading.Lock()
        #: Events from hosts beyond ``limit``, counted but not named.
        self.unnamed = 0

    def first_time(self, host: str) -> Optional[str]:
        """``'new'`` for a host to log, ``'full'`` once when the limit is first passed, else None."""
        with self._lock:
            if host in self._counts:
                self._counts[host] += 1
                return None
            if len(self._counts) < self._limit:
                self._counts[host] = 1
                return "new"
            self.unnamed += 1
            return "full" if self.unnamed == 1 else None

    def hosts(self) -> List[str]:
        with self._lock:
            return list(self._counts)

    def count(self, host: str) -> int:
        with self._lock:
            return self._counts.get(host, 0)


_MISMATCHES = HostLog()  # hosts that proved a different job secret to this process's stores


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
        self._strangers = HostLog()
        self._mismatched = HostLog()
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
                host = address.rsplit(":", 1)[0]
                _MISMATCHES.first_time(host)
                self._log_once(self._mismatched, host, "distrib: %s: a connection from %s to the job's store; "
                               "the job goes on without it (further ones from there are not logged)", exc, host)
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
        self._log_once(self._strangers, address, "distrib: refused a connection to the job's store from %s: "
                       "it did not prove it holds the job secret (%s); the job goes on", address, exc)

    @staticmethod
    def _log_once(seen: HostLog, host: str, message: str, *args: object) -> None:
        verdict = seen.first_time(host)
        if verdict == "new":
            log.warning(message, *args)
        elif verdict == "full":
            log.warning("distrib: the job's store refused connections from more than %d hosts; further "
                        "hosts are counted, not logged (the job goes on)", MAX_NAMED_HOSTS)

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


def secret_mismatches() -> List[str]:
    """Hosts that proved a different job secret to this process's stores, oldest first (at most
    `MAX_NAMED_HOSTS`)."""
    return _MISMATCHES.hosts()
