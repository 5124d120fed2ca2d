"""The authenticated store under attack: slow handshakes, floods, failed accepts, tampering, wrong secrets."""
from __future__ import annotations

import errno
import logging
import socket
import time

import pytest

from distrib.comm import store_server
from distrib.comm.auth_handshake import (MAGIC, SecretMismatchError, client_handshake, decode_fields,
                                         encode_fields)
from distrib.comm.auth_store import AuthStore, AuthStoreServer, secret_mismatches

pytestmark = pytest.mark.timeout(60)
SECRET = b"unit-test-job-secret"


def _closed(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (reading whatever it sends)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if sock.recv(4096) == b"":
                return True
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True
    return False


def test_a_handshake_trickled_one_byte_at_a_time_is_dropped_at_the_whole_deadline():
    server = AuthStoreServer("127.0.0.1", 0, SECRET, handshake_seconds=1.0)
    greeting = MAGIC + b"n" * 32
    sent = 0
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        dropped = False
        while sent < len(greeting) and not dropped:
            try:
                sock.sendall(greeting[sent:sent + 1])
            except OSError:
                dropped = True
                break
            sent += 1
            dropped = _closed(sock, within=0.25)  # the attacker's pace: one byte per 0.25 s
    # each byte came well within any per-read limit; the whole greeting would need ~9.5 s
    assert dropped and sent < len(greeting)
    assert AuthStore("127.0.0.1", server.port, SECRET, 5.0).num_keys() == 0  # still serving
    server.close()


@pytest.mark.parametrize("first", [b"\x00\xce\xf7\x85\x3c", MAGIC[:3] + b"X"], ids=["torch-validate", "near-miss"])
def test_first_bytes_that_are_not_the_greeting_are_refused_at_once(first):
    """A peer that sends a few other bytes and waits for an answer (torch's own `TCPStore` client sends
    5 bytes) is closed on as they arrive, not when the 60 s handshake deadline passes."""
    server = AuthStoreServer("127.0.0.1", 0, SECRET, handshake_seconds=60.0)
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(first)
            assert _closed(sock, within=20.0)
        with socket.create_connection(("127.0.0.1", server.port)) as sock:  # the greeting's start waits on
            sock.sendall(MAGIC[:3])
            assert not _closed(sock, within=0.5)
        assert AuthStore("127.0.0.1", server.port, SECRET, 5.0).num_keys() == 0  # still serving
    finally:
        server.close()


def test_unauthenticated_connections_are_capped_and_the_job_still_connects():
    server = AuthStoreServer("127.0.0.1", 0, SECRET, max_pending=4)
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(12)]
    try:
        owner = AuthStore("127.0.0.1", server.port, SECRET, 5.0)
        owner.set("k", "v")
        assert owner.get("k") == b"v"
        assert sum(_closed(sock, within=2.0) for sock in idle[:8]) == 8  # the oldest were dropped
    finally:
        for sock in idle:
            sock.close()
        server.close()


class _FlakyListener:
    """A listening socket whose first accepts fail as they do when descriptors run out."""

    def __init__(self, real: socket.socket, failures: int) -> None:
        self._real, self.failures = real, failures

    def accept(self):
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return self._real.accept()

    def __getattr__(self, name):
        return getattr(self._real, name)


def test_the_store_keeps_accepting_after_accept_fails(monkeypatch, caplog):
    real_create = socket.create_server
    flaky = []

    def create_server(*args, **kwargs):
        flaky.append(_FlakyListener(real_create(*args, **kwargs), failures=5))
        return flaky[-1]

    monkeypatch.setattr(socket, "create_server", create_server)
    caplog.set_level(logging.WARNING, logger="distrib.comm")
    server = AuthStoreServer("127.0.0.1", 0, SECRET)
    monkeypatch.undo()
    store = AuthStore("127.0.0.1", server.port, SECRET, 10.0)
    store.set("after", "failures")
    assert store.get("after") == b"failures"
    assert server.accept_failures == 5 and caplog.text.count("could not accept") == 1
    server.close()


def _raw_client(server: AuthStoreServer):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return sock, client_handshake(sock, SECRET, "test")


def test_a_tampered_or_replayed_store_message_is_refused():
    server = AuthStoreServer("127.0.0.1", 0, SECRET)
    owner = AuthStore("127.0.0.1", server.port, SECRET, 5.0)
    sock, session = _raw_client(server)
    frame = bytearray(session.seal(encode_fields([b"set", b"key", b"honest"])))
    frame[frame.index(b"honest"):frame.index(b"honest") + 6] = b"forged"
    sock.sendall(bytes(frame))
    assert _closed(sock, within=5.0) and not owner.check(["key"])
    sock.close()
    sock, session = _raw_client(server)
    frame = session.seal(encode_fields([b"add", b"counter", b"1"]))
    sock.sendall(frame)
    assert decode_fields(session.recv(sock)) == [b"ok", b"1"]
    sock.sendall(frame)  # the same frame again: its sequence number is spent
    assert _closed(sock, within=5.0) and owner.add("counter", 0) == 1
    sock.close()
    server.close()


def test_a_secret_mismatch_is_named_on_both_sides_at_once(caplog):
    caplog.set_level(logging.WARNING, logger="distrib.comm")
    server = AuthStoreServer("127.0.0.1", 0, SECRET)
    with pytest.raises(SecretMismatchError, match=f"job secret mismatch: .* 127.0.0.1:{server.port} "):
        AuthStore("127.0.0.1", server.port, b"another job's secret", 30.0)
    deadline = time.monotonic() + 10
    while "job secret mismatch" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.01)  # poll: the server logs from its connection's thread
    assert "127.0.0.1" in secret_mismatches()  # the host: a new source port is not a new peer
    assert "job secret mismatch" in caplog.text and "from 127.0.0.1 to the job's store" in caplog.text
    server.close()


def test_the_chief_names_a_mismatch_when_it_times_out(monkeypatch):
    from distrib.comm.rendezvous import wait_for_all
    from distrib.comm.errors import RendezvousTimeoutError

    seen = store_server.HostLog()
    seen.first_time("10.0.0.7")
    monkeypatch.setattr(store_server, "_MISMATCHES", seen)
    server = AuthStoreServer("127.0.0.1", 0, SECRET)
    store = AuthStore("127.0.0.1", server.port, SECRET, 5.0)
    with pytest.raises(RendezvousTimeoutError, match="job secret mismatch: 10.0.0.7 proved"):
        wait_for_all(store, 0, 2, 0.2, lambda r: f"task {r}")
    server.close()


def _wrong_proof_from(server: AuthStoreServer, source_host: str) -> None:
    """One connection from ``source_host`` (any 127.x.y.z on Linux) that proves another job's secret."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.bind((source_host, 0))  # a fresh source port each time
        sock.connect(("127.0.0.1", server.port))
        with pytest.raises(SecretMismatchError):
            client_handshake(sock, b"another job's secret", "test")


def _mismatch_lines(caplog) -> list:
    return [r.getMessage() for r in caplog.records if "job secret mismatch" in r.getMessage()]


def test_500_wrong_proofs_from_one_host_are_one_line_and_bounded_memory(caplog):
    """Issue 41: the once-per-address key held the source port, so each connection logged a line."""
    caplog.set_level(logging.WARNING, logger="distrib.comm")
    server = AuthStoreServer("127.0.0.1", 0, SECRET)
    before = store_server._MISMATCHES.count("127.0.0.1")
    for _ in range(500):
        _wrong_proof_from(server, "127.0.0.1")
    deadline = time.monotonic() + 30
    while store_server._MISMATCHES.count("127.0.0.1") < before + 500 and time.monotonic() < deadline:
        time.sleep(0.01)  # poll: each refusal is recorded by its connection's thread
    assert store_server._MISMATCHES.count("127.0.0.1") == before + 500
    assert len(_mismatch_lines(caplog)) == 1, _mismatch_lines(caplog)[:3]
    assert len(secret_mismatches()) <= store_server.MAX_NAMED_HOSTS
    owner = AuthStore("127.0.0.1", server.port, SECRET, 5.0)  # the job goes on
    owner.set("k", "v")
    assert owner.get("k") == b"v"
    server.close()


def test_strangers_from_more_hosts_than_named_cost_one_more_line(caplog):
    caplog.set_level(logging.WARNING, logger="distrib.comm")
    server = AuthStoreServer("127.0.0.1", 0, SECRET)
    hosts = [f"127.0.41.{i}" for i in range(1, store_server.MAX_NAMED_HOSTS + 11)]
    for host in hosts:
        for _ in range(3):
            _wrong_proof_from(server, host)
    deadline = time.monotonic() + 30
    while server._mismatched.unnamed < 3 * 10 and time.monotonic() < deadline:
        time.sleep(0.01)  # poll: each refusal is recorded by its connection's thread
    named = _mismatch_lines(caplog)
    assert len(named) == store_server.MAX_NAMED_HOSTS
    assert all(any(f"from {h} " in line for line in named) for h in hosts[:store_server.MAX_NAMED_HOSTS])
    assert caplog.text.count("further hosts are counted, not logged") == 1
    assert server._mismatched.hosts() == hosts[:store_server.MAX_NAMED_HOSTS] and server._mismatched.unnamed == 30
    server.close()
